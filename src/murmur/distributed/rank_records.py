"""The evaluation records of a distributed SGD run, made as the run goes.

At each evaluation every rank measures its block of agents (one row of
:data:`ROW_COLUMNS` per agent: test accuracy and loss, counts, then, where the run
holds a validation split out, :data:`VALIDATION_COLUMNS`) and adds, in one
all-reduce, a vector of every agent's rows (its own block filled, zeros
elsewhere), the sum of its block's parameter rows, the sum of their squared
norms and, on rank 0, how many records it has written. The sum gives every rank
the evaluation's record: the rows, the consensus distance
``(sum_i ||x_i||^2 - ||sum_i x_i||^2 / N) / N`` (in float64), and the average
model, the mean of the rows, whose test scores rank 0 measures and adds. Rank 0
writes each record as soon as its sum is in, so that a run killed midway keeps
its curve up to its last evaluation.

No rank waits for a sum during training: a rank that waited would look frozen to
its neighbours, which wait for its next message, and a rank that really froze
would then be named by nobody, every other rank waiting in the sum rather than
for the frozen rank's messages. So the all-reduce is started (``async_op``) and
the rank goes on; after each iteration it takes the sums that are in, in order,
and only at the end (after the neighbours said STOP) does it wait for the last
ones, with the run's deadline, listening for the failures its neighbours report.
A run that rules of ``[collapse]`` watch is the exception: at each evaluation rank 0
waits for the sum, judges the record, and every rank waits for its verdict
(:meth:`RankRecords.agree_stop`), listening for failures as at the end; a rank that
froze inside an evaluation is then named by nobody, the others failing on the
deadline of that evaluation's sum.
The sums run in a gloo process group of their own, whose deadline (the run's
timeout) closes only its own connections, never the mailboxes'.

A checkpoint holds the rank's vectors of the evaluations rank 0 may not have
written yet: each sum says how many records rank 0 had written when it started
hers, and a rank forgets the vectors of those. A resumed run (:func:`agree_records`)
keeps the records every rank's checkpoint knows written, and every rank sums its
kept vectors again, in order: the same records, written again.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NoReturn

import torch
import torch.distributed as dist

from murmur.distributed.failures import PeerFailure
from murmur.distributed.transport import DistributedTransport
from murmur.distributed.wording import first_line
from murmur.metrics.record_types import ModelColumns, SgdRecord, ValidationColumns
from murmur.models.statistics import AgentStatistics, Stacked
from murmur.training.reducer import AgentRows, sgd_record
from murmur.training.sgd_loop import Evaluation

ROW_COLUMNS = (
    "iteration",
    "samples",
    "wall",
    "accuracy",
    "loss",
    "train_loss",
    "events",
    "messages",
    "bytes",
)
"""One agent's measurements at an evaluation, as the ranks sum them."""
VALIDATION_COLUMNS = ("validation_accuracy", "validation_loss")
"""What a run with a validation split adds to each agent's row (after ROW_COLUMNS)."""

POLL_SECONDS = 0.001
"""How often a rank waiting for a sum at the end looks whether it is in."""

ScoreAverage = Callable[[torch.Tensor, Stacked | None], ModelColumns]
"""Rank 0's measure of the average model, a (1, P) row (with the agents' mean running
statistics, for a model with buffers), on the test set."""


@dataclass
class _Sum:
    index: int
    """Which evaluation of the run (0: the one before the first step)."""
    summed: torch.Tensor
    """The vector, summed in place by the all-reduce."""
    work: dist.Work


class RankRecords:
    """The records of the evaluations this rank takes part in (every rank makes every
    record; rank 0, which writes them, with the average model's scores).

    ``on_record``: takes each record as its sum comes in, in order. ``score_average``:
    rank 0's; None on the other ranks, whose records leave the average model out.
    """

    def __init__(
        self,
        transport: DistributedTransport,
        agents: int,
        width: int,
        timeout: float,
        on_record: Callable[[SgdRecord], None],
        score_average: ScoreAverage | None,
        columns: tuple[str, ...] = ROW_COLUMNS,
        statistics: AgentStatistics | None = None,
    ) -> None:
        self.transport = transport
        self.columns = columns
        """The columns of each agent's row: ROW_COLUMNS, then the validation's."""
        self.agents = agents
        self.width = width
        """Parameters per agent."""
        self.statistics = statistics
        """The block's running statistics, whose sum gives the average model's (None: the
        model has no buffers)."""
        self._stats_width = statistics.width if statistics is not None else 0
        self.timeout = timeout
        self.on_record = on_record
        self.score_average = score_average
        self.written = 0
        """Rank 0: the records written so far, those a resumed run kept included."""
        self.next_index = 0
        self.held: dict[int, torch.Tensor] = {}
        """This rank's vector of each evaluation rank 0 may not have written yet."""
        self.pending: deque[_Sum] = deque()
        self.last: SgdRecord | None = None
        try:
            self.group = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout))
        except RuntimeError as error:
            raise PeerFailure([], f"the evaluations' group failed: {first_line(error)}") from None

    @property
    def _rows_end(self) -> int:
        return self.agents * len(self.columns)

    def add(self, at: Evaluation, rows: list[list[float]]) -> None:
        """Start the sum of the evaluation ``at``, this rank's ``rows`` (one per agent of its
        block); the sums that are in first."""
        self.collect()
        params = at.params
        vector = torch.zeros(
            self._rows_end + self.width + self._stats_width + 2, dtype=torch.float64
        )
        first = self.transport.agents[0] * len(self.columns)
        block = torch.tensor(rows, dtype=torch.float64).reshape(-1)
        vector[first : first + block.numel()] = block
        vector[self._rows_end : self._rows_end + self.width] = params.sum(
            dim=0, dtype=torch.float64
        )
        if self.statistics is not None:
            self.statistics.ensure(len(self.transport.agents))  # the initial ones at first
            vector[self._rows_end + self.width : -2] = self.statistics.flat().sum(dim=0)
        vector[-2] = params.to(torch.float64).square().sum()
        vector[-1] = self.written if self.score_average is not None else 0
        self._start(self.next_index, vector)
        self.next_index += 1

    def _start(self, index: int, vector: torch.Tensor) -> None:
        self.held[index] = vector
        summed = vector.clone()
        try:
            work = dist.all_reduce(summed, group=self.group, async_op=True)
        except RuntimeError as error:
            self._fail(index, first_line(error))
        self.pending.append(_Sum(index, summed, work))

    def collect(self) -> None:
        """Make the records whose sums are in, oldest first; never waits."""
        while self.pending and self.pending[0].work.is_completed():
            self._make(self.pending.popleft())

    def finish(self) -> None:
        """Wait (with the run's timeout) for every sum started, and make their records."""
        while self.pending:
            self._wait(self.pending[0].work, self.pending[0].index)
            self._make(self.pending.popleft())

    def agree_stop(self, stop: Callable[[], bool]) -> bool:
        """Collective, after :meth:`add` of an evaluation: whether the run ends there, as
        rank 0 judges it (``stop``, its rules of ``[collapse]``, once it has made the
        record), the same answer on every rank. Rank 0 waits for the record; the other
        ranks wait for rank 0's answer (the group's collectives come in order), listening
        for the failures their neighbours report."""
        judge = self.score_average is not None
        if judge:
            self.finish()
        verdict = torch.tensor([1.0 if judge and stop() else 0.0], dtype=torch.float64)
        index = self.next_index - 1
        try:
            work = dist.all_reduce(verdict, group=self.group, async_op=True)
        except RuntimeError as error:
            self._fail(index, first_line(error))
        self._wait(work, index)
        return bool(verdict[0] > 0)

    def _wait(self, work: dist.Work, index: int) -> None:
        """Wait for ``work`` (evaluation ``index``'s) up to the run's timeout, listening for
        the failures the neighbours report."""
        deadline = time.monotonic() + self.timeout
        while not work.is_completed():
            if time.monotonic() > deadline:
                self._fail(index, f"no answer within {self.timeout:g} s")
            self.transport.raise_failure_within(POLL_SECONDS)

    def _make(self, done: _Sum) -> None:
        try:
            done.work.wait()
        except RuntimeError as error:
            self._fail(done.index, first_line(error))
        summed = done.summed
        written = int(summed[-1])
        for index in [index for index in self.held if index < written]:
            del self.held[index]  # rank 0 has its record
        params_end = self._rows_end + self.width
        mean = summed[self._rows_end : params_end] / self.agents
        spread = max(float(summed[-2] - mean.square().sum() * self.agents), 0.0)
        rows = summed[: self._rows_end].view(self.agents, -1)
        record = agents_record(rows, spread / self.agents, self.columns)
        if self.score_average is not None:
            statistics = None
            if self.statistics is not None:
                means = summed[params_end:-2] / self.agents
                statistics = self.statistics.stacked(means.view(1, -1))
            record.update(self.score_average(mean.view(1, -1), statistics))
            self.written += 1
        self.last = record
        self.on_record(record)

    def _fail(self, index: int, why: str) -> NoReturn:
        """Raise the failure a neighbour reports within a timeout, else one naming none."""
        self.transport.raise_failure_within(self.timeout)
        raise PeerFailure([], f"the sum of evaluation {index} failed ({why})")

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps: the next evaluation's number and the vectors held."""
        indices = sorted(self.held)
        return {
            "next": self.next_index,
            "held": indices,
            "vectors": torch.stack([self.held[i] for i in indices]) if indices else None,
        }

    def resume(self, saved: Mapping[str, Any], first: int) -> None:
        """Continue from a checkpoint's :meth:`state_dict`: sum again the vectors of
        evaluations ``first`` and after (rank 0 kept the ``first`` records before them)."""
        vectors = saved["vectors"]
        held = dict(
            zip(saved["held"], vectors.unbind() if vectors is not None else [], strict=True)
        )
        self.next_index = saved["next"]
        self.written = first
        for index in range(first, self.next_index):
            self._start(index, held[index].to(torch.float64))


def first_held(saved: Mapping[str, Any] | None) -> int:
    """The first evaluation whose vector a checkpoint's :meth:`RankRecords.state_dict`
    holds (its next evaluation's number when it holds none; 0 without a checkpoint)."""
    if saved is None:
        return 0
    return min(saved["held"], default=saved["next"])


def agree_records(saved: Mapping[str, Any] | None) -> int:
    """Collective: the records rank 0 keeps, which every rank's checkpoint knows rank 0
    wrote (the latest first evaluation held); every rank sums again from there."""
    mine = torch.tensor([first_held(saved)], dtype=torch.int64)
    parts = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, mine)
    return int(torch.cat(parts).max())


def agents_record(
    rows: torch.Tensor, consensus: float, columns: tuple[str, ...] = ROW_COLUMNS
) -> SgdRecord:
    """One evaluation's record from every agent's row of ``columns`` (:data:`ROW_COLUMNS`,
    then :data:`VALIDATION_COLUMNS` where the run has a validation split), (agents,
    columns); without the average model."""
    column = {name: rows[:, i] for i, name in enumerate(columns)}
    accuracy = column["accuracy"]
    agent_rows = AgentRows(
        test_accuracy=None if bool(accuracy.isnan().any()) else accuracy.tolist(),
        test_loss=column["loss"].tolist(),
        events=column["events"].to(torch.int64).tolist(),
        messages=column["messages"].to(torch.int64).tolist(),
        bytes=column["bytes"].to(torch.int64).tolist(),
    )
    iteration = int(column["iteration"][0])
    return sgd_record(
        iteration,
        agent_rows,
        samples=int(column["samples"].sum()),
        wall_seconds=float(column["wall"][0]),
        train_loss=None if iteration == 0 else float(column["train_loss"].mean()),
        consensus_distance=consensus,
        model=None,
        validation=_validation(column),
    )


def _validation(column: Mapping[str, torch.Tensor]) -> ValidationColumns | None:
    """The validation columns of the agents' rows (None: the run has no validation
    split); a regression run's accuracy is NaN in the rows, None in the record."""
    if "validation_loss" not in column:
        return None
    accuracy = column["validation_accuracy"]
    return {
        "validation_accuracy": None if bool(accuracy.isnan().any()) else accuracy.tolist(),
        "validation_loss": column["validation_loss"].tolist(),
    }
