"""The simulator's synchronous SGD rounds: their virtual clock and the evaluation of
every agent.

The shared SGD loop (:mod:`murmur.training.sgd_loop`) steps all N agents as one
block: each iteration every agent draws a mini-batch from its shard, the
gradients of all N model copies come from one batched call, and the algorithm
steps all agents at once, talking through an in-memory transport. The virtual
clock (:class:`RoundClock`) adds each round's duration; each evaluation measures
the agents and the average model (:func:`agents_evaluation`) every
``eval_every`` iterations and at the end.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from murmur.algorithms.protocols import Transport
from murmur.metrics.evaluation import (
    average_model_columns,
    consensus_distance,
    validation_columns,
)
from murmur.metrics.record_types import EvaluationRecord, SgdRecord
from murmur.sim.events import ComputeTimes, LinkDelays
from murmur.training.reducer import AgentRows, sgd_record
from murmur.training.setup import Problem
from murmur.training.sgd_loop import Evaluation


@dataclass
class RoundClock:
    """Virtual time of synchronous mini-batch rounds.

    Each iteration every agent computes its gradient (about 6 flops per
    parameter and sample: forward and backward) and the round lasts as long as
    the slowest agent; an iteration in which some agent sends adds the time of
    its largest message (all messages of a round travel in parallel), whose
    size is the encoded size when messages are compressed.
    """

    compute: ComputeTimes
    links: LinkDelays
    flops_per_agent: float

    def round_seconds(self, message_bytes: int) -> float:
        seconds = self.compute.round_seconds(self.flops_per_agent)
        return seconds + (self.links.seconds(message_bytes) if message_bytes > 0 else 0.0)


def agents_evaluation(
    problem: Problem,
    transport: Transport,
    measured: torch.Tensor | None,
    on_record: Callable[[EvaluationRecord], None],
) -> Callable[[Evaluation], SgdRecord]:
    """The loop's ``evaluate`` for every agent of the simulator: each evaluation's
    record, handed to ``on_record``, of the agents ``measured`` (None: all of them)
    on the test set, besides the average model of all of them."""

    def evaluate(at: Evaluation) -> SgdRecord:
        test = (problem.x_test, problem.y_test)
        rows = at.params if measured is None else at.params.index_select(0, measured)
        kept = problem.model.statistics
        statistics = kept.select(measured) if kept is not None and measured is not None else None
        accuracy, loss = problem.model.evaluate(rows, *test, statistics=statistics)
        record = sgd_record(
            at.iteration,
            AgentRows.measure(accuracy, loss, transport.counters),
            samples=at.samples,
            wall_seconds=at.wall_seconds,
            train_loss=at.train_loss,
            consensus_distance=consensus_distance(at.params),
            model=average_model_columns(problem.model, at.params, *test, own=(accuracy, loss)),
            virtual_seconds=at.virtual_seconds,
            validation=validation_columns(problem.model, rows, problem.validation, statistics),
        )
        if measured is not None:
            record["measured_agents"] = measured.tolist()
        on_record(record)
        return record

    return evaluate
