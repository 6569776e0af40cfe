"""The one reducer from per-agent rows to records and outcomes, on hand-computed values."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from murmur.metrics.counters import MessageCounters
from murmur.training.reducer import (
    AgentRows,
    AgentTotals,
    LayerRows,
    RunFacts,
    layer_record,
    run_outcome,
    sgd_record,
)

ROWS = AgentRows(
    test_accuracy=[0.5, 1.0, 0.75],
    test_loss=[0.25, 0.5, 1.0],
    events=[1, 2, 3],
    messages=[2, 4, 6],
    bytes=[20, 40, 60],
)


def test_an_sgd_record_sums_the_counts_and_summarizes_the_accuracies():
    """Totals are the sums over agents; the accuracy summary is mean, min and max."""
    record = sgd_record(
        7,
        ROWS,
        samples=96,
        wall_seconds=1.5,
        train_loss=0.3,
        consensus_distance=0.125,
        model={"model_accuracy": 0.8, "model_loss": 0.4},
        virtual_seconds=2.0,
    )
    assert record["iteration"] == 7 and record["samples"] == 96
    assert (record["model_accuracy"], record["model_loss"]) == (0.8, 0.4)
    assert (record["events"], record["messages"], record["bytes"]) == (6, 12, 120)
    assert record["events_per_agent"] == [1, 2, 3]
    assert record["accuracy_mean"] == pytest.approx(0.75)
    assert (record["accuracy_min"], record["accuracy_max"]) == (0.5, 1.0)
    assert record["test_loss"] == [0.25, 0.5, 1.0]
    assert record["virtual_seconds"] == 2.0


def test_a_record_without_a_virtual_clock_has_no_virtual_seconds_and_regression_no_accuracy():
    """A distributed run leaves virtual_seconds out; a regression task has no accuracy."""
    rows = AgentRows(None, [1.0], [0], [0], [0])
    record = sgd_record(
        0,
        rows,
        samples=0,
        wall_seconds=0.0,
        train_loss=None,
        consensus_distance=0.0,
        model={"model_accuracy": None, "model_loss": 1.0},
    )
    assert "virtual_seconds" not in record
    assert record["model_accuracy"] is None
    assert record["accuracy_mean"] is None and record["test_accuracy"] is None


def test_a_layer_record_takes_the_nme_of_the_summed_residuals_and_the_spread_of_outputs():
    """train_nme = 10 log10(sum residual / sum target); consensus = mean ||O_m - O_bar||^2."""
    rows = LayerRows(
        test_accuracy=[0.5, 0.5],
        test_loss=[1.0, 2.0],
        events=[3, 3],
        messages=[6, 6],
        bytes=[48, 48],
        train_accuracy=[0.25, 0.75],
        train_residual=[1.0, 3.0],
        train_target=[20.0, 20.0],
        steps=[40, 50],
        rounds=[400, 500],
        residual=[1e-5, 2e-5],
        converged=[True, False],
    )
    outputs = torch.tensor([[[1.0, 0.0]], [[3.0, 0.0]]], dtype=torch.float64)
    record = layer_record(2, rows, width=2, admm_iterations=50, outputs=outputs, wall_seconds=0.5)
    assert record["train_nme"] == pytest.approx(10 * math.log10(4.0 / 40.0))
    assert record["consensus_distance"] == pytest.approx(1.0)  # each is 1 from the mean 2
    assert record["train_accuracy_mean"] == pytest.approx(0.5)
    assert (record["layer"], record["width"], record["admm_iterations"]) == (2, 2, 50)
    assert record["messages"] == 12 and record["events_per_agent"] == [3, 3]
    # sqrt(mean ||O_m - O_bar||^2) / ||O_bar|| = 1 / 2; the slowest node's work; all converged?
    assert record["relative_consensus_distance"] == pytest.approx(0.5)
    assert (record["solver_steps"], record["gossip_rounds"]) == (50, 500)
    assert record["residual"] == 2e-5 and record["converged"] is False


def test_an_outcome_counts_the_saving_against_every_agent_sending_every_round():
    """communication_saving = 1 - events / (agents x rounds); None without rounds."""
    totals = AgentTotals(events=[5, 10], messages=[10, 20], bytes=[100, 200])
    facts = RunFacts(topology="ring", iterations=20, train_seconds=1.0, samples=64)
    kwargs = dict(parameters=None, extra={})
    outcome = run_outcome({"iteration": 20}, totals, replace(facts, rounds=20), **kwargs)
    assert outcome.agents == 2
    assert outcome.communication_saving == pytest.approx(1 - 15 / 40)
    assert (outcome.messages, outcome.bytes, outcome.events_per_agent) == (30, 300, [5, 10])
    assert run_outcome({}, totals, facts, **kwargs).communication_saving is None
    assert run_outcome({}, totals, replace(facts, agents=4), **kwargs).agents == 4


def test_rows_are_measured_from_the_per_agent_tensors_and_the_counters():
    """Accuracy and loss as lists (accuracy None for regression), counts from the counters."""
    counters = MessageCounters(2)
    counters.record_event(1, 3, 8)
    rows = AgentRows.measure(torch.tensor([0.5, 1.0]), torch.tensor([0.25, 2.0]), counters)
    assert rows == AgentRows([0.5, 1.0], [0.25, 2.0], [0, 1], [0, 3], [0, 24])
    assert AgentRows.measure(None, torch.tensor([1.0, 2.0]), counters).test_accuracy is None


def test_an_sgd_record_has_exactly_the_schema_fields():
    """Every key of a mini-batch record, with its value."""
    record = sgd_record(
        3,
        ROWS,
        samples=24,
        wall_seconds=1.5,
        train_loss=0.3,
        consensus_distance=0.125,
        model={"model_accuracy": 0.75, "model_loss": 0.5},
    )
    assert record == {
        "iteration": 3,
        "samples": 24,
        "wall_seconds": 1.5,
        "test_accuracy": [0.5, 1.0, 0.75],
        "test_loss": [0.25, 0.5, 1.0],
        "accuracy_mean": pytest.approx(0.75),
        "accuracy_min": 0.5,
        "accuracy_max": 1.0,
        "train_loss": 0.3,
        "consensus_distance": 0.125,
        "events": 6,
        "messages": 12,
        "bytes": 120,
        "events_per_agent": [1, 2, 3],
        "model_accuracy": 0.75,
        "model_loss": 0.5,
    }


def test_a_layer_record_has_exactly_the_schema_fields():
    """Every key of a layer record, with its value, virtual clock included."""
    rows = LayerRows([1.0], [0.5], [2], [4], [32], [0.75], [1.0], [100.0], [7], [0], [1e-6], [True])
    outputs = torch.ones(1, 1, 2, dtype=torch.float64)
    record = layer_record(
        1, rows, width=4, admm_iterations=9, outputs=outputs, wall_seconds=0.5, virtual_seconds=3.0
    )
    assert record == {
        "iteration": 1,
        "layer": 1,
        "width": 4,
        "admm_iterations": 9,
        "test_accuracy": [1.0],
        "test_loss": [0.5],
        "accuracy_mean": 1.0,
        "accuracy_min": 1.0,
        "accuracy_max": 1.0,
        "train_accuracy": [0.75],
        "train_accuracy_mean": 0.75,
        "train_nme": pytest.approx(-20.0),
        "consensus_distance": 0.0,
        "relative_consensus_distance": 0.0,
        "solver_steps": 7,
        "gossip_rounds": 0,
        "residual": 1e-6,
        "converged": True,
        "events": 2,
        "messages": 4,
        "bytes": 32,
        "events_per_agent": [2],
        "wall_seconds": 0.5,
        "virtual_seconds": 3.0,
    }


def test_an_outcome_keeps_the_topology_iterations_and_the_run_fields():
    """The fields passed through to the outcome unchanged."""
    totals = AgentTotals.of(MessageCounters(2))
    parameters = torch.zeros(2, 3)
    outcome = run_outcome(
        {"iteration": 20},
        totals,
        RunFacts(topology="ring", iterations=20, train_seconds=1.5, samples=64),
        parameters=parameters,
        extra={"k": 1},
    )
    assert (outcome.topology, outcome.iterations, outcome.samples) == ("ring", 20, 64)
    assert outcome.train_seconds == 1.5 and outcome.last_record == {"iteration": 20}
    assert outcome.parameters is parameters and outcome.extra == {"k": 1}
    assert (outcome.events_per_agent, outcome.messages, outcome.bytes) == ([0, 0], 0, 0)


def test_a_layer_record_refuses_residuals_and_targets_of_different_node_counts():
    """One residual and one target per node, or an error."""
    rows = LayerRows([1.0], [0.5], [0], [0], [0], [1.0], [1.0, 2.0], [4.0], [1], [0], [0.0], [True])
    with pytest.raises(ValueError):
        layer_record(
            0, rows, width=1, admm_iterations=1, outputs=torch.ones(1, 1, 1), wall_seconds=0
        )
