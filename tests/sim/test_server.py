"""AsySG-con, sync-ps and AsySG-incon on the virtual clock: equivalences and staleness."""

from __future__ import annotations

import math

import pytest
import torch

from murmur.config import build_config
from murmur.data.batches import BatchSampler
from murmur.experiment import run
from murmur.reporting.report import read_run
from murmur.training.setup import prepare

ITERATIONS = 30


def _config(name: str, timing=None, **algorithm):
    return build_config(
        {
            "run": {"iterations": ITERATIONS, "eval_every": 10, "seed": 3},
            "data": {"dataset": "blobs", "batch_size": 8},
            "model": {"name": "mlp", "hidden": [6]},
            "timing": timing or {},
            "algorithm": {"name": name, "a": 0.1, **algorithm},
        }
    )


def _sgd_reference(config, batches_per_step: int) -> torch.Tensor:
    """Plain SGD: each step averages the gradients of workers 0..batches_per_step-1."""
    setup = prepare(config)
    problem = setup.problem
    shards = [torch.arange(problem.x_train.shape[0])] * batches_per_step
    sampler = BatchSampler(shards, config.data.batch_size, seed=config.run.seed)
    x = setup.initial[0].clone()
    step = config.algorithm.gradient_step()
    for iteration in range(ITERATIONS):
        indices = sampler.next()
        _, grads = problem.model.loss_and_grad(
            x.expand(batches_per_step, -1).contiguous(),
            problem.x_train[indices],
            problem.y_train[indices],
        )
        x -= step(iteration) * grads.mean(dim=0)
    return x


def test_asysg_con_with_one_worker_is_sequential_sgd():
    config = _config("asysg-con", workers=1, group=1)
    result = run(config)
    torch.testing.assert_close(result.parameters[0], _sgd_reference(config, 1))
    assert result.extra["staleness"]["max"] == 0


def test_asysg_con_with_one_worker_and_no_delay_is_sequential_sgd():
    config = _config("asysg-con", {"latency": 0.0, "bandwidth": 1e30}, workers=1)
    result = run(config)
    torch.testing.assert_close(result.parameters[0], _sgd_reference(config, 1))


def test_sync_ps_is_minibatch_sgd_on_all_workers_batches():
    config = _config("sync-ps", workers=4)
    result = run(config)
    torch.testing.assert_close(result.parameters[0], _sgd_reference(config, 4))
    assert result.extra["staleness"]["histogram"] == [4 * ITERATIONS]
    # Every update: 4 pushes and 4 replies of the whole model (none after the last one).
    assert result.messages == 4 * ITERATIONS + 4 * (ITERATIONS - 1)


def test_asysg_incon_with_one_worker_and_one_version_is_sequential_sgd():
    config = _config("asysg-incon", workers=1, max_delay=0)
    result = run(config)
    torch.testing.assert_close(result.parameters[0], _sgd_reference(config, 1))
    assert result.messages == 0


def test_asysg_con_staleness_stays_within_what_the_timing_allows():
    # Equal workers at a constant pace: each gradient waits for one of every other worker's.
    for workers in (2, 4, 8):
        result = run(_config("asysg-con", workers=workers))
        staleness = result.extra["staleness"]
        assert staleness["max"] == workers - 1
        assert sum(staleness["histogram"]) == ITERATIONS
    # A straggler k times slower sees at most ceil(k cycles) updates of each other worker.
    timing = {"stragglers": 1, "straggler_factor": 4.0, "flops_per_second": 1e7}
    config = _config("asysg-con", timing, workers=4)
    setup = prepare(config)
    flops = 6.0 * setup.initial.shape[1] * 8
    message = 1e-3 + setup.initial.shape[1] * 4 / 1.25e8
    fast, slow = flops / 1e7 + 2 * message, 4 * flops / 1e7 + 2 * message
    bound = 3 * (math.ceil(slow / fast) + 1)
    result = run(config)
    assert 3 < result.extra["staleness"]["max"] <= bound


def test_staleness_grows_with_the_number_of_workers():
    means = [
        run(_config("asysg-con", workers=workers)).extra["staleness"]["mean"]
        for workers in (1, 2, 4, 8)
    ]
    assert means == sorted(means) and means[0] == 0 and means[-1] > means[1]


def test_inconsistent_reads_mix_stored_versions_coordinate_by_coordinate():
    config = _config("asysg-incon", workers=4, max_delay=3)
    result = run(config)
    assert result.extra["staleness"]["max"] >= 1
    from murmur.sim.server import _ServerRun

    setup = prepare(config)
    server = _ServerRun(setup, config.algorithm, lambda record: None, progress=False).server
    versions = [torch.full_like(server.x, float(value)) for value in range(4)]
    server.history.clear()
    server.history.extend(versions)
    mixed, _ = server.read()
    assert set(mixed.unique().tolist()) == {0.0, 1.0, 2.0, 3.0}


def test_a_target_loss_stops_the_run_and_is_reported():
    config = _config("asysg-con", workers=2, target_loss=0.6).replace(**{"run.iterations": "500"})
    result = run(config)
    reached = result.extra["iterations_to_target"]
    assert reached is not None and reached == result.iterations < 500
    assert result.extra["train_loss"] <= 0.6
    assert 0 < result.extra["virtual_seconds_to_target"] <= result.extra["virtual_seconds"]


def test_fewer_virtual_seconds_than_sync_ps_with_a_straggler():
    # Compute-bound (slow flops), so that the straggler matters.
    timing = {"stragglers": 1, "straggler_factor": 4.0, "flops_per_second": 1e6}
    asynchronous = run(_config("asysg-con", timing, workers=4))
    synchronous = run(_config("sync-ps", timing, workers=4))
    # Same number of gradients: 4 per sync update.
    per_gradient_async = asynchronous.extra["virtual_seconds"] / ITERATIONS
    per_gradient_sync = synchronous.extra["virtual_seconds"] / (4 * ITERATIONS)
    assert per_gradient_async < per_gradient_sync


@pytest.mark.parametrize(
    ("name", "setting", "message"),
    [
        ("asysg-con", "algorithm.workers=0", "algorithm.workers must be at least 1"),
        ("asysg-con", "algorithm.group=9", "algorithm.group"),
        ("sync-ps", "algorithm.a=0", "algorithm.a must be positive"),
        ("asysg-incon", "timing.straggler_factor=0.5", "timing.straggler_factor"),
    ],
)
def test_bad_input_is_one_line_and_exit_status_2(capsys, tmp_path, name, setting, message):
    from murmur.cli import main

    preset = {"asysg-con": "asysg-con", "sync-ps": "sync-ps", "asysg-incon": "asysg-incon"}[name]
    status = main(["run", preset, "--set", setting, "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    assert status == 2
    assert err.startswith("murmur: error:") and message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["asysg-con", "asysg-incon"])
def test_recording_the_gradient_norm_changes_nothing_else(tmp_path, name):
    plain = run(_config(name, workers=3), tmp_path / "plain")
    measured = run(_config(name, workers=3, gradient_norm=True), tmp_path / "measured")
    assert torch.equal(plain.parameters, measured.parameters)
    assert plain.extra["staleness"] == measured.extra["staleness"]
    records = read_run(tmp_path / "measured").records
    assert [r["iteration"] for r in records] == [0, 10, 20, 30]
    norms = [r["gradient_norm_squared"] for r in records]
    assert all(value > 0 for value in norms) and norms[-1] < norms[0]
    assert all("gradient_norm_squared" not in r for r in read_run(tmp_path / "plain").records)
