"""Hogwild!: real worker processes on one shared model, checked against plain SGD."""

from __future__ import annotations

import json
import multiprocessing
import os
import time

import pytest
import torch

from murmur.cli import main
from murmur.config import build_config
from murmur.data.batches import BatchSampler
from murmur.experiment import run
from murmur.procs import hogwild
from murmur.procs.hogwild import train_shared
from murmur.seeding import derive_seed
from murmur.training.setup import prepare

SIMULATOR_RECORD_KEYS = {
    "iteration",
    "samples",
    "wall_seconds",
    "test_accuracy",
    "test_loss",
    "accuracy_mean",
    "accuracy_min",
    "accuracy_max",
    "train_loss",
    "consensus_distance",
    "events",
    "messages",
    "bytes",
    "events_per_agent",
    "model_accuracy",
    "model_loss",
}


def _config(iterations: int, dataset: str = "blobs", hidden: int = 8, **algorithm):
    return build_config(
        {
            "run": {"iterations": iterations, "eval_every": iterations, "seed": 3},
            "data": {"dataset": dataset, "batch_size": 16},
            "model": {"name": "mlp", "hidden": [hidden]},
            "algorithm": {"name": "hogwild", "workers": 2, **algorithm},
        }
    )


def _train(config, workers: int, **options):
    setup = prepare(config)
    return setup, train_shared(
        setup.problem,
        setup.initial,
        config.algorithm.gradient_step(),
        workers=workers,
        iterations=config.run.iterations,
        seed=config.run.seed,
        **options,
    )


def test_workers_are_separate_processes_that_run_at_the_same_time():
    _, trained = _train(_config(2000, dataset="digits", hidden=64), workers=2)
    assert len(set(trained.pids)) == 2 and min(trained.steps) > 0
    assert os.getpid() not in trained.pids
    (first_start, first_end), (second_start, second_end) = trained.intervals
    assert max(first_start, second_start) < min(first_end, second_end)
    assert trained.train_seconds == pytest.approx(
        max(first_end, second_end) - min(first_start, second_start)
    )
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("workers", [1, 2])
def test_all_workers_together_make_the_iterations(workers):
    config = _config(1001)
    _, trained = _train(config, workers=workers)
    assert len(trained.steps) == workers
    assert sum(trained.steps) == 1001
    assert trained.samples == 1001 * config.data.batch_size


def test_one_worker_is_sequential_sgd_on_the_same_batch_stream():
    config = _config(120, a=0.3, eps=0.05, d2=0.7)
    setup, trained = _train(config, workers=1)
    problem = setup.problem
    step_size = config.algorithm.gradient_step()
    sampler = BatchSampler(
        [problem.sampler.shards[0]],
        config.data.batch_size,
        seed=derive_seed(config.run.seed, "hogwild", 0),
    )
    expected = setup.initial.clone()
    for step in range(config.run.iterations):
        indices = sampler.next()
        _, grads = problem.model.loss_and_grad(
            expected, problem.x_train[indices], problem.y_train[indices]
        )
        expected.add_(grads, alpha=-step_size(step))
    assert not torch.equal(expected, setup.initial)
    torch.testing.assert_close(trained.params, expected, rtol=1e-6, atol=1e-7)


@pytest.mark.kernels
def test_run_trains_the_shared_model_and_compares_with_one_process(tmp_path):
    config = _config(600, dataset="digits", hidden=32, a=0.1)
    result = run(config, tmp_path / "run")
    assert result.accuracy["mean"] > 0.85  # ten classes: chance is 0.1
    assert result.agents == 2 and result.topology == "shared memory"
    assert result.samples == 600 * 16 and result.events == result.messages == 0
    assert result.parameters.shape == prepare(config).initial.shape
    assert result.extra["workers"] == 2
    single = result.extra["single_process"]
    assert single["accuracy"] > 0.85
    assert result.extra["speedup"] == pytest.approx(
        result.samples_per_second / single["samples_per_second"]
    )
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [record["iteration"] for record in records] == [0, 600]
    assert all(set(record) == SIMULATOR_RECORD_KEYS for record in records)
    assert records[-1]["accuracy_mean"] == result.accuracy["mean"]
    assert records[-1]["train_loss"] < records[0]["test_loss"][0]


def test_a_failing_worker_ends_the_run_with_its_error(monkeypatch):
    class BrokenSampler(BatchSampler):
        def next(self):
            raise OSError("disk on fire")

    monkeypatch.setattr(hogwild, "BatchSampler", BrokenSampler)  # forked workers inherit it
    with pytest.raises(RuntimeError, match="worker .* failed: OSError: disk on fire"):
        _train(_config(50), workers=2)
    assert multiprocessing.active_children() == []


def test_hung_workers_are_stopped_instead_of_waited_for(monkeypatch):
    class StuckSampler(BatchSampler):
        def next(self):
            time.sleep(3600)

    monkeypatch.setattr(hogwild, "BatchSampler", StuckSampler)
    started = time.perf_counter()
    with pytest.raises(RuntimeError, match="no step made in 1 s"):
        _train(_config(50), workers=2, stall_seconds=1.0)
    assert time.perf_counter() - started < 10
    assert multiprocessing.active_children() == []


def test_zero_workers_is_refused_on_the_command_line(capsys, tmp_path):
    path = tmp_path / "hogwild.toml"
    path.write_text('[data]\ndataset = "blobs"\n\n[algorithm]\nname = "hogwild"\nworkers = 0\n')
    code = main(["run", str(path), "--quiet", "--out", str(tmp_path / "out")])
    _, err = capsys.readouterr()
    assert code == 2
    assert err.splitlines() == ["murmur: error: algorithm.workers must be at least 1, not 0"]
    assert not (tmp_path / "out").exists()
