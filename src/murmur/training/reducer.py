"""Per-agent rows -> the run's records and outcome, the same for every runtime.

A runtime measures each agent (its test accuracy and loss, its message counts,
for SSFN its training residual) in rows with one entry per agent, in agent
order: the simulator for all its stacked agents at once, the distributed
runtime on each rank for its own agent, gathered across the ranks afterwards.
The functions below turn such rows into the ``metrics.jsonl`` record of one
evaluation and into the run's :class:`~murmur.metrics.records.Outcome`, so that
both runtimes write the same schema from the same arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from murmur.algorithms.ssfn import nme_db
from murmur.metrics.counters import MessageCounters
from murmur.metrics.evaluation import accuracy_summary
from murmur.metrics.record_types import (
    EvaluationRecord,
    LayerRecord,
    MessageColumns,
    ModelColumns,
    SgdRecord,
    TestColumns,
    ValidationColumns,
)
from murmur.metrics.records import Outcome, OutcomeExtra


@dataclass
class AgentRows:
    """One evaluation's measurements, one entry per agent."""

    test_accuracy: list[float] | None
    """None for a regression task."""
    test_loss: list[float]
    events: list[int]
    """Cumulative, like the two below."""
    messages: list[int]
    bytes: list[int]

    @classmethod
    def measure(
        cls,
        accuracy: torch.Tensor | None,
        loss: torch.Tensor,
        counters: MessageCounters,
    ) -> AgentRows:
        """Rows from a model's per-agent test accuracy and loss and the counters."""
        return cls(
            test_accuracy=accuracy.tolist() if accuracy is not None else None,
            test_loss=loss.tolist(),
            events=counters.events_per_agent.tolist(),
            messages=counters.messages_per_agent.tolist(),
            bytes=counters.bytes_per_agent.tolist(),
        )


@dataclass
class LayerRows(AgentRows):
    """A layer-wise evaluation: the test rows, plus each node's training accuracy and
    squared residual ||T_m - Y_m O_m^T||^2 and target ||T_m||^2 on its shard."""

    train_accuracy: list[float]
    train_residual: list[float]
    train_target: list[float]
    steps: list[int]
    """ADMM iterations or asynchronous updates the layer took at each node."""
    rounds: list[int]
    """Gossip rounds at each node, all iterations together."""
    residual: list[float]
    """Each node's final relative residual."""
    converged: list[bool]
    """Whether each node stopped on the tolerance rather than the cap."""


def _agent_columns(rows: AgentRows) -> TestColumns:
    summary = accuracy_summary(rows.test_accuracy)
    return {
        "test_accuracy": summary["per_agent"],
        "test_loss": rows.test_loss,
        "accuracy_mean": summary["mean"],
        "accuracy_min": summary["min"],
        "accuracy_max": summary["max"],
    }


def _message_columns(rows: AgentRows) -> MessageColumns:
    return {
        "events": sum(rows.events),
        "messages": sum(rows.messages),
        "bytes": sum(rows.bytes),
        "events_per_agent": rows.events,
    }


def sgd_record(
    iteration: int,
    rows: AgentRows,
    *,
    samples: int,
    wall_seconds: float,
    train_loss: float | None,
    consensus_distance: float,
    model: ModelColumns | None,
    virtual_seconds: float | None = None,
    validation: ValidationColumns | None = None,
) -> SgdRecord:
    """The record of one evaluation of a mini-batch run (``model``: the average
    model's test scores; ``virtual_seconds``: the simulator's clock; a distributed run
    leaves it out, and its ranks but rank 0, which writes the records, leave out the
    ``model``; ``validation``: the agents' validation columns, where the run holds a
    validation split out)."""
    record: SgdRecord = {
        "iteration": iteration,
        "samples": samples,
        "wall_seconds": wall_seconds,
        **_agent_columns(rows),
        **(validation or {}),
        "train_loss": train_loss,
        "consensus_distance": consensus_distance,
        **_message_columns(rows),
    }
    if model is not None:
        record.update(model)
    if virtual_seconds is not None:
        record["virtual_seconds"] = virtual_seconds
    return record


def layer_record(
    layer: int,
    rows: LayerRows,
    *,
    width: int,
    admm_iterations: int,
    outputs: torch.Tensor,
    wall_seconds: float,
    virtual_seconds: float | None = None,
) -> LayerRecord:
    """The record of one layer of a layer-wise run; ``outputs`` (nodes, Q, n) are
    every node's output matrices (for the consensus distance)."""
    train = accuracy_summary(rows.train_accuracy)
    mean = outputs.mean(dim=0, keepdim=True)
    residual, target = 0.0, 0.0
    for node_residual, node_target in zip(rows.train_residual, rows.train_target, strict=True):
        residual += node_residual
        target += node_target
    record: LayerRecord = {
        "iteration": layer,
        "layer": layer,
        "width": width,
        "admm_iterations": admm_iterations,
        **_agent_columns(rows),
        "train_accuracy": train["per_agent"],
        "train_accuracy_mean": train["mean"],
        "train_nme": nme_db(residual, target),
        "consensus_distance": float((outputs - mean).square().sum() / outputs.shape[0]),
        "relative_consensus_distance": float(
            (outputs - mean).norm() / mean.norm().clamp(min=1e-300) / outputs.shape[0] ** 0.5
        ),
        "solver_steps": max(rows.steps),
        "gossip_rounds": max(rows.rounds),
        "residual": max(rows.residual),
        "converged": all(rows.converged),
        **_message_columns(rows),
        "wall_seconds": wall_seconds,
    }
    if virtual_seconds is not None:
        record["virtual_seconds"] = virtual_seconds
    return record


@dataclass
class AgentTotals:
    """A run's message counts at its end, one entry per agent."""

    events: list[int]
    messages: list[int]
    bytes: list[int]

    @classmethod
    def of(cls, counters: MessageCounters) -> AgentTotals:
        return cls(
            counters.events_per_agent.tolist(),
            counters.messages_per_agent.tolist(),
            counters.bytes_per_agent.tolist(),
        )


@dataclass(frozen=True)
class RunFacts:
    """What a runtime knows of a run as a whole when it ends, beside its last record,
    its message counts and its parameters: the graph, how long it trained and on how
    many samples, and against what its communication is measured."""

    topology: str
    """The graph's name (``none`` where the agents train without one)."""
    iterations: int
    """The iterations the run took (fewer than ``run.iterations`` where a rule stopped it;
    a layer-wise run's ADMM iterations, all layers together)."""
    train_seconds: float
    """Real time of the training steps alone."""
    samples: int
    """Training samples processed, all agents together."""
    rounds: int | None = None
    """The synchronous rounds each agent could have sent in (the communication saving is
    1 - events / (agents x rounds)); None where that is not meaningful."""
    agents: int | None = None
    """How many agents took part; None: one per entry of the totals."""


def run_outcome(
    last_record: EvaluationRecord,
    totals: AgentTotals,
    facts: RunFacts,
    *,
    parameters: torch.Tensor | None,
    extra: OutcomeExtra,
) -> Outcome:
    """The outcome of a run; ``totals`` has one entry per agent that reported (all of
    them unless ``facts.agents`` says more took part)."""
    agents = len(totals.events) if facts.agents is None else facts.agents
    events = sum(totals.events)
    rounds = facts.rounds
    return Outcome(
        agents=agents,
        topology=facts.topology,
        iterations=facts.iterations,
        last_record=last_record,
        events_per_agent=totals.events,
        messages=sum(totals.messages),
        bytes=sum(totals.bytes),
        train_seconds=facts.train_seconds,
        samples=facts.samples,
        communication_saving=1.0 - events / (agents * rounds) if rounds else None,
        parameters=parameters,
        extra=extra,
    )
