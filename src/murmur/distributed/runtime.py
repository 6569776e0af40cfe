"""The distributed runtime: one process per agent, or per block of agents, on
torch.distributed (gloo).

Every rank builds the same run as the simulator (``experiment.prepare``: data,
partition, graph, model and algorithm all come from the seed), keeps its
agents' rows of the parameters (one agent, or a block of ``agents_per_rank``
consecutive agents stacked on the agent axis) and each agent's own batch
stream, and steps the same algorithm object on those rows. Only the transport
differs: :class:`~murmur.distributed.transport.DistributedTransport` sends a rank's
broadcasts to the ranks holding its agents' neighbours and mixes with what its
:class:`~murmur.distributed.mailbox.Mailbox` received (and, within a block, with its
own rows), in lockstep without barriers, so a run gives the simulator's events,
messages and parameters.

Each evaluation's measurements are summed across the ranks as the run goes
(:mod:`murmur.distributed.rank_records`: fixed-size tensors, no pickles), and rank 0
writes each record, with the average model's test scores, as soon as the sum is in.
At the end each rank sends STOP to its neighbours, waits for theirs, and the
counters and parameters are gathered; rank 0 writes the run folder
(``experiment.run``), with real wall-clock times.

The other kinds of algorithm have their own modules: dSSFN, one node per rank,
in :mod:`murmur.distributed.layer_ranks`; AsySG-con, a parameter server
on rank 0 and one worker per other rank (WORLD_SIZE = algorithm.workers + 1),
in :mod:`murmur.distributed.server`. ``murmur launch`` is
:mod:`murmur.distributed.launch`.

Ranks are started by ``torchrun`` (one machine or many) or by ``murmur
launch`` (forked on loopback, :mod:`murmur.distributed.local_ranks`); they read
RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT from the environment. Started
without torchrun, rank 0 hosts the rendezvous store itself, listening on
MASTER_ADDR only (loopback unless the user gives an address); with a loopback
MASTER_ADDR gloo is bound to the loopback interface too (GLOO_SOCKET_IFNAME,
unless set).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from murmur.algorithms.protocols import Algorithm
from murmur.config import Config, TimingConfig, load_experiment, same_config
from murmur.distributed.checkpoints import (
    FOLDER,
    RankCheckpoints,
    Start,
    agreed_state,
    check_agents_per_rank,
    kept_checkpoints,
    rank_file,
    readable_iterations,
)
from murmur.distributed.layer_ranks import run_layerwise_rank
from murmur.distributed.mailbox import (
    PeerFailure,
    first_line,
)
from murmur.distributed.rank_records import (
    ROW_COLUMNS,
    VALIDATION_COLUMNS,
    RankRecords,
    ScoreAverage,
    agree_records,
)
from murmur.distributed.server import newest_server_checkpoint, server_runner
from murmur.distributed.transport import (
    DEFAULT_TIMEOUT,
    DistributedTransport,
    all_gather,
    world_group,
)
from murmur.distributed.varying import OnePeerGraphs, exchange_span, links, topology_name
from murmur.errors import UsageError
from murmur.metrics.counters import MessageCounters
from murmur.metrics.evaluation import model_columns
from murmur.metrics.record_types import EvaluationRecord, ModelColumns
from murmur.metrics.records import Outcome, RunResult
from murmur.registry import ALGORITHMS
from murmur.training.checkpoint import header, read_checkpoint
from murmur.training.plan import Plan, check_world, plan
from murmur.training.reducer import AgentTotals, run_outcome
from murmur.training.runs import OnRecord, Runner, check_run_dir, finished, train_run
from murmur.training.setup import (
    LayerSetup,
    Problem,
    RoundsSetup,
    ServerSetup,
    Setup,
    SgdSetup,
    prepare,
)
from murmur.training.sgd_checkpoint import SgdSnapshot, resume_sgd, sgd_snapshot
from murmur.training.sgd_loop import Evaluation, SgdProgress, SgdTrained, train_sgd


@dataclass(frozen=True)
class RankEnvironment:
    """Where this process sits in the job, from the torchrun environment variables."""

    rank: int
    world: int
    address: str
    port: int
    agent_store: bool
    """Started by torchrun, whose agent hosts the rendezvous store."""
    attempt: int = 0
    """How many times torchrun restarted the job's ranks (TORCHELASTIC_RESTART_COUNT)."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> RankEnvironment:
        names = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
        missing = [name for name in names if not environ.get(name)]
        if missing:
            raise UsageError(
                f"--runtime distributed runs one rank of a torchrun job and needs "
                f"{', '.join(missing)} in the environment; start it with "
                "`murmur launch --nproc N PRESET` or with torchrun"
            )
        try:
            rank, world, port = (
                int(environ[name]) for name in ("RANK", "WORLD_SIZE", "MASTER_PORT")
            )
        except ValueError:
            raise UsageError("RANK, WORLD_SIZE and MASTER_PORT must be integers") from None
        if not 0 <= rank < world:
            raise UsageError(f"RANK must be in 0..WORLD_SIZE-1, got RANK={rank} WORLD_SIZE={world}")
        if not 0 < port < 65536:
            raise UsageError(f"MASTER_PORT must be a port number (1..65535), not {port}")
        agent_store = environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
        restarts = environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        attempt = int(restarts) if restarts.isdigit() else 0
        return cls(rank, world, environ["MASTER_ADDR"], port, agent_store, attempt)


def run_distributed(
    config: Config | Plan,
    out_dir: str | Path | None = None,
    *,
    name: str = "",
    preset: str = "",
    progress: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    environ: Mapping[str, str] = os.environ,
    resume: bool = False,
    agents_per_rank: int = 1,
) -> RunResult:
    """Run this process's rank of ``config``; rank 0 writes ``out_dir``.

    ``config``: the run's config, or the plan ``murmur launch`` made of it for every
    rank (with its own ``agents_per_rank``). Every rank returns the gathered result;
    only rank 0's holds the run folder and the final parameters (agents, P). Raises
    UsageError for bad input (before any training), PeerFailure when a peer fails.

    ``resume``: continue the stopped run in ``out_dir`` from the newest iteration
    every rank saved (:mod:`murmur.distributed.checkpoints`). A rank that torchrun
    restarted after a failure (TORCHELASTIC_RESTART_COUNT > 0) continues the
    same way, or starts over when the ranks saved no iteration in common.

    ``agents_per_rank``: the block of consecutive agents each rank holds
    (WORLD_SIZE x agents_per_rank = topology.agents).
    """
    if timeout <= 0:
        raise UsageError(f"the timeout must be positive, not {timeout:g}")
    if isinstance(config, Plan):
        checked = config
    else:
        checked = plan(config, "distributed", agents_per_rank=agents_per_rank)
    if resume and out_dir is None:
        raise ValueError("a resumed run needs its run folder")
    env = RankEnvironment.from_environ(environ)
    check_world(checked.config, env.world, agents_per_rank=checked.agents_per_rank)
    start = _start(checked, env, resume, out_dir)
    if env.rank == 0:
        _note_timing(checked.config)
    setup = prepare(checked)
    saves = _rank_saves(checked, out_dir, env.rank, setup, name, preset)
    run_dir = Path(out_dir) if out_dir is not None and env.rank == 0 else None
    folder_kept = _rank_zero_folder(checked, run_dir, start, saves)
    _init_group(env, timeout)
    try:
        restored = _agree_sgd(checked, saves, env.rank, start, folder_kept)
        return train_run(
            setup,
            run_dir,
            name=name,
            preset=preset,
            progress=progress and env.rank == 0,
            runner=_rank_runner(checked, env.rank, timeout, saves, start, restored),
            resume=folder_kept,
        )
    except PeerFailure as failure:
        raise PeerFailure(failure.ranks, f"rank {env.rank} stopped: {failure}") from None
    finally:
        dist.destroy_process_group()


def _note_timing(config: Config) -> None:
    """A note on stderr that the distributed runtime ignores ``[timing]``."""
    if config.timing != TimingConfig():
        print(
            "murmur: note: [timing] sets the simulator's virtual clock; a distributed run "
            "takes real time and ignores it",
            file=sys.stderr,
        )


def _start(checked: Plan, env: RankEnvironment, resume: bool, out_dir: str | Path | None) -> Start:
    """How this rank starts: afresh, resumed by the user, or restarted by torchrun (which
    continue from checkpoints only where the run saves them)."""
    saved = "distributed" in ALGORITHMS[checked.config.algorithm.name].capabilities.checkpoints
    if out_dir is None or not saved:
        return "new"
    return "resume" if resume else "restart" if env.attempt > 0 else "new"


def _rank_saves(
    checked: Plan, out_dir: str | Path | None, rank: int, setup: Setup, name: str, preset: str
) -> RankCheckpoints:
    """Where and how often this rank saves its part of the run."""
    config = checked.config
    return RankCheckpoints(
        every=config.run.checkpoint_every,
        path=Path(out_dir) / FOLDER if out_dir is not None else None,
        header=header(config, name, preset),
        records=lambda: 0,
        rank=rank,
        keep=kept_checkpoints(
            links(config, setup.graph),
            config.run.checkpoint_every,
            span=exchange_span(config, setup.graph),
        ),
    )


def _rank_zero_folder(
    checked: Plan, run_dir: Path | None, start: Start, saves: RankCheckpoints
) -> dict[str, Any] | None:
    """Rank 0's folder: checked to be empty for a new run; for one that continues,
    checked to be its own, with how many of its records it keeps."""
    if run_dir is None:
        return None
    config = checked.config
    if start == "new" or not (run_dir / "config.toml").is_file():
        check_run_dir(run_dir)
        return None
    check_same_run(run_dir, config)
    # dSSFN's rank 0 writes the restored layers' records again (LayerStream); SGD: _agree_sgd
    kept = {"records": 0}
    if checked.kind == "server":  # the server writes them as it goes
        saved = newest_server_checkpoint(saves, config)
        kept["records"] = saved["state"]["records"] if saved is not None else 0
    return kept


@dataclass(frozen=True)
class _Restored:
    """Where the ranks of an SGD run continue: the iteration all of them saved, this
    rank's state there, and the records rank 0 keeps (:func:`agree_records`)."""

    done: int
    state: dict[str, Any]
    records: int


def _agree_sgd(
    checked: Plan,
    saves: RankCheckpoints,
    rank: int,
    start: Start,
    folder_kept: dict[str, Any] | None,
) -> _Restored | None:
    """Collective, for a continued SGD run: the newest iteration every rank saved and
    the records rank 0 keeps (set in ``folder_kept``, rank 0's); None to start afresh
    (a new run, or ranks restarted before they saved an iteration in common)."""
    restored = _agreed_sgd(checked, saves, rank, start)
    if folder_kept is not None and checked.kind == "sgd":
        folder_kept["records"] = restored.records if restored is not None else 0
    return restored


def _agreed_sgd(checked: Plan, saves: RankCheckpoints, rank: int, start: Start) -> _Restored | None:
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
    return _Restored(done, state, agree_records(evaluations))


def _rank_runner(
    checked: Plan,
    rank: int,
    timeout: float,
    saves: RankCheckpoints,
    start: Start,
    restored: _Restored | None = None,
) -> Runner:
    """The runner of this rank, by the run's family: a block of synchronous SGD agents,
    a dSSFN node, or the parameter server (rank 0) or a worker."""

    def train(setup: Setup, on_record: OnRecord, progress: bool) -> Outcome:
        if isinstance(setup, LayerSetup):
            return run_layerwise_rank(
                setup,
                setup.solver,
                on_record,
                progress,
                rank=rank,
                timeout=timeout,
                saves=saves,
                start=start,
            )
        if isinstance(setup, ServerSetup):
            serve = server_runner(rank, timeout, saves, start)
            return serve(setup, setup.workers, on_record, progress)
        if not isinstance(setup, RoundsSetup):
            raise TypeError(f"no rank trains a {type(setup).__name__}")
        return _train_rank(
            setup,
            setup.algorithm,
            on_record,
            progress,
            rank=rank,
            timeout=timeout,
            saves=saves,
            restored=restored,
            block=checked.agents_per_rank,
        )

    return train


def resume_distributed(
    run_dir: Path,
    *,
    progress: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    environ: Mapping[str, str] = os.environ,
    agents_per_rank: int = 1,
    checked: Plan | None = None,
) -> RunResult:
    """Continue this process's rank of the stopped run in ``run_dir`` (``murmur run
    --resume DIR --runtime distributed``): its config.toml is the config, and every rank
    restores the newest iteration all ranks saved. ``agents_per_rank``: as the stopped
    run had it. ``checked``: the plan ``murmur launch --resume`` made of it."""
    config_file = run_dir / "config.toml"
    if not config_file.is_file():
        raise UsageError(f"{run_dir} has no config.toml: it is not a run folder")
    config = load_experiment(str(config_file)).runs[0][1]
    rank = RankEnvironment.from_environ(environ).rank
    if ALGORITHMS[config.algorithm.name].kind == "server":
        rank = 0  # only the server saves
    check_agents_per_rank(run_dir, config, agents_per_rank)
    folder = run_dir / FOLDER
    iterations = readable_iterations(folder, rank, config)
    if not iterations:
        raise UsageError(
            f"{run_dir} has no readable checkpoint of rank {rank} in {FOLDER}/ to resume from "
            "(a distributed run saves them only with run.checkpoint_every > 0)"
        )
    saved = read_checkpoint(rank_file(folder, rank, iterations[-1]), config, run_dir)
    return run_distributed(
        checked if checked is not None else config,
        run_dir,
        name=saved["name"],
        preset=saved["preset"],
        progress=progress,
        timeout=timeout,
        environ=environ,
        resume=True,
        agents_per_rank=agents_per_rank,
    )


def check_same_run(run_dir: Path, config: Config) -> None:
    """UsageError unless ``run_dir`` holds an unfinished run of ``config``, which a
    resumed or restarted rank 0 may continue."""
    if not same_config((run_dir / "config.toml").read_text(), config):
        raise UsageError(
            f"{run_dir} holds a run of another config; a restarted or resumed run "
            "continues only its own folder"
        )
    if finished(run_dir / "summary.json"):
        raise UsageError(f"{run_dir} holds a finished run; there is nothing to resume")


_TOTALS = ("events", "messages", "bytes", "control", "rejected", "train_seconds", "samples")


def _train_rank(
    setup: SgdSetup,
    algorithm: Algorithm,
    on_record: Callable[[EvaluationRecord], None],
    progress: bool,
    *,
    rank: int,
    timeout: float,
    saves: RankCheckpoints,
    restored: _Restored | None,
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

    def score(mean: torch.Tensor) -> ModelColumns:
        return model_columns(
            *problem.model.evaluate(mean.to(dtype), problem.x_test, problem.y_test)
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
    restored: _Restored,
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

    def evaluate(at: Evaluation) -> None:
        accuracy, loss = problem.model.evaluate(at.params, problem.x_test, problem.y_test)
        rows = _block_rows(at, accuracy, loss, transport.counters, block)
        if problem.validation is not None:
            held = problem.model.evaluate(at.params, *problem.validation)
            rows = [row + _validation_row(*held, i) for i, row in enumerate(rows)]
        records.add(at, rows)

    def snapshot(at: SgdProgress) -> SgdSnapshot:
        saved = sgd_snapshot(at, transport, problem.sampler)
        saved["evaluations"] = records.state_dict()
        saved["agents_per_rank"] = block
        return saved

    return train_sgd(
        problem,
        algorithm,
        transport,
        setup.initial[agents[0] : agents[-1] + 1],
        lambda: torch.stack([problem.sampler.next_for(agent) for agent in agents]),
        config.run.iterations,
        config.run.eval_every,
        evaluate,
        progress=progress,
        start=start,
        checkpoints=saves,
        snapshot=snapshot,
        after_step=records.collect,
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
    per_agent, train_seconds = _gathered_totals(transport, trained, world * block)
    params = trained.params.contiguous()
    gathered = [torch.empty_like(params) for _ in range(world)] if rank == 0 else None
    dist.gather(params, gathered, dst=0)
    iterations = setup.config.run.iterations
    return run_outcome(
        last_record,
        AgentTotals(per_agent["events"], per_agent["messages"], per_agent["bytes"]),
        topology=topology_name(setup.config, setup.graph),
        iterations=iterations,
        train_seconds=train_seconds,
        samples=sum(per_agent["samples"]),
        parameters=torch.cat(gathered) if gathered is not None else None,
        extra={
            "runtime": "distributed",
            "world_size": world,
            "agents_per_rank": block,
            "messages_per_agent": per_agent["messages"],
            "bytes_per_agent": per_agent["bytes"],
            # per rank: a block's control headers go to ranks, not to agents
            "control_messages_per_agent": per_agent["control"],
            "rejected_per_agent": per_agent["rejected"],
        },
        rounds=iterations,
    )


def _gathered_totals(
    transport: DistributedTransport, trained: SgdTrained, agents: int
) -> tuple[dict[str, list[int]], float]:
    """Every agent's message counts and every rank's counted totals (``_TOTALS``), on
    every rank; and the slowest rank's training seconds."""
    counters = transport.counters
    own_totals = torch.stack(
        [
            counters.events_per_agent.to(torch.float64),
            counters.messages_per_agent.to(torch.float64),
            counters.bytes_per_agent.to(torch.float64),
        ],
        dim=1,
    )
    agent_totals = all_gather(own_totals).reshape(agents, 3)  # (agents, 3)
    rank_totals = [
        transport.control_messages,
        transport.rejected,
        trained.train_seconds,
        trained.samples,
    ]
    totals = all_gather(torch.tensor(rank_totals, dtype=torch.float64))  # (world, totals)
    total = {name: totals[:, i] for i, name in enumerate(_TOTALS[3:])}
    total.update({name: agent_totals[:, i] for i, name in enumerate(_TOTALS[:3])})
    counts = {name: values.to(torch.int64).tolist() for name, values in total.items()}
    return counts, float(total["train_seconds"].max())


# ---------------------------------------------------------------- forming the group


def _init_group(env: RankEnvironment, timeout: float) -> None:
    """Join the process group, or fail with one line within about ``timeout`` seconds."""
    _bind_gloo_to_loopback(env.address)
    seconds = timedelta(seconds=timeout)
    try:
        with _cpp_logs_silenced():
            # Started by torchrun, its agent hosts the store; otherwise rank 0 does.
            store = _attempt_store(env, seconds) if env.agent_store else _store(env, timeout)
            dist.init_process_group(
                "gloo", store=store, rank=env.rank, world_size=env.world, timeout=seconds
            )
    except RuntimeError as error:
        raise UsageError(
            f"rank {env.rank}: the {env.world} ranks did not all join at "
            f"{env.address}:{env.port} within {timeout:g} s ({first_line(error)}); start "
            "every rank with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE"
        ) from None


@contextmanager
def _cpp_logs_silenced() -> Iterator[None]:
    """torch's C++ side logs each rendezvous retry straight to stderr (file descriptor 2);
    a failure is reported in one line instead. No other thread runs yet."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _attempt_store(env: RankEnvironment, timeout: timedelta) -> dist.Store:
    """The store of torchrun's agent, under a prefix of its own for each restart: the
    agent keeps one store across restarts, and the group of a restarted job must not
    read the addresses the failed attempt's ranks left in it."""
    agent = dist.TCPStore(env.address, env.port, env.world, False, timeout)
    return dist.PrefixStore(f"murmur/attempt-{env.attempt}", agent)


def _store(env: RankEnvironment, timeout: float) -> dist.Store:
    """Rank 0 hosts the rendezvous store on MASTER_ADDR only; the others wait for it."""
    where = f"{env.address}:{env.port}"
    if env.rank == 0:
        try:
            family = socket.getaddrinfo(env.address, env.port, type=socket.SOCK_STREAM)[0][0]
            server = socket.create_server((env.address, env.port), family=family)
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise UsageError(
                    f"port {env.port} on {env.address} is in use; choose another "
                    "(MASTER_PORT, or murmur launch --port)"
                ) from None
            raise UsageError(f"cannot listen on {where}: {error.strerror or error}") from None
        return dist.TCPStore(
            env.address,
            env.port,
            env.world,
            True,
            timedelta(seconds=timeout),
            wait_for_workers=False,
            master_listen_fd=server.detach(),
        )
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((env.address, env.port), timeout=1.0).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise UsageError(
                    f"rank {env.rank}: rank 0 did not answer at {where} within {timeout:g} s; "
                    "start it, or check MASTER_ADDR and MASTER_PORT"
                ) from None
            time.sleep(0.1)
    remaining = max(deadline - time.monotonic(), 1.0)
    return dist.TCPStore(env.address, env.port, env.world, False, timedelta(seconds=remaining))


def _bind_gloo_to_loopback(address: str) -> None:
    """With a loopback MASTER_ADDR, keep gloo's sockets on loopback too (unless told otherwise)."""
    if "GLOO_SOCKET_IFNAME" in os.environ:
        return
    try:
        loopback = ipaddress.ip_address(socket.gethostbyname(address)).is_loopback
    except OSError:
        return
    interface = loopback_interface()
    if loopback and interface is not None:
        os.environ["GLOO_SOCKET_IFNAME"] = interface


def loopback_interface() -> str | None:
    """The name of the loopback network interface (``lo`` on Linux, ``lo0`` on macOS)."""
    return next((name for _, name in socket.if_nameindex() if name.startswith("lo")), None)
