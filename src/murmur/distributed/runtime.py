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

At the end each rank sends STOP to its neighbours, waits for theirs, and the
per-rank records, counters and parameters are gathered (fixed-size tensors,
no pickles); rank 0 writes the run folder (``experiment.run``), with real
wall-clock times.

The other kinds of algorithm have their own modules: dSSFN, one node per rank,
in :mod:`murmur.distributed.layer_ranks`; AsySG-con, a parameter server
on rank 0 and one worker per other rank (WORLD_SIZE = algorithm.workers + 1),
in :mod:`murmur.distributed.server`. ``murmur launch`` is
:mod:`murmur.distributed.launch`.

Ranks are started by ``torchrun`` (one machine or many) or by ``murmur
launch`` (torchrun on loopback); they read RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT from the environment. Started without torchrun, rank 0 hosts the rendezvous store
itself, listening on MASTER_ADDR only (loopback unless the user gives an
address); with a loopback MASTER_ADDR gloo is bound to the loopback interface
too (GLOO_SOCKET_IFNAME, unless set).
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
from murmur.distributed.server import newest_server_checkpoint, server_runner
from murmur.distributed.transport import (
    DEFAULT_TIMEOUT,
    DistributedTransport,
    all_gather,
    world_group,
)
from murmur.errors import UsageError
from murmur.metrics.counters import MessageCounters
from murmur.metrics.record_types import EvaluationRecord, SgdRecord
from murmur.metrics.records import Outcome, RunResult
from murmur.registry import ALGORITHMS
from murmur.training.checkpoint import header, read_checkpoint
from murmur.training.plan import Plan, check_world, plan
from murmur.training.reducer import AgentRows, AgentTotals, run_outcome, sgd_record
from murmur.training.runs import OnRecord, Runner, check_run_dir, finished, train_run
from murmur.training.setup import (
    LayerSetup,
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
        return train_run(
            setup,
            run_dir,
            name=name,
            preset=preset,
            progress=progress and env.rank == 0,
            runner=_rank_runner(checked, env.rank, timeout, saves, start),
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
            setup.graph,
            config.run.checkpoint_every,
            span=config.algorithm.steps_per_exchange(),
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
    kept = {"records": 0}  # rank 0 writes every record at the end
    if checked.kind == "server":  # the server writes them as it goes
        saved = newest_server_checkpoint(saves, config)
        kept["records"] = saved["state"]["records"] if saved is not None else 0
    return kept


def _rank_runner(
    checked: Plan, rank: int, timeout: float, saves: RankCheckpoints, start: Start
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
            start=start,
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


_COLUMNS = (
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
    start: Start,
    block: int = 1,
) -> Outcome:
    """Train rank ``rank``'s ``block`` of agents; gather every rank's records; hand them
    to ``on_record``.

    ``saves``: where and how often this rank saves its part. ``start``: "resume" and
    "restart" continue from the newest iteration every rank saved; a restart starts
    over when there is none.
    """
    transport = DistributedTransport(
        world_group(),
        setup.graph,
        rank,
        algorithm.initial_sent(setup.initial),
        timeout,
        block=block,
    )
    resumed, log = None, _RankLog(rows=[], snapshots=[])
    if start != "new":
        resumed, log = _restore(setup, algorithm, transport, saves, rank, start)
    transport.start()
    try:
        _train(setup, algorithm, transport, progress, log, resumed, saves)
        transport.finish()
    except PeerFailure as failure:
        transport.abort(failure.ranks)
        raise
    except Exception:
        transport.abort([rank])  # this rank fails: its neighbours need not wait to find out
        raise
    try:
        return _gather(setup, log, transport, on_record)
    except RuntimeError as error:
        raise PeerFailure([], f"gathering the results failed: {first_line(error)}") from None


@dataclass
class _RankLog:
    rows: list[list[list[float]]]
    """Per evaluation, one row of ``_COLUMNS`` per agent of the block."""
    snapshots: list[torch.Tensor]
    """The block's parameters at each evaluation, (block, P), for the consensus distance."""
    trained: SgdTrained | None = None


def _restore(
    setup: SgdSetup,
    algorithm: Algorithm,
    transport: DistributedTransport,
    saves: RankCheckpoints,
    rank: int,
    start: Start,
) -> tuple[SgdProgress | None, _RankLog]:
    """Collective: put this rank where the newest iteration every rank saved left it
    (every rank's next broadcast then has the same number); from the start when there
    is none and the ranks were restarted. Files of later iterations, which the run
    saves again, are removed."""
    agreed = agreed_state(saves, rank, setup.config, start, "iteration")
    if agreed is None:
        return None, _RankLog(rows=[], snapshots=[])
    done, saved = agreed
    block = len(transport.agents)
    if saved.get("agents_per_rank", 1) != block:
        raise UsageError(
            f"rank {rank}: its checkpoint holds {saved.get('agents_per_rank', 1)} agents "
            f"per rank, this run {block}; resume with --agents-per-rank "
            f"{saved.get('agents_per_rank', 1)}"
        )
    initial = setup.initial[transport.agents[0] : transport.agents[-1] + 1]
    resumed = resume_sgd(
        saved,
        done,
        algorithm,
        initial,
        transport,
        setup.problem.sampler,
        where=f"rank {rank}: its checkpoint",
    )
    try:
        rows = saved["rows"]
        if rows and not isinstance(rows[0][0], list):  # one agent per rank, before blocks
            rows = [[row] for row in rows]
        snapshots = saved["snapshots"]
        if snapshots.dim() == 2:
            snapshots = snapshots.unsqueeze(1)
        log = _RankLog(rows=rows, snapshots=list(snapshots.unbind()))
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as error:
        raise UsageError(f"rank {rank}: its checkpoint does not fit this run: {error}") from None
    return resumed, log


def _train(
    setup: SgdSetup,
    algorithm: Algorithm,
    transport: DistributedTransport,
    progress: bool,
    log: _RankLog,
    start: SgdProgress | None,
    saves: RankCheckpoints,
) -> None:
    """The rank's block of agents (``transport.agents``) through the shared SGD loop (from
    ``start``, if given), each agent drawing from its own batch stream; the block's
    measurements at each evaluation go to ``log``, its part of the run to ``saves``."""
    config, problem = setup.config, setup.problem
    agents = transport.agents
    block = len(agents)

    def evaluate(at: Evaluation) -> None:
        accuracy, loss = problem.model.evaluate(at.params, problem.x_test, problem.y_test)
        log.rows.append(_block_rows(at, accuracy, loss, transport.counters, block))
        log.snapshots.append(at.params.clone())

    def snapshot(at: SgdProgress) -> SgdSnapshot:
        saved = sgd_snapshot(at, transport, problem.sampler)
        saved["rows"] = [[list(row) for row in rows] for rows in log.rows]
        saved["snapshots"] = torch.stack(log.snapshots)
        saved["agents_per_rank"] = block
        return saved

    log.trained = train_sgd(
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
    )


def _block_rows(
    at: Evaluation,
    accuracy: torch.Tensor | None,
    loss: torch.Tensor,
    counters: MessageCounters,
    block: int,
) -> list[list[float]]:
    """One row of ``_COLUMNS`` per agent of the block at the evaluation ``at``."""
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


def _gather(
    setup: SgdSetup,
    log: _RankLog,
    transport: DistributedTransport,
    on_record: Callable[[EvaluationRecord], None],
) -> Outcome:
    """Every rank's records and counters to every rank, parameters to rank 0."""
    world, rank = dist.get_world_size(), dist.get_rank()
    trained = log.trained
    if trained is None:
        raise RuntimeError("the rank gathers its results before it trained")
    block = len(transport.agents)
    # (world, evals, block, columns) -> (evals, agents, columns), agents in order
    rows = all_gather(torch.tensor(log.rows, dtype=torch.float64))
    rows = rows.transpose(0, 1).reshape(rows.shape[1], world * block, len(_COLUMNS))
    per_agent, train_seconds = _gathered_totals(transport, trained, world * block)
    consensus = _consensus_distances(torch.stack(log.snapshots), world * block)
    params = trained.params.contiguous()
    gathered = [torch.empty_like(params) for _ in range(world)] if rank == 0 else None
    dist.gather(params, gathered, dst=0)
    records = [_record(rows[e], consensus[e]) for e in range(rows.shape[0])]
    for record in records:
        on_record(record)
    iterations = setup.config.run.iterations
    return run_outcome(
        records[-1],
        AgentTotals(per_agent["events"], per_agent["messages"], per_agent["bytes"]),
        topology=setup.graph.name,
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


def _consensus_distances(snapshots: torch.Tensor, agents: int) -> list[float]:
    """(1/N) sum_i ||x_i - x_bar||^2 at each evaluation; ``snapshots``: this rank's
    block's parameters at each evaluation, (evals, block, P)."""
    mean = snapshots.sum(dim=1)
    dist.all_reduce(mean)
    mean /= agents
    spread = (snapshots - mean[:, None]).pow(2).sum(dim=(1, 2), dtype=torch.float64)
    dist.all_reduce(spread)
    return (spread / agents).tolist()


def _record(at: torch.Tensor, consensus: float) -> SgdRecord:
    """One evaluation's record from every agent's row of ``_COLUMNS``, (agents, columns)."""
    column = {name: at[:, i] for i, name in enumerate(_COLUMNS)}
    accuracy = column["accuracy"]
    rows = AgentRows(
        test_accuracy=None if bool(accuracy.isnan().any()) else accuracy.tolist(),
        test_loss=column["loss"].tolist(),
        events=column["events"].to(torch.int64).tolist(),
        messages=column["messages"].to(torch.int64).tolist(),
        bytes=column["bytes"].to(torch.int64).tolist(),
    )
    iteration = int(column["iteration"][0])
    return sgd_record(
        iteration,
        rows,
        samples=int(column["samples"].sum()),
        wall_seconds=float(column["wall"][0]),
        train_loss=None if iteration == 0 else float(column["train_loss"].mean()),
        consensus_distance=consensus,
    )


# ---------------------------------------------------------------- forming the group


def _init_group(env: RankEnvironment, timeout: float) -> None:
    """Join the process group, or fail with one line within about ``timeout`` seconds."""
    _bind_gloo_to_loopback(env.address)
    store = None if env.agent_store else _store(env, timeout)
    seconds = timedelta(seconds=timeout)
    try:
        with _cpp_logs_silenced():
            if store is None:  # started by torchrun: its agent hosts the store
                store = _attempt_store(env, seconds)
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
