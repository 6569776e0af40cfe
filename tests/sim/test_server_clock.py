"""The simulated parameter server's virtual clock and its evaluation records, by hand.

A worker's gradient costs 6 P b flops (P parameters, batch b); a message of the
model takes latency + 4 P / bandwidth, and shared memory sends none.
"""

from __future__ import annotations

import time

import pytest

from murmur.config import build_config
from murmur.sim.server import run_server
from murmur.training.setup import prepare

TIMING = {"flops_per_second": 1e5, "latency": 0.5, "bandwidth": 1e3}
BATCH = 8


def _run(name: str, iterations: int, **algorithm):
    config = build_config(
        {
            "run": {"iterations": iterations, "eval_every": 2, "seed": 3},
            "data": {"dataset": "blobs", "batch_size": BATCH},
            "model": {"name": "mlp", "hidden": [6]},
            "timing": TIMING,
            "algorithm": {"name": name, "a": 0.1, **algorithm},
        }
    )
    setup = prepare(config)
    parameters = setup.initial[0].numel()
    records = []
    started = time.perf_counter()
    outcome = run_server(setup, config.algorithm, records.append, progress=False)
    elapsed = time.perf_counter() - started
    compute = 6.0 * parameters * BATCH / TIMING["flops_per_second"]
    message = TIMING["latency"] + 4 * parameters / TIMING["bandwidth"]
    return outcome, records, elapsed, compute, message


def test_shared_memory_costs_only_the_gradients():
    """asysg-incon with one worker: iterations x compute, no message time at all."""
    outcome, _, _, compute, _ = _run("asysg-incon", 5, workers=1, max_delay=0)
    assert outcome.extra["virtual_seconds"] == pytest.approx(5 * compute)


def test_a_parameter_server_adds_a_push_and_a_reply_per_update_but_no_reply_after_the_last():
    """asysg-con with one worker: n (compute + message) + (n - 1) messages."""
    outcome, _, _, compute, message = _run("asysg-con", 5, workers=1)
    assert outcome.extra["virtual_seconds"] == pytest.approx(5 * (compute + message) + 4 * message)


def test_the_clock_stops_at_the_last_update_not_at_the_last_gradient_in_flight():
    """Two equal workers, four updates in pairs: the run ends at 2 compute + 3 messages."""
    outcome, _, _, compute, message = _run("asysg-con", 4, workers=2)
    assert outcome.extra["virtual_seconds"] == pytest.approx(2 * compute + 3 * message)


def test_every_evaluation_is_reported_with_both_clocks_and_the_models_metrics():
    """Records at updates 0, 2, 4 with wall and virtual seconds, train accuracy, no spread."""
    outcome, records, elapsed, compute, message = _run("asysg-con", 4, workers=1)
    assert [record["iteration"] for record in records] == [0, 2, 4]
    assert records[-1] is outcome.last_record
    for record in records:
        assert 0.0 <= record["wall_seconds"] <= elapsed
        assert isinstance(record["train_accuracy"], float)
        assert record["consensus_distance"] == 0.0
    assert records[0]["virtual_seconds"] == 0.0
    assert records[1]["virtual_seconds"] == pytest.approx(2 * compute + 3 * message)
    assert 0.0 <= outcome.train_seconds <= elapsed


def test_a_regression_run_reports_no_training_accuracy():
    """Least squares has a training loss but no accuracy."""
    config = build_config(
        {
            "run": {"iterations": 2, "eval_every": 2, "seed": 3},
            "data": {"dataset": "synthetic", "batch_size": BATCH},
            "model": {"name": "linear"},
            "algorithm": {"name": "asysg-con", "workers": 1, "a": 0.01},
        }
    )
    records = []
    run_server(prepare(config), config.algorithm, records.append, progress=False)
    assert [record["train_accuracy"] for record in records] == [None, None]
    assert all(record["train_loss"] > 0 for record in records)
