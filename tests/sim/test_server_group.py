"""AsySG-con on the virtual clock with M > 1 gradients per server update.

Three equal workers at a constant pace: their pushes arrive in worker order, so the
first update averages the gradients of workers 0 and 1, and the second those of
worker 2 and of worker 0's second batch, all four computed at the initial model.
"""

from __future__ import annotations

import torch

from murmur.config import build_config
from murmur.experiment import run
from murmur.training.setup import prepare

WORKERS = 3


def _config(group: int, iterations: int):
    return build_config(
        {
            "run": {"iterations": iterations, "eval_every": 10, "seed": 3},
            "data": {"dataset": "blobs", "batch_size": 8},
            "model": {"name": "mlp", "hidden": [6]},
            "algorithm": {"name": "asysg-con", "a": 0.1, "workers": WORKERS, "group": group},
        }
    )


def _gradients_at_initial_model(config, batches: list[int]) -> tuple[torch.Tensor, list]:
    """The initial model and the gradients there of each worker's next batch, in order."""
    setup = prepare(config)
    problem = setup.problem
    x0 = setup.initial[0].clone()
    gradients = []
    for worker in batches:
        indices = problem.sampler.next_for(worker)
        _, grads = problem.model.loss_and_grad(
            x0.view(1, -1), problem.x_train[indices][None], problem.y_train[indices][None]
        )
        gradients.append(grads[0].clone())
    return x0, gradients


def test_each_update_applies_the_mean_of_two_gradients():
    """M = 2: x2 = x0 - a0 mean(g0, g1) - a1 mean(g2, g0'), every gradient counted once."""
    config = _config(group=2, iterations=2)
    result = run(config)
    x0, (g0, g1, g2, g0_second) = _gradients_at_initial_model(config, [0, 1, 2, 0])
    step = config.algorithm.gradient_step()
    x1 = x0 - step(0) * torch.stack([g0, g1]).mean(dim=0)
    x2 = x1 - step(1) * torch.stack([g2, g0_second]).mean(dim=0)
    torch.testing.assert_close(result.parameters[0], x2)
    assert result.extra["group"] == 2
    assert result.extra["staleness"]["histogram"] == [2, 2]
    assert result.iterations == 2


def test_the_staleness_histogram_counts_m_gradients_per_update():
    """Over many updates, exactly M = 2 gradients are applied (and pushed) per update."""
    iterations = 15
    result = run(_config(group=2, iterations=iterations))
    staleness = result.extra["staleness"]
    assert result.iterations == iterations and result.extra["group"] == 2
    assert sum(staleness["histogram"]) == 2 * iterations
    assert result.events == 2 * iterations
    assert min(result.events_per_agent) > 0, "every worker contributes"


def test_two_gradients_per_update_differ_from_one():
    """M = 2 and M = 1 give different models and counts from the same start."""
    config = _config(group=1, iterations=2)
    single = run(config)
    pair = run(_config(group=2, iterations=2))
    x0, (g0, g1) = _gradients_at_initial_model(config, [0, 1])
    step = config.algorithm.gradient_step()
    x2 = x0 - step(0) * g0 - step(1) * g1
    torch.testing.assert_close(single.parameters[0], x2)
    assert single.extra["group"] == 1
    assert single.extra["staleness"]["histogram"] == [1, 1]
    assert not torch.allclose(single.parameters, pair.parameters)
