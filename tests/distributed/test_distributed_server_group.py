"""AsySG-con in the distributed runtime with M = 2 gradients per server update: a
parameter server on rank 0 and its workers, as real processes on loopback (ranks.py)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from ranks import drive

from murmur.config import load_experiment
from murmur.experiment import run
from murmur.training.setup import prepare

TOML = """
[run]
seed = 3
iterations = {iterations}
eval_every = 5
[data]
dataset = "blobs"
batch_size = 8
[model]
name = "mlp"
hidden = [8]
[algorithm]
name = "asysg-con"
a = 0.2
workers = {workers}
group = 2
"""


def _run(tmp_path: Path, workers: int, iterations: int, params: Path | None = None):
    """Run the server and ``workers`` workers; exit codes, stderr, summary and config."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    config_path = tmp_path / "config.toml"
    config_path.write_text(TOML.format(workers=workers, iterations=iterations))
    out = tmp_path / "run"
    argv = ["run", str(config_path), "--runtime", "distributed", "--out", str(out), "--quiet"]
    report, stderr = drive(
        tmp_path, [*argv, "--timeout", "10"], world=workers + 1, limit=40.0, params=params
    )
    assert report["codes"] == {str(rank): 0 for rank in range(workers + 1)}, stderr
    summary = json.loads((out / "summary.json").read_text())
    ((_, config),) = load_experiment(str(config_path)).runs
    return summary, config


def test_the_first_update_is_the_mean_of_two_gradients_at_the_initial_model(tmp_path):
    """W = M = 2: x1 = x0 - a0 mean of the first two gradients to arrive, both at x0.
    AsySG-con answers each push at once, so a worker that is quicker than the other
    may push twice before the other's first arrives: the pair is (g0, g1) when both
    take about as long, as in the simulator, whose model is then the same bit for bit."""
    params = tmp_path / "params.pt"
    summary, config = _run(tmp_path / "pair", workers=2, iterations=1, params=params)
    assert summary["group"] == 2 and summary["iterations"] == 1
    assert summary["staleness"]["histogram"] == [2]
    setup = prepare(config)
    problem = setup.problem
    x0 = setup.initial[0].to(torch.float32)
    gradients: dict[tuple[int, int], torch.Tensor] = {}
    for worker in range(2):
        for push in range(2):
            indices = problem.sampler.next_for(worker)
            _, grads = problem.model.loss_and_grad(
                x0.view(1, -1), problem.x_train[indices][None], problem.y_train[indices][None]
            )
            gradients[worker, push] = grads[0].to(torch.float32).clone()
    step = config.algorithm.gradient_step()(0)
    pairs = {
        "one each": ((0, 0), (1, 0)),
        "worker 0 twice": ((0, 0), (0, 1)),
        "worker 1 twice": ((1, 0), (1, 1)),
    }
    distributed = torch.load(params)
    close = [
        name
        for name, (one, other) in pairs.items()
        if torch.allclose(
            distributed[0], x0 - step * (gradients[one] + gradients[other]) / 2, atol=1e-5
        )
    ]
    assert len(close) == 1, close
    if close == ["one each"]:
        torch.testing.assert_close(distributed, run(config).parameters, rtol=0, atol=0)


def test_the_staleness_histogram_counts_two_gradients_per_update(tmp_path):
    """W = 3, M = 2: every update applies exactly two pushed gradients."""
    iterations = 20
    summary, _ = _run(tmp_path, workers=3, iterations=iterations)
    assert summary["group"] == 2 and summary["iterations"] == iterations
    assert sum(summary["staleness"]["histogram"]) == 2 * iterations
    assert sum(summary["events_per_agent"]) == 2 * iterations
    assert summary["failed_workers"] == []
