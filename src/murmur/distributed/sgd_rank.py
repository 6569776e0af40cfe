"""A rank of a synchronous SGD run in the distributed runtime: its block of agents
through the shared SGD loop, its evaluations summed across the ranks as they come, and
the run's counters and parameters gathered at the end.

Every rank builds the same run as the simulator (``experiment.prepare``: data,
partition, graph, model and algorithm all come from the seed), keeps its agents' rows
of the parameters (one agent, or a block of ``agents_per_rank`` consecutive agents
stacked on the agent axis) and each agent's own batch stream, and steps the same
algorithm object on those rows. Only the transport differs:
:class:`~murmur.distributed.transport.DistributedTransport` sends a rank's broadcasts
to the ranks holding its agents' neighbours and mixes with what its
:class:`~murmur.distributed.mailbox.Mailbox` received (and, within a block, with its
own rows), in lockstep without barriers, so a run gives the simulator's events,
messages and parameters.

Each evaluation's measurements are summed across the ranks as the run goes
(:mod:`murmur.distributed.rank_records`: fixed-size tensors, no pickles), and rank 0
writes each record, with the average model's test scores, as soon as the sum is in.
Where rules of ``[collapse]`` watch the run (``setup.watched``), rank 0 waits for each
evaluation's sum, judges the record, and every rank learns its verdict in one more
all-reduce (:meth:`~murmur.distributed.rank_records.RankRecords.agree_stop`) before it
steps on: every rank stops at the evaluation that fired, as the simulator's run does.
At the end each rank sends STOP to its neighbours, waits for theirs, and the counters
and parameters are gathered (:class:`RankTotals`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from murmur.algorithms.protocols import Algorithm
from murmur.distributed.checkpoints import RankCheckpoints, Start, agreed_state
from murmur.distributed.failures import PeerFailure
from murmur.distributed.rank_records import (
    ROW_COLUMNS,
    VALIDATION_COLUMNS,
    RankRecords,
    ScoreAverage,
    agree_records,
)
from murmur.distributed.transport import DistributedTransport, all_gather, world_group
from murmur.distributed.varying import OnePeerGraphs, links, topology_name
from murmur.distributed.wording import first_line
from murmur.errors import UsageError
from murmur.metrics.counters import MessageCounters
from murmur.metrics.evaluation import model_columns
from murmur.metrics.record_types import EvaluationRecord, ModelColumns
from murmur.metrics.records import Outcome
from murmur.models.statistics import AgentStatistics, Stacked
from murmur.training.plan import Plan
from murmur.training.reducer import AgentTotals, RunFacts, run_outcome
from murmur.training.setup import Problem, SgdSetup
from murmur.training.sgd_checkpoint import SgdSnapshot, resume_sgd, sgd_snapshot
from murmur.training.sgd_loop import (
    Evaluation,
    SgdBlock,
    SgdHooks,
    SgdProgress,
    SgdTrained,
    train_sgd,
)

__all__ = ["RankTotals", "Restored", "agreed_sgd", "train_rank"]


@dataclass(frozen=True)
class Restored:
    """Where the ranks of an SGD run continue: the iteration all of them saved, this
    rank's state there, and the records rank 0 keeps (:func:`agree_records`)."""

    done: int
    state: dict[str, Any]
    records: int


def agreed_sgd(checked: Plan, saves: RankCheckpoints, rank: int, start: Start) -> Restored | None:
    """Collective, for a continued SGD run: the newest iteration every rank saved, this
    rank's state there and the records rank 0 keeps; None to start afresh (a new run, a
    run of another family, or ranks restarted before they saved an iteration in common)."""
    if checked.kind != "sgd" or start == "new":
        return None
    agreed = agreed_state(saves, rank, checked.config, start, "iteration")
    if agreed is None:
        return None
    done, state = agreed
    evaluations = state.get("evaluations")
    if not isinstance(evaluations, dict):
        raise UsageError(
            f"rank {rank}: its checkpoint of iteration {done} holds no evaluations (an older "
            "murmur kept them elsewhere); start the run again"
        )
    return Restored(done, state, agree_records(evaluations))


def train_rank(
    setup: SgdSetup,
    algorithm: Algorithm,
    on_record: Callable[[EvaluationRecord], None],
    progress: bool,
    *,
    rank: int,
    timeout: float,
    saves: RankCheckpoints,
    restored: Restored | None,
    block: int = 1,
) -> Outcome:
    """Train rank ``rank``'s ``block`` of agents, every evaluation's record to
    ``on_record`` as the ranks' sums of it come in (:mod:`murmur.distributed.rank_records`).

    ``saves``: where and how often this rank saves its part. ``restored``: where the
    ranks continue from (None: from the start).
    """
    topology = setup.config.topology
    transport = DistributedTransport(
        world_group(),
        links(setup.config, setup.graph),
        rank,
        algorithm.initial_sent(setup.initial),
        timeout,
        block=block,
        varying=topology.varying != "none",  # one_peer: the plan refuses any other
    )
    if transport.varying:
        algorithm = OnePeerGraphs(algorithm, transport, setup.graph, topology.every)
    problem = setup.problem
    records = RankRecords(
        transport,
        setup.graph.agents,
        setup.initial.shape[1],
        timeout,
        on_record,
        _average_scorer(problem, setup.initial.dtype) if rank == 0 else None,
        ROW_COLUMNS + VALIDATION_COLUMNS if problem.validation is not None else ROW_COLUMNS,
        statistics=problem.model.statistics,
    )
    resumed = None
    if restored is not None:
        resumed = _restore(setup, algorithm, transport, records, rank, restored)
    transport.start()
    try:
        trained = _train(setup, algorithm, transport, progress, records, resumed, saves)
        transport.finish()
    except PeerFailure as failure:
        transport.abort(failure.ranks)
        raise
    except Exception:
        transport.abort([rank])  # this rank fails: its neighbours need not wait to find out
        raise
    records.finish()
    try:
        return _gather(setup, trained, _last_record(setup, records), transport)
    except RuntimeError as error:
        raise PeerFailure([], f"gathering the results failed: {first_line(error)}") from None


def _average_scorer(problem: Problem, dtype: torch.dtype) -> ScoreAverage:
    """Rank 0's measure of the average model (a float64 (1, P) row) on the test set."""

    def score(mean: torch.Tensor, statistics: Stacked | None) -> ModelColumns:
        return model_columns(
            *problem.model.evaluate(
                mean.to(dtype), problem.x_test, problem.y_test, statistics=statistics
            )
        )

    return score


def _last_record(setup: SgdSetup, records: RankRecords) -> EvaluationRecord:
    """The run's last record: the last one made, or (a run resumed at its end) the last
    one rank 0 kept; the other ranks keep none and report only the iteration."""
    if records.last is not None:
        return records.last
    kept = setup.checkpoints.kept if setup.checkpoints is not None else []
    return kept[-1] if kept else {"iteration": setup.config.run.iterations}


def _restore(
    setup: SgdSetup,
    algorithm: Algorithm,
    transport: DistributedTransport,
    records: RankRecords,
    rank: int,
    restored: Restored,
) -> SgdProgress:
    """Put this rank where the iteration every rank saved left it (every rank's next
    broadcast then has the same number), and sum again the evaluations rank 0 may not
    have written."""
    saved = restored.state
    block = len(transport.agents)
    if saved.get("agents_per_rank", 1) != block:
        raise UsageError(
            f"rank {rank}: its checkpoint holds {saved.get('agents_per_rank', 1)} agents "
            f"per rank, this run {block}; resume with --agents-per-rank "
            f"{saved.get('agents_per_rank', 1)}"
        )
    initial = setup.initial[transport.agents[0] : transport.agents[-1] + 1]
    where = f"rank {rank}: its checkpoint"
    resumed = resume_sgd(
        saved,
        restored.done,
        algorithm,
        initial,
        transport,
        setup.problem.sampler,
        where=where,
        statistics=setup.problem.model.statistics,
    )
    try:
        records.resume(saved["evaluations"], restored.records)
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as error:
        raise UsageError(f"{where} does not fit this run: {error}") from None
    return resumed


def _train(
    setup: SgdSetup,
    algorithm: Algorithm,
    transport: DistributedTransport,
    progress: bool,
    records: RankRecords,
    start: SgdProgress | None,
    saves: RankCheckpoints,
) -> SgdTrained:
    """The rank's block of agents (``transport.agents``) through the shared SGD loop (from
    ``start``, if given), each agent drawing from its own batch stream; the block's
    measurements at each evaluation go to ``records``, its part of the run to ``saves``."""
    config, problem = setup.config, setup.problem
    agents = transport.agents
    block = len(agents)
    stopping = [False]  # rank 0's rules of [collapse] ended the run at the last evaluation

    def evaluate(at: Evaluation) -> None:
        accuracy, loss = problem.model.evaluate(at.params, problem.x_test, problem.y_test)
        rows = _block_rows(at, accuracy, loss, transport.counters, block)
        if problem.validation is not None:
            held = problem.model.evaluate(at.params, *problem.validation)
            rows = [row + _validation_row(*held, i) for i, row in enumerate(rows)]
        records.add(at, rows)
        if setup.watched:
            stopping[0] = records.agree_stop(setup.stop_requested)

    def snapshot(at: SgdProgress) -> SgdSnapshot:
        saved = sgd_snapshot(at, transport, problem.sampler, problem.model.statistics)
        saved["evaluations"] = records.state_dict()
        saved["agents_per_rank"] = block
        return saved

    sgd_block = SgdBlock(
        problem,
        algorithm,
        transport,
        setup.initial[agents[0] : agents[-1] + 1],
        lambda: torch.stack([problem.sampler.next_for(agent) for agent in agents]),
    )
    return train_sgd(
        sgd_block,
        config.run.iterations,
        config.run.eval_every,
        evaluate,
        SgdHooks(
            checkpoints=saves,
            snapshot=snapshot,
            after_step=records.collect,
            stop=lambda: stopping[0],
        ),
        progress=progress,
        start=start,
    )


def _block_rows(
    at: Evaluation,
    accuracy: torch.Tensor | None,
    loss: torch.Tensor,
    counters: MessageCounters,
    block: int,
) -> list[list[float]]:
    """One row of ``ROW_COLUMNS`` per agent of the block at the evaluation ``at``."""
    train_loss = at.train_loss if at.train_loss is not None else float("nan")
    return [
        [
            at.iteration,
            at.samples // block,  # every agent draws one batch an iteration
            at.wall_seconds,
            float(accuracy[i]) if accuracy is not None else float("nan"),
            float(loss[i]),
            train_loss,  # the block's mean: the mean over every block is the run's
            int(counters.events_per_agent[i]),
            int(counters.messages_per_agent[i]),
            int(counters.bytes_per_agent[i]),
        ]
        for i in range(block)
    ]


def _validation_row(accuracy: torch.Tensor | None, loss: torch.Tensor, agent: int) -> list[float]:
    """The block's ``agent``-th validation columns (``VALIDATION_COLUMNS``); a regression
    run's accuracy as NaN."""
    return [float(accuracy[agent]) if accuracy is not None else float("nan"), float(loss[agent])]


def _gather(
    setup: SgdSetup,
    trained: SgdTrained,
    last_record: EvaluationRecord,
    transport: DistributedTransport,
) -> Outcome:
    """Every rank's counters to every rank, parameters to rank 0."""
    world, rank = dist.get_world_size(), dist.get_rank()
    block = len(transport.agents)
    totals = _gathered_totals(transport, trained, world * block)
    params = trained.params.contiguous()
    gathered = [torch.empty_like(params) for _ in range(world)] if rank == 0 else None
    dist.gather(params, gathered, dst=0)
    iterations = trained.iterations  # fewer where a rule of [collapse] stopped the run
    outcome = run_outcome(
        last_record,
        AgentTotals(totals.events, totals.messages, totals.bytes),
        RunFacts(
            topology=topology_name(setup.config, setup.graph),
            iterations=iterations,
            train_seconds=totals.train_seconds,
            samples=sum(totals.samples),
            rounds=iterations,
        ),
        parameters=torch.cat(gathered) if gathered is not None else None,
        extra={
            "runtime": "distributed",
            "world_size": world,
            "agents_per_rank": block,
            "messages_per_agent": totals.messages,
            "bytes_per_agent": totals.bytes,
            # per rank: a block's control headers go to ranks, not to agents
            "control_messages_per_agent": totals.control,
            "rejected_per_agent": totals.rejected,
        },
    )
    outcome.statistics = _gathered_statistics(setup.problem.model.statistics, block)
    return outcome


def _gathered_statistics(statistics: AgentStatistics | None, block: int) -> Stacked | None:
    """Collective: every agent's final running statistics, on rank 0 (None elsewhere, and
    for a model without buffers)."""
    if statistics is None:
        return None
    statistics.ensure(block)
    local = statistics.flat().contiguous()
    world, rank = dist.get_world_size(), dist.get_rank()
    gathered = [torch.empty_like(local) for _ in range(world)] if rank == 0 else None
    dist.gather(local, gathered, dst=0)
    return statistics.stacked(torch.cat(gathered)) if gathered is not None else None


@dataclass(frozen=True)
class RankTotals:
    """What the ranks counted, gathered on every rank: per agent (every rank's block in
    turn) and per rank, and the slowest rank's training seconds."""

    events: list[int]
    messages: list[int]
    bytes: list[int]
    control: list[int]
    """Per rank: a block's control headers go to ranks, not to agents."""
    rejected: list[int]
    samples: list[int]
    train_seconds: float


def _gathered_totals(
    transport: DistributedTransport, trained: SgdTrained, agents: int
) -> RankTotals:
    """Every agent's message counts and every rank's counted totals, on every rank."""
    counters = transport.counters
    own = [counters.events_per_agent, counters.messages_per_agent, counters.bytes_per_agent]
    own_totals = torch.stack([column.to(torch.float64) for column in own], dim=1)
    gathered = all_gather(own_totals).reshape(agents, 3)  # (agents, 3)
    events, messages, sent = gathered.T.to(torch.int64).tolist()
    rank_totals = [
        transport.control_messages,
        transport.rejected,
        trained.train_seconds,
        trained.samples,
    ]
    totals = all_gather(torch.tensor(rank_totals, dtype=torch.float64))  # (world, 4)
    control, rejected, _, samples = totals.T.to(torch.int64).tolist()
    return RankTotals(events, messages, sent, control, rejected, samples, float(totals[:, 2].max()))
