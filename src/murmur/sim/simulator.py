"""The in-process simulator: all agents in one process, agent axis first.

The shared SGD loop (:mod:`murmur.training.sgd_loop`) steps all N agents as one
block: each iteration every agent draws a mini-batch from its shard, the
gradients of all N model copies come from one batched call, and the algorithm
steps all agents at once, talking through an in-memory transport. The virtual
clock adds each round's duration; evaluation records are handed to a callback
every ``eval_every`` iterations and at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from murmur.algorithms.protocols import Algorithm, Transport
from murmur.metrics.evaluation import (
    average_model_columns,
    consensus_distance,
    validation_columns,
)
from murmur.metrics.record_types import EvaluationRecord, SgdRecord
from murmur.sim.events import ComputeTimes, LinkDelays
from murmur.training.checkpoint import Checkpoints
from murmur.training.reducer import AgentRows, sgd_record
from murmur.training.setup import Problem
from murmur.training.sgd_loop import Evaluation, SgdProgress, SgdTrained, train_sgd


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


def simulate(
    problem: Problem,
    algorithm: Algorithm,
    transport: Transport,
    initial: torch.Tensor,
    iterations: int,
    eval_every: int,
    on_record: Callable[[EvaluationRecord], None],
    progress: bool = False,
    clock: RoundClock | None = None,
    start: SgdProgress | None = None,
    checkpoints: Checkpoints | None = None,
    snapshot: Callable[[SgdProgress], Mapping[str, Any]] | None = None,
    measured: torch.Tensor | None = None,
    stop: Callable[[], bool] | None = None,
) -> SgdTrained:
    """Run ``iterations`` steps of ``algorithm`` from stacked ``initial`` parameters
    (every agent), handing each evaluation's record to ``on_record``; ``start``,
    ``checkpoints`` and ``snapshot`` as in :func:`~murmur.training.sgd_loop.train_sgd`;
    ``measured``: the agents each evaluation measures (None: all), besides the average
    model of all of them; ``stop``: asked before every step, true ends the run there."""

    def evaluate(at: Evaluation) -> SgdRecord:
        test = (problem.x_test, problem.y_test)
        rows = at.params if measured is None else at.params.index_select(0, measured)
        accuracy, loss = problem.model.evaluate(rows, *test)
        record = sgd_record(
            at.iteration,
            AgentRows.measure(accuracy, loss, transport.counters),
            samples=at.samples,
            wall_seconds=at.wall_seconds,
            train_loss=at.train_loss,
            consensus_distance=consensus_distance(at.params),
            model=average_model_columns(problem.model, at.params, *test, own=(accuracy, loss)),
            virtual_seconds=at.virtual_seconds,
            validation=validation_columns(problem.model, rows, problem.validation),
        )
        if measured is not None:
            record["measured_agents"] = measured.tolist()
        on_record(record)
        return record

    return train_sgd(
        problem,
        algorithm,
        transport,
        initial,
        problem.sampler.next,
        iterations,
        eval_every,
        evaluate,
        progress=progress,
        round_seconds=clock.round_seconds if clock is not None else None,
        start=start,
        checkpoints=checkpoints,
        snapshot=snapshot,
        stop=stop,
    )
