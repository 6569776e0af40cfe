"""Equivalences that pin the algorithms down exactly: known optima, and methods that
become one another at particular settings."""

from __future__ import annotations

import torch
from small_runs import least_squares_error
from torch.nn import functional

from murmur.config import build_config
from murmur.data.batches import BatchSampler
from murmur.experiment import run
from murmur.training.setup import prepare


def _config(algorithm: dict, **sections: dict):
    raw = {
        "run": {"iterations": 40, "eval_every": 40},
        "data": {"dataset": "blobs", "partition": "labels", "labels_per_agent": 2},
        "model": {"name": "mlp", "hidden": [16]},
        "topology": {"graph": "ring", "agents": 6},
        "algorithm": algorithm,
    }
    for name, values in sections.items():
        raw[name] = {**raw.get(name, {}), **values}
    return build_config(raw)


def test_detsgrad_with_zero_threshold_is_dsgd_with_laplacian_weights():
    detsgrad = run(_config({"name": "detsgrad", "a": 0.2, "b": 0.3, "v0": 0.0, "d1": 0.0}))
    dsgd = run(
        _config({"name": "dsgd", "a": 0.2, "b": 0.3, "weights": "laplacian", "order": "cta"})
    )
    torch.testing.assert_close(detsgrad.parameters, dsgd.parameters, rtol=1e-5, atol=1e-6)
    assert detsgrad.events == dsgd.events == 6 * 40
    assert detsgrad.messages == dsgd.messages == 2 * 6 * 40


def test_detsgrad_threshold_saves_messages_counted_by_degree():
    silent = run(_config({"name": "detsgrad", "a": 0.2, "b": 0.3, "v0": 5.0, "d1": 0.0}))
    assert 0 < silent.events < 6 * 40
    assert silent.messages == sum(2 * e for e in silent.events_per_agent)  # ring: degree 2
    assert silent.bytes == silent.messages * silent.parameters.shape[1] * 4


def test_dsgd_with_exact_averaging_follows_centralized_sgd_on_the_union_of_batches():
    agents, steps, alpha = 5, 25, 0.3
    config = _config(
        {"name": "dsgd", "a": alpha, "eps": 0.0, "b": 1.0 / agents, "order": "atc"},
        run={"iterations": steps, "eval_every": steps},
        topology={"graph": "complete", "agents": agents},
        data={"partition": "iid"},
    )
    result = run(config)
    # Centralized SGD written out by hand with autograd on the union of the same batches.
    setup = prepare(config)
    sampler = BatchSampler(setup.problem.sampler.shards, config.data.batch_size, config.run.seed)
    module = setup.problem.model.module
    with torch.no_grad():
        for param, value in zip(
            module.parameters(),
            setup.problem.model.layout.unflatten(setup.initial[:1]).values(),
            strict=True,
        ):
            param.copy_(value[0])
    for _ in range(steps):
        union = sampler.next().reshape(-1)
        module.zero_grad()
        loss = functional.cross_entropy(
            module(setup.dataset.x_train[union]), setup.dataset.y_train[union]
        )
        loss.backward()
        with torch.no_grad():
            for param in module.parameters():
                param -= alpha * param.grad
    expected = setup.problem.model.layout.flatten(module)
    for agent in range(agents):
        torch.testing.assert_close(result.parameters[agent], expected, rtol=1e-4, atol=1e-5)


def test_every_agent_converges_to_the_least_squares_optimum():
    error, result = least_squares_error({"name": "detsgrad", "b": 0.3, "v0": 0.5})
    assert error < 5e-3, error
    assert result.communication_saving > 0.2
