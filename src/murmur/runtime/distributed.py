"""The distributed runtime: one process per agent on torch.distributed (gloo).

Every rank builds the same run as the simulator (``experiment.prepare``: data,
partition, graph, model and algorithm all come from the seed), keeps its own
agent's row of the parameters and its own batch stream, and steps the same
algorithm object on that one row. Only the transport differs:
:class:`DistributedTransport` sends a rank's broadcasts to its neighbours and
mixes with what its :class:`~murmur.runtime.mailbox.Mailbox` received.

Synchronous algorithms stay in lockstep without barriers: before mixing, a
rank waits (with a deadline) for each neighbour's message of the same
broadcast number, a VALUE or a NONE ("nothing to send this step"), so a run
gives the simulator's events, messages and parameters. A neighbour whose
connection closes is named at once; one that sends nothing, or takes nothing,
for ``timeout`` seconds is named then. The rank tells its other neighbours
(ABORT), so ranks farther away name the same failed rank: a rank whose
neighbours are silent asks them (PING) whether they are still there and, if
they are, waits one more timeout for their report. Every rank stops within
twice the timeout.

At the end each rank sends STOP to its neighbours, waits for theirs, and the
per-rank records, counters and parameters are gathered (fixed-size tensors,
no pickles); rank 0 writes the run folder (``experiment.run``), with real
wall-clock times.

Synchronous dSSFN runs one node per rank the same way at the library level
(:func:`train_layerwise_rank`: the simulator's layer driver on the rank's shard,
each gossip phase through a :class:`DistributedTransport` of float64 rows from
:class:`DistributedNetwork`), and ``murmur run --runtime distributed`` runs it
too: each layer's record is gathered across the ranks (fixed-size tensors) and
rank 0 writes it. The virtual clock is rank-local there, so the distributed
records and summary leave ``virtual_seconds`` out.

AsySG-con runs as a parameter server on rank 0 and one worker per other rank
(WORLD_SIZE = algorithm.workers + 1): :mod:`murmur.runtime.distributed_server`.

Ranks are started by ``torchrun`` (one machine or many) or by ``murmur
launch`` (torchrun on loopback); they read RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT from the
environment. Started without torchrun, rank 0 hosts the rendezvous store
itself, listening on MASTER_ADDR only (loopback unless the user gives an
address); with a loopback MASTER_ADDR gloo is bound to the loopback interface
too (GLOO_SOCKET_IFNAME, unless set).
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from tqdm import tqdm

from murmur.algorithms.ssfn import nme_db
from murmur.config import Config, load_experiment
from murmur.errors import UsageError
from murmur.experiment import check_run_dir, prepare, run
from murmur.metrics.evaluation import accuracy_summary
from murmur.metrics.records import Outcome, RunResult
from murmur.registry import ALGORITHMS
from murmur.runtime.events import ComputeTimes, EventLoop, LinkDelays
from murmur.runtime.layerwise import LayerwiseResult, Network, train_layerwise
from murmur.runtime.mailbox import (
    Kind,
    Mailbox,
    Outbox,
    PeerFailure,
    PeerTimeout,
    first_line,
)
from murmur.runtime.transport import MessageCounters
from murmur.seeding import derive_seed
from murmur.topology import Graph

SUPPORTED = ("detsgrad", "dsgd", "dssfn", "asysg-con")
"""Algorithms the distributed runtime runs so far."""
DEFAULT_TIMEOUT = 60.0
"""Seconds to wait for a peer: to join, for each step's messages, to finish."""
LOOPBACK = "127.0.0.1"
DEFAULT_PORT = 29500


class DistributedTransport:
    """The :class:`~murmur.runtime.transport.Transport` of one agent per rank.

    State is one row, (1, P). ``broadcast`` sends a VALUE to every neighbour
    when the agent sends, else a NONE header (control traffic, counted in
    ``control_messages``, not in ``counters``). ``mix(operator, out, scale)``
    uses row ``rank`` of the operator: ``out += scale * sum_j operator[rank, j]
    * v_j``, with ``v_rank`` the agent's own last broadcast and ``v_j`` what
    neighbour ``j`` had broadcast by the same broadcast number.

    ``broadcast`` returns once every neighbour has taken the message: each
    peer's mailbox always has a receive from this rank posted, so that does not
    wait for the peer's own sends, also when two neighbours send to each other
    at once.

    Values are float32, or float64 when ``initial`` is: a float64 row travels as
    twice as many float32 (the same bits), so it arrives exactly.
    """

    def __init__(
        self,
        group: Any,
        graph: Graph,
        rank: int,
        initial: torch.Tensor,
        timeout: float,
        counters: MessageCounters | None = None,
    ) -> None:
        """``initial`` (agents, P): every agent's starting values, known to all ranks.

        ``counters``: add to these (one agent's, e.g. shared by the layers of one run).
        """
        if initial.shape[0] != graph.agents:
            raise ValueError(f"initial has {initial.shape[0]} rows for {graph.agents} agents")
        self.rank = rank
        self.neighbours = graph.neighbors(rank)
        self.timeout = timeout
        self.counters = counters if counters is not None else MessageCounters(1)
        self.control_messages = 0
        dtype = torch.float64 if initial.dtype == torch.float64 else torch.float32
        self._sent = initial[rank : rank + 1].to(dtype, copy=True)
        self._message_bytes = self._sent.numel() * self._sent.element_size()
        self._mailbox = Mailbox(
            group, rank, self.neighbours, _wire(initial[self.neighbours].to(dtype).contiguous())
        )
        self._outbox = Outbox(group, rank, self.neighbours)
        self._step = 0
        self._rows: dict[int, tuple[torch.Tensor, float, torch.Tensor]] = {}

    @property
    def rejected(self) -> int:
        """Messages from peers refused as malformed."""
        return self._mailbox.rejected

    @property
    def last_sent(self) -> torch.Tensor:
        """This agent's own last broadcast, (1, P)."""
        return self._sent

    def start(self) -> None:
        self._mailbox.start()
        self._outbox.start()

    def broadcast(self, senders: torch.Tensor, values: torch.Tensor) -> None:
        """Send ``values`` (1, P) to every neighbour if ``senders[0]``, else say so (NONE)."""
        if senders.shape != (1,) or values.shape != self._sent.shape:
            raise ValueError(
                f"one agent per rank: senders (1,) and values {tuple(self._sent.shape)}, "
                f"got {tuple(senders.shape)} and {tuple(values.shape)}"
            )
        self._step += 1
        if bool(senders[0]):
            self._sent.copy_(values)
            self._send(Kind.VALUE, self._step, self.neighbours, payload=_wire(self._sent)[0])
            self.counters.record_event(0, len(self.neighbours), self._message_bytes)
        else:
            self._send(Kind.NONE, self._step, self.neighbours)
            self.control_messages += len(self.neighbours)

    def mix(self, operator: torch.Tensor, out: torch.Tensor, scale: float = 1.0) -> None:
        """``out += scale * operator[rank] @ V`` once every neighbour's value of this step is in."""
        own, others = self._operator_row(operator)
        received = self._patiently(partial(self._mailbox.values_at, self._step))
        received = received.view(self._sent.dtype)
        if own != 0.0:
            out.add_(self._sent, alpha=scale * own)
        if self.neighbours:
            out.addmm_(others, received, alpha=scale)

    def finish(self) -> None:
        """Tell the neighbours this agent is done, and wait until they are too."""
        self._send(Kind.STOP, self._step, self.neighbours)
        self.control_messages += len(self.neighbours)
        self._patiently(self._mailbox.wait_stopped)
        self._outbox.close()

    def _patiently(self, wait: Callable[[float], Any]) -> Any:
        """``wait(timeout)``; if some neighbours are silent that long, find out whether they
        are gone (a send to them fails: they are named at once) or alive and stalled
        behind another rank, which their ABORT will name: wait once more for it."""
        try:
            return wait(self.timeout)
        except PeerTimeout as silent:
            self._send(Kind.PING, self._step, silent.ranks, timeout=min(self.timeout, 1.0))
            self.control_messages += len(silent.ranks)
            return wait(self.timeout)

    def abort(self, failed: Sequence[int]) -> None:
        """Best effort: tell the neighbours still alive that rank ``failed[0]`` failed."""
        targets = [n for n in self.neighbours if n not in failed]
        if not failed or not targets:
            return
        try:
            self._send(Kind.ABORT, failed[0], targets, timeout=min(self.timeout, 2.0))
        except PeerFailure:
            pass  # they are going down too; nothing more to tell

    def _send(
        self,
        kind: Kind,
        step: int,
        targets: Sequence[int],
        payload: torch.Tensor | None = None,
        timeout: float | None = None,
    ) -> None:
        try:
            self._outbox.send(kind, step, targets, timeout or self.timeout, payload)
        except PeerFailure:
            self._mailbox.raise_if_aborted()  # the root cause, if a neighbour reported one
            raise

    def _operator_row(self, operator: torch.Tensor) -> tuple[float, torch.Tensor]:
        """Row ``rank`` of ``operator``: the own coefficient and the neighbours' (1, d)."""
        cached = self._rows.get(id(operator))
        if cached is not None and cached[0] is operator:
            return cached[1], cached[2]
        if operator.layout == torch.sparse_csr:
            rows, columns = operator.crow_indices(), operator.col_indices()
            start, end = int(rows[self.rank]), int(rows[self.rank + 1])
            row = torch.zeros(operator.shape[1], dtype=operator.dtype)
            row[columns[start:end]] = operator.values()[start:end]
        else:
            row = operator.to_dense()[self.rank]
        outside = row.clone()
        outside[[self.rank, *self.neighbours]] = 0
        if bool(outside.ne(0).any()):
            raise ValueError(
                f"operator row {self.rank} is non-zero outside the agent and its neighbours"
            )
        own = float(row[self.rank])
        others = row[self.neighbours].to(self._sent.dtype).unsqueeze(0)
        self._rows[id(operator)] = (operator, own, others)
        return own, others


def _wire(values: torch.Tensor) -> torch.Tensor:
    """What goes on the wire: float32 as is, float64 as twice as many float32."""
    return values.view(torch.float32) if values.dtype == torch.float64 else values


# ---------------------------------------------------------------- layer-wise training


@dataclass
class DistributedNetwork(Network):
    """The :class:`~murmur.runtime.layerwise.Network` of one node per rank: each gossip
    phase (``transport_for``) gets a :class:`DistributedTransport` of this rank's node,
    the previous phase's transport finished first. ``counters`` are this node's."""

    rank: int = 0
    timeout: float = DEFAULT_TIMEOUT
    group: Any = None
    control_messages: int = 0
    """NONE/STOP/PING headers this node sent, all gossip phases together."""
    rejected: int = 0
    """Malformed messages this node refused, all gossip phases together."""
    _transport: DistributedTransport | None = field(default=None, repr=False)

    def transport_for(self, width: int, dtype: torch.dtype) -> DistributedTransport:
        self.close()
        transport = DistributedTransport(
            self.group if self.group is not None else dist.group.WORLD,
            self.graph,
            self.rank,
            torch.zeros(self.graph.agents, width, dtype=dtype),
            self.timeout,
            counters=self.counters,
        )
        transport.start()
        self._transport = transport
        return transport

    def close(self) -> None:
        """Finish the current gossip phase with the neighbours, if one is open."""
        transport, self._transport = self._transport, None
        if transport is not None:
            transport.finish()
            self.control_messages += transport.control_messages
            self.rejected += transport.rejected

    def abort(self, failed: Sequence[int]) -> None:
        if self._transport is not None:
            self._transport.abort(failed)


def train_layerwise_rank(
    setup: Any,
    solver: Any,
    rank: int,
    timeout: float = DEFAULT_TIMEOUT,
    on_record: Callable[[dict[str, Any]], None] = lambda record: None,
    network_out: list[DistributedNetwork] | None = None,
) -> tuple[LayerwiseResult, MessageCounters]:
    """Node ``rank`` of a layer-wise run (synchronous dSSFN) in a joined process group:
    its shard's layers, gossip with its neighbours. Returns its result (output
    matrices (1, Q, n); records of its own node) and its message counters.
    ``network_out``: the rank's :class:`DistributedNetwork` is appended to it (for
    its control-message and rejection counts)."""
    config, dataset, graph = setup.config, setup.dataset, setup.graph
    network = DistributedNetwork(
        graph=graph,
        counters=MessageCounters(1),
        clock=EventLoop(),
        compute=ComputeTimes(config.timing, graph.agents, derive_seed(config.run.seed, "timing")),
        links=LinkDelays(config.timing),
        rank=rank,
        timeout=timeout,
    )
    if network_out is not None:
        network_out.append(network)
    try:
        trained = train_layerwise(
            config.algorithm,
            solver,
            network,
            dataset.x_train,
            dataset.y_train,
            dataset.x_test,
            dataset.y_test,
            [setup.shards[rank]],
            dataset.num_classes,
            seed=derive_seed(config.run.seed, "ssfn"),
            on_record=on_record,
        )
        network.close()
    except PeerFailure as failure:
        network.abort(failure.ranks)
        raise
    except Exception:
        network.abort([rank])
        raise
    return trained, network.counters


# ---------------------------------------------------------------- the run of one rank


@dataclass(frozen=True)
class RankEnvironment:
    """Where this process sits in the job, from the torchrun environment variables."""

    rank: int
    world: int
    address: str
    port: int
    agent_store: bool
    """Started by torchrun, whose agent hosts the rendezvous store."""

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
        return cls(rank, world, environ["MASTER_ADDR"], port, agent_store)


def check_supported(config: Config) -> None:
    """UsageError unless the distributed runtime can run ``config``'s algorithm."""
    if config.algorithm.name not in SUPPORTED:
        raise UsageError(
            f"the distributed runtime runs {', '.join(SUPPORTED)} so far, not "
            f"{config.algorithm.name}; run it with --runtime simulator"
        )


def run_distributed(
    config: Config,
    out_dir: str | Path | None = None,
    *,
    name: str = "",
    preset: str = "",
    progress: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    environ: Mapping[str, str] = os.environ,
) -> RunResult:
    """Run this process's rank of ``config``; rank 0 writes ``out_dir``.

    Every rank returns the gathered result; only rank 0's holds the run folder
    and the stacked final parameters (agents, P). Raises UsageError for bad
    input (before any training) and PeerFailure when a peer fails mid-run.
    """
    if timeout <= 0:
        raise UsageError(f"the timeout must be positive, not {timeout:g}")
    check_supported(config)
    env = RankEnvironment.from_environ(environ)
    if ALGORITHMS[config.algorithm.name].kind == "server":  # a parameter server on rank 0
        from murmur.runtime.distributed_server import run_server_distributed

        return run_server_distributed(
            config,
            out_dir,
            env,
            name=name,
            preset=preset,
            progress=progress,
            timeout=timeout,
            init_group=_init_group,
        )
    if env.world != config.topology.agents:
        raise UsageError(
            f"WORLD_SIZE is {env.world} but topology.agents is {config.topology.agents}; "
            f"the distributed runtime runs one agent per rank (--nproc {config.topology.agents} "
            f"or --set topology.agents={env.world})"
        )
    setup = prepare(config)
    run_dir = Path(out_dir) if out_dir is not None and env.rank == 0 else None
    if run_dir is not None:
        check_run_dir(run_dir)
    _init_group(env, timeout)
    try:
        train = (
            _train_layerwise
            if ALGORITHMS[config.algorithm.name].kind == "layerwise"
            else _train_rank
        )
        runner = partial(train, rank=env.rank, timeout=timeout)
        return run(
            config,
            run_dir,
            name=name,
            preset=preset,
            progress=progress and env.rank == 0,
            setup=setup,
            runner=runner,
        )
    except PeerFailure as failure:
        raise PeerFailure(failure.ranks, f"rank {env.rank} stopped: {failure}") from None
    finally:
        dist.destroy_process_group()


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
    setup: Any,
    algorithm: Any,
    on_record: Callable[[dict[str, Any]], None],
    progress: bool,
    *,
    rank: int,
    timeout: float,
) -> Outcome:
    """Train agent ``rank``; gather every rank's records; hand them to ``on_record``."""
    transport = DistributedTransport(dist.group.WORLD, setup.graph, rank, setup.initial, timeout)
    transport.start()
    try:
        log = _train(setup, algorithm, transport, rank, progress)
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
    rows: list[list[float]]
    """One row of ``_COLUMNS`` per evaluation."""
    snapshots: list[torch.Tensor]
    """This agent's parameters at each evaluation, for the consensus distance."""
    params: torch.Tensor
    train_seconds: float
    samples: int


def _train(
    setup: Any, algorithm: Any, transport: DistributedTransport, rank: int, progress: bool
) -> _RankLog:
    config, problem = setup.config, setup.problem
    iterations, eval_every = config.run.iterations, config.run.eval_every
    started = time.perf_counter()
    state = algorithm.init(setup.initial[rank : rank + 1])
    log = _RankLog(
        rows=[], snapshots=[], params=algorithm.params(state)[0], train_seconds=0.0, samples=0
    )
    loss_sum, loss_steps = 0.0, 0

    def evaluate(iteration: int, train_loss: float) -> None:
        params = algorithm.params(state)
        accuracy, loss = problem.model.evaluate(params, problem.x_test, problem.y_test)
        counters = transport.counters
        log.rows.append(
            [
                iteration,
                log.samples,
                time.perf_counter() - started,
                float(accuracy[0]) if accuracy is not None else float("nan"),
                float(loss[0]),
                train_loss,
                counters.events,
                counters.messages,
                counters.bytes,
            ]
        )
        log.snapshots.append(params[0].clone())

    evaluate(0, float("nan"))
    bar = tqdm(total=iterations, disable=not progress, unit="it", leave=False, dynamic_ncols=True)
    for iteration in range(iterations):
        step_started = time.perf_counter()
        indices = problem.sampler.next_for(rank)
        losses, grads = problem.model.loss_and_grad(
            algorithm.params(state), problem.x_train[indices][None], problem.y_train[indices][None]
        )
        state = algorithm.step(state, grads, iteration, transport)
        log.train_seconds += time.perf_counter() - step_started
        log.samples += indices.numel()
        loss_sum += float(losses[0])
        loss_steps += 1
        done = iteration + 1
        if done % eval_every == 0 or done == iterations:
            evaluate(done, loss_sum / loss_steps)
            loss_sum, loss_steps = 0.0, 0
        bar.update(1)
    bar.close()
    log.params = algorithm.params(state)[0]
    return log


def _gather(
    setup: Any,
    log: _RankLog,
    transport: DistributedTransport,
    on_record: Callable[[dict[str, Any]], None],
) -> Outcome:
    """Every rank's records and counters to every rank, parameters to rank 0."""
    world, rank = dist.get_world_size(), dist.get_rank()
    rows = _all_gather(torch.tensor(log.rows, dtype=torch.float64))  # (world, evals, columns)
    counters = transport.counters
    totals = _all_gather(
        torch.tensor(
            [
                counters.events,
                counters.messages,
                counters.bytes,
                transport.control_messages,
                transport.rejected,
                log.train_seconds,
                log.samples,
            ],
            dtype=torch.float64,
        )
    )  # (world, totals)
    snapshots = torch.stack(log.snapshots)  # (evals, P)
    mean = snapshots.clone()
    dist.all_reduce(mean)
    mean /= world
    spread = (snapshots - mean).pow(2).sum(dim=1, dtype=torch.float64)
    dist.all_reduce(spread)
    consensus = (spread / world).tolist()
    gathered = [torch.empty_like(log.params) for _ in range(world)] if rank == 0 else None
    dist.gather(log.params.contiguous(), gathered, dst=0)

    column = {name: i for i, name in enumerate(_COLUMNS)}
    records = []
    for e in range(rows.shape[1]):
        at = rows[:, e]
        accuracy = at[:, column["accuracy"]]
        summary = accuracy_summary(None if bool(accuracy.isnan().any()) else accuracy.tolist())
        train_loss = float(at[:, column["train_loss"]].mean())
        events = at[:, column["events"]].to(torch.int64)
        record = {
            "iteration": int(at[0, column["iteration"]]),
            "samples": int(at[:, column["samples"]].sum()),
            "wall_seconds": float(at[0, column["wall"]]),
            "test_accuracy": summary["per_agent"],
            "test_loss": at[:, column["loss"]].tolist(),
            "accuracy_mean": summary["mean"],
            "accuracy_min": summary["min"],
            "accuracy_max": summary["max"],
            "train_loss": None if e == 0 else train_loss,
            "consensus_distance": consensus[e],
            "events": int(events.sum()),
            "messages": int(at[:, column["messages"]].sum()),
            "bytes": int(at[:, column["bytes"]].sum()),
            "events_per_agent": events.tolist(),
        }
        on_record(record)
        records.append(record)

    total = {name: totals[:, i] for i, name in enumerate(_TOTALS)}
    per_agent = {name: values.to(torch.int64).tolist() for name, values in total.items()}
    iterations = setup.config.run.iterations
    return Outcome(
        agents=world,
        topology=setup.graph.name,
        iterations=iterations,
        last_record=records[-1],
        events_per_agent=per_agent["events"],
        messages=sum(per_agent["messages"]),
        bytes=sum(per_agent["bytes"]),
        train_seconds=float(total["train_seconds"].max()),
        samples=sum(per_agent["samples"]),
        communication_saving=1.0 - sum(per_agent["events"]) / (world * iterations),
        parameters=torch.stack(gathered) if gathered is not None else None,
        extra={
            "runtime": "distributed",
            "world_size": world,
            "messages_per_agent": per_agent["messages"],
            "bytes_per_agent": per_agent["bytes"],
            "control_messages_per_agent": per_agent["control"],
            "rejected_per_agent": per_agent["rejected"],
        },
    )


# ---------------------------------------------------------------- layer-wise runs of one rank

_LAYER_COLUMNS = (
    "layer",
    "width",
    "admm_iterations",
    "test_accuracy",
    "test_loss",
    "train_accuracy",
    "train_residual",
    "train_target",
    "events",
    "messages",
    "bytes",
    "wall",
)
_LAYER_TOTALS = ("events", "messages", "bytes", "control", "rejected", "train_seconds")


def _train_layerwise(
    setup: Any,
    solver: Any,
    on_record: Callable[[dict[str, Any]], None],
    progress: bool,
    *,
    rank: int,
    timeout: float,
) -> Outcome:
    """Node ``rank`` of a synchronous dSSFN run; every layer's record gathered across
    the ranks and handed to ``on_record`` (rank 0 writes them). Without
    ``virtual_seconds``: each rank's virtual clock sees only its own node."""
    rows: list[list[float]] = []
    shard_size = float(setup.shards[rank].numel())

    def keep(record: dict[str, Any]) -> None:
        # One-hot targets: ||T_m||^2 is the shard's size, and the node's squared
        # residual comes back from its NME (dB) to within rounding.
        residual = shard_size * 10.0 ** (record["train_nme"] / 10.0)
        rows.append(
            [
                record["layer"],
                record["width"],
                record["admm_iterations"],
                record["test_accuracy"][0],
                record["test_loss"][0],
                record["train_accuracy"][0],
                residual,
                shard_size,
                record["events"],
                record["messages"],
                record["bytes"],
                record["wall_seconds"],
            ]
        )

    networks: list[DistributedNetwork] = []
    trained, counters = train_layerwise_rank(
        setup, solver, rank, timeout=timeout, on_record=keep, network_out=networks
    )
    try:
        return _gather_layerwise(setup, rows, trained, counters, networks[0], on_record)
    except RuntimeError as error:
        raise PeerFailure([], f"gathering the results failed: {first_line(error)}") from None


def _gather_layerwise(
    setup: Any,
    rows: list[list[float]],
    trained: LayerwiseResult,
    counters: MessageCounters,
    network: DistributedNetwork,
    on_record: Callable[[dict[str, Any]], None],
) -> Outcome:
    world = dist.get_world_size()
    gathered_rows = _all_gather(torch.tensor(rows, dtype=torch.float64))  # (world, layers, cols)
    totals = _all_gather(
        torch.tensor(
            [
                counters.events,
                counters.messages,
                counters.bytes,
                network.control_messages,
                network.rejected,
                trained.train_seconds,
            ],
            dtype=torch.float64,
        )
    )  # (world, totals)
    # Every kept layer's output matrices of every node (layers differ in width), for
    # the consensus distance.
    outputs = [_all_gather(layer[0].contiguous()) for layer in trained.history]  # (world, Q, n)
    column = {name: i for i, name in enumerate(_LAYER_COLUMNS)}
    records = []
    for e in range(gathered_rows.shape[1]):
        at = gathered_rows[:, e]
        layer_outputs = outputs[e]
        mean = layer_outputs.mean(dim=0, keepdim=True)
        test = accuracy_summary(at[:, column["test_accuracy"]].tolist())
        train = accuracy_summary(at[:, column["train_accuracy"]].tolist())
        events = at[:, column["events"]].to(torch.int64)
        record = {
            "iteration": int(at[0, column["layer"]]),
            "layer": int(at[0, column["layer"]]),
            "width": int(at[0, column["width"]]),
            "admm_iterations": int(at[0, column["admm_iterations"]]),
            "test_accuracy": test["per_agent"],
            "test_loss": at[:, column["test_loss"]].tolist(),
            "accuracy_mean": test["mean"],
            "accuracy_min": test["min"],
            "accuracy_max": test["max"],
            "train_accuracy": train["per_agent"],
            "train_accuracy_mean": train["mean"],
            "train_nme": nme_db(
                float(at[:, column["train_residual"]].sum()),
                float(at[:, column["train_target"]].sum()),
            ),
            "consensus_distance": float((layer_outputs - mean).square().sum() / world),
            "events": int(events.sum()),
            "messages": int(at[:, column["messages"]].sum()),
            "bytes": int(at[:, column["bytes"]].sum()),
            "events_per_agent": events.tolist(),
            "wall_seconds": float(at[:, column["wall"]].max()),
        }
        on_record(record)
        records.append(record)

    total = {name: totals[:, i] for i, name in enumerate(_LAYER_TOTALS)}
    per_agent = {name: values.to(torch.int64).tolist() for name, values in total.items()}
    last = records[-1]
    graph = setup.graph
    return Outcome(
        agents=world,
        topology=graph.name,
        iterations=trained.admm_iterations,
        last_record=last,
        events_per_agent=per_agent["events"],
        messages=sum(per_agent["messages"]),
        bytes=sum(per_agent["bytes"]),
        train_seconds=float(total["train_seconds"].max()),
        samples=int(sum(shard.numel() for shard in setup.shards)),
        parameters=outputs[-1] if dist.get_rank() == 0 else None,
        extra={
            "layers": trained.sizes,
            "train_accuracy": accuracy_summary(last["train_accuracy"]),
            "train_nme": last["train_nme"],
            "admm_iterations": trained.admm_iterations,
            "mean_degree": float(graph.degrees().double().mean()),
            "runtime": "distributed",
            "world_size": world,
            "messages_per_agent": per_agent["messages"],
            "bytes_per_agent": per_agent["bytes"],
            "control_messages_per_agent": per_agent["control"],
            "rejected_per_agent": per_agent["rejected"],
        },
    )


def _all_gather(local: torch.Tensor) -> torch.Tensor:
    parts = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, local)
    return torch.stack(parts)


# ---------------------------------------------------------------- forming the group


def _init_group(env: RankEnvironment, timeout: float) -> None:
    """Join the process group, or fail with one line within about ``timeout`` seconds."""
    _bind_gloo_to_loopback(env.address)
    store = None if env.agent_store else _store(env, timeout)
    seconds = timedelta(seconds=timeout)
    try:
        with _cpp_logs_silenced():
            if store is None:  # started by torchrun: its agent hosts the store
                dist.init_process_group("gloo", timeout=seconds)
            else:
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


# ---------------------------------------------------------------- murmur launch


def launch(
    nproc: int,
    source: str,
    overrides: Sequence[str],
    out: str | None,
    *,
    port: int = DEFAULT_PORT,
    timeout: float = DEFAULT_TIMEOUT,
    progress: bool = True,
) -> int:
    """Start ``nproc`` ranks of ``source`` on this machine with torchrun, bound to loopback.

    Everything that can be wrong with the input is checked first; returns 0,
    or the exit status of the first rank that failed.
    """
    if nproc < 1:
        raise UsageError(f"--nproc must be at least 1, not {nproc}")
    if timeout <= 0:
        raise UsageError(f"--timeout must be positive, not {timeout:g}")
    if not 0 < port < 65536:
        raise UsageError(f"--port must be a port number (1..65535), not {port}")
    experiment = load_experiment(source, overrides)
    _, config = single_run(experiment)
    check_supported(config)
    if ALGORITHMS[config.algorithm.name].kind == "server":
        from murmur.runtime.distributed_server import check_world

        try:
            check_world(config, nproc)
        except UsageError as error:
            raise UsageError(str(error).replace("WORLD_SIZE", "--nproc")) from None
    elif config.topology.agents != nproc:
        raise UsageError(
            f"--nproc {nproc} but topology.agents is {config.topology.agents}; the "
            f"distributed runtime runs one agent per process (--nproc {config.topology.agents} "
            f"or --set topology.agents={nproc})"
        )
    root = Path(out) if out else default_run_dir(experiment.name)
    check_run_dir(root)
    check_port_free(LOOPBACK, port)
    torchrun_argv = [
        "--nnodes=1",
        f"--nproc-per-node={nproc}",
        f"--master-addr={LOOPBACK}",
        f"--master-port={port}",
        "--max-restarts=0",
        "-m",
        "murmur",
        "run",
        source,
        "--runtime=distributed",
        f"--out={root}",
        f"--timeout={timeout:g}",
        *(f"--set={item}" for item in overrides),
        *(() if progress else ("--quiet",)),
    ]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    interface = loopback_interface()
    if interface is not None:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", interface)
    return _torchrun(torchrun_argv)


def _torchrun(argv: list[str]) -> int:
    """``torchrun ARGV`` in this process; a failed rank's exit status instead of a traceback.

    The ranks print their own one-line errors; torchrun's agent would add its
    log lines and a traceback of its own, so its loggers are quietened.
    """
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser
    from torch.distributed.run import run as torchrun

    for name in list(logging.root.manager.loggerDict):
        if name.startswith("torch.distributed"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        torchrun(get_args_parser().parse_args(argv))
    except ChildFailedError as failure:
        _, first = failure.get_first_failure()
        return first.exitcode if first.exitcode > 0 else 1
    except SignalException as stopped:
        return 128 + int(stopped.sigval)
    except RuntimeError as error:  # its rendezvous store could not start
        raise UsageError(f"torchrun could not start the ranks: {first_line(error)}") from None
    return 0


def single_run(experiment: Any) -> tuple[str, Config]:
    """The one run of ``experiment``; the distributed runtime runs no comparisons yet."""
    if len(experiment.runs) != 1:
        raise UsageError(
            f"preset {experiment.name} compares {len(experiment.runs)} runs; the distributed "
            "runtime runs one at a time: launch each member preset on its own"
        )
    return experiment.runs[0]


def default_run_dir(name: str) -> Path:
    return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def check_port_free(address: str, port: int) -> None:
    """UsageError if ``address:port`` cannot be listened on."""
    try:
        with socket.create_server((address, port)):
            pass
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise UsageError(
                f"port {port} on {address} is in use; choose another with --port"
            ) from None
        raise UsageError(f"cannot listen on {address}:{port}: {error.strerror or error}") from None
