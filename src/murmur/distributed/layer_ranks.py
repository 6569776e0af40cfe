"""Layer-wise training (dSSFN) in the distributed runtime: one node per rank.

Synchronous dSSFN runs the simulator's layer driver on the rank's shard
(:func:`train_layerwise_rank`), each gossip phase through a
:class:`~murmur.distributed.transport.DistributedTransport` of float64
rows from :class:`DistributedNetwork`. ``murmur run --runtime distributed``
gathers each layer's record across the ranks as the layer ends (fixed-size
tensors, :class:`LayerStream`) and rank 0 writes it. Work takes real time
here, so the distributed records and summary have no ``virtual_seconds``. With
``run.checkpoint_every = k`` each rank saves its part every k layers
(:mod:`murmur.distributed.checkpoints`): its output matrices of every layer so
far, its rows and records, its counters; a resumed rank rebuilds its features by
replaying the layers from them.

Asynchronous dSSFN runs the same driver; the network drives the rank's ARock
node (:meth:`DistributedNetwork.run_async`) through one
:class:`~murmur.distributed.push_channel.PushChannel` per layer and carries on without
neighbours that fail. With ranks possibly gone, results cannot be gathered with collectives:
each rank sends its own to rank 0 (one RESULT message of float64 bits, with
the neighbours it dropped as one code each), and rank 0 takes them from every
rank not known to have failed, giving up on a rank that sends nothing for
``timeout`` seconds after the last arrival.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from murmur.algorithms.arock import DssfnAsyncConfig
from murmur.algorithms.protocols import AsyncNode, AsyncWork, LayerSolver, RoundsWork
from murmur.distributed.checkpoints import (
    RankCheckpoints,
    Start,
    agreed_state,
)
from murmur.distributed.failures import Fault, PeerFailure, Reason
from murmur.distributed.push_channel import RESULT_TAG, Neighbourhood
from murmur.distributed.transport import (
    DEFAULT_TIMEOUT,
    DistributedTransport,
    all_gather,
    world_group,
)
from murmur.distributed.wire import FOREVER, Envelope, Kind, receive_loop
from murmur.distributed.wording import first_line
from murmur.errors import UsageError
from murmur.metrics.counters import MessageCounters
from murmur.metrics.record_types import EvaluationRecord, LayerRecord
from murmur.metrics.records import Outcome
from murmur.topology import Graph
from murmur.training.layer_loop import (
    LayerHooks,
    LayerProgress,
    LayerSnapshot,
    LayerwiseResult,
    layerwise_extra,
    train_layerwise_run,
)
from murmur.training.reducer import AgentTotals, LayerRows, RunFacts, layer_record, run_outcome
from murmur.training.setup import LayerSetup


@dataclass
class DistributedNetwork:
    """The :class:`~murmur.algorithms.protocols.LayerNetwork` of one node per rank: each
    gossip phase (``transport_for``) gets a :class:`DistributedTransport` of this rank's
    node, the previous phase's transport finished first; asynchronous nodes push
    through a :class:`PushChannel`. Work is done for real, so the solvers' reports of
    it are not needed. ``counters`` are this node's."""

    graph: Graph
    counters: MessageCounters
    rank: int = 0
    timeout: float = DEFAULT_TIMEOUT
    group: dist.ProcessGroup | None = None
    control_messages: int = 0
    """NONE/STOP/PING headers this node sent, all gossip phases together."""
    rejected: int = 0
    """Malformed messages this node refused, all gossip phases together."""
    _transport: DistributedTransport | None = field(default=None, repr=False)
    neighbourhood: Neighbourhood | None = field(default=None, repr=False)
    """The asynchronous solver's channels of the run (None until it asks for one)."""

    @property
    def local_nodes(self) -> list[int]:
        return [self.rank]

    def live_neighbours(self, node: int) -> list[int]:
        """This node's neighbours still there (an asynchronous run drops failed ones)."""
        return self._neighbourhood().live

    def begin_layer(self, layer: int) -> None:
        """Nothing to do: no faults are injected here."""

    @property
    def crashed(self) -> frozenset[int]:
        """None: a rank that fails leaves the run instead."""
        return frozenset()

    def total(self, values: torch.Tensor) -> torch.Tensor:
        """This node's row summed over the ranks: one all-reduce, given ``timeout``
        seconds. If it fails, the failure the gossip's messages name (a lost neighbour,
        or another rank's ABORT) is raised when it comes within a timeout, else a
        failure naming no rank."""
        summed = values.sum(dim=0).clone()
        try:
            work = dist.all_reduce(summed, group=self._group(), async_op=True)
            if work.wait(timedelta(seconds=self.timeout)) is False:
                raise RuntimeError(f"no answer within {self.timeout:g} s")
        except RuntimeError as error:
            if self._transport is not None:
                self._transport.raise_failure_within(self.timeout)
            raise PeerFailure(
                [], f"the all-reduce of the stopping rule failed ({first_line(error)})"
            ) from None
        return summed

    def work_alone(self, node: int, flops: float) -> None:
        """Real work takes real time: nothing to add."""

    def work_in_rounds(self, work: RoundsWork) -> None:
        """Real work takes real time: nothing to add."""

    @property
    def virtual_seconds(self) -> None:
        return None

    def transport_for(self, width: int, dtype: torch.dtype) -> DistributedTransport:
        self.close()
        transport = DistributedTransport(
            self._group(),
            self.graph,
            self.rank,
            torch.zeros(self.graph.agents, width, dtype=dtype),
            self.timeout,
            counters=self.counters,
        )
        transport.start()
        self._transport = transport
        return transport

    def run_async(self, nodes: list[AsyncNode], work: AsyncWork) -> None:
        """This rank's node: update as soon as there is news, push, repeat."""
        (node,) = nodes
        channel = self._neighbourhood().channel(work.values, work.dtype)
        for j in set(node.neighbours) - set(channel.neighbours):
            node.drop(j)  # failed since the node was built
        while True:
            for j in channel.failed():
                node.drop(j)
            for j, (stamp, block) in channel.news().items():
                node.receive(j, stamp, block)
            action = node.next_action()
            if action == "done":
                break
            if action == "update":
                blocks = node.update()
                channel.push(blocks, node.stamp)
            else:
                channel.wait(node.waiting_on())
        channel.close()

    def _group(self) -> dist.ProcessGroup:
        """The process group the node talks in: ``group``, by default the world."""
        return self.group if self.group is not None else world_group()

    def _neighbourhood(self) -> Neighbourhood:
        if self.neighbourhood is None:
            self.neighbourhood = Neighbourhood(
                self._group(),
                self.rank,
                self.graph.neighbors(self.rank),
                self.timeout,
                self.counters,
            )
        return self.neighbourhood

    def close(self) -> None:
        """Finish the current gossip phase with the neighbours, if one is open; at the
        end of an asynchronous run, wait for the last pushes and STOPs of every layer."""
        transport, self._transport = self._transport, None
        if transport is not None:
            transport.finish()
            self.control_messages += transport.control_messages
            self.rejected += transport.rejected
        if self.neighbourhood is not None:
            self.neighbourhood.finish()
            self.control_messages += self.neighbourhood.control_messages
            self.rejected += self.neighbourhood.rejected

    @property
    def failures(self) -> dict[int, str]:
        """Neighbours an asynchronous run dropped, and why."""
        return dict(self.neighbourhood.failures) if self.neighbourhood is not None else {}

    def abort(self, failed: Sequence[int]) -> None:
        if self._transport is not None:
            self._transport.abort(failed)

    def raise_failure_within(self, timeout: float) -> None:
        """Raise the failure a neighbour of the open gossip phase reports within
        ``timeout``; return if none comes (or no phase is open)."""
        if self._transport is not None:
            self._transport.raise_failure_within(timeout)

    def snapshot(self, at: LayerProgress) -> LayerSnapshot:
        """The rank's part of a checkpoint after layer ``at.layer``: the layers so far
        and this node's counts. The layer's gossip phase ends here: its STOPs are counted."""
        self.close()
        return {
            "layers": at.to_plain(),
            "counters": self.counters.state_dict(),
            "control": self.control_messages,
            "rejected": self.rejected,
        }

    def resume(self, saved: Mapping[str, Any]) -> LayerProgress:
        """Take this node's counts from the rank's part of a checkpoint (:meth:`snapshot`);
        the layers to continue after. UsageError when it does not fit this run."""
        try:
            start = LayerProgress.from_plain(saved["layers"])
            self.counters.load_state_dict(saved["counters"])
            self.control_messages = int(saved["control"])
            self.rejected = int(saved["rejected"])
        except (KeyError, TypeError, ValueError, RuntimeError) as error:
            raise UsageError(
                f"rank {self.rank}: its checkpoint does not fit this run: {error}"
            ) from None
        return start


def train_layerwise_rank(
    setup: LayerSetup,
    solver: LayerSolver,
    rank: int,
    timeout: float = DEFAULT_TIMEOUT,
    hooks: LayerHooks | None = None,
    network_out: list[DistributedNetwork] | None = None,
    progress: bool = False,
    resumed: dict[str, Any] | None = None,
) -> tuple[LayerwiseResult, MessageCounters]:
    """Node ``rank`` of a layer-wise run (dSSFN, synchronous or asynchronous) in a
    joined process group: its shard's layers, messages with its neighbours.
    Returns its result (output matrices (1, Q, n); records of its own node) and its
    message counters. ``hooks``: where its node's records go (``on_record``),
    ``on_layer``, and where and how often the rank saves its part (``checkpoints``,
    synchronous dSSFN); the rank saves its network's snapshot and stops on the run's
    ``stop_requested``. ``network_out``: the rank's :class:`DistributedNetwork` is
    appended to it (for its control-message and rejection counts, and the
    neighbours an asynchronous run dropped). ``progress``: a bar of the layers.
    ``resumed``: the part it saved, to continue from (:func:`restore_layers`)."""
    graph = setup.graph
    network = DistributedNetwork(
        graph=graph,
        counters=MessageCounters(1),
        rank=rank,
        timeout=timeout,
    )
    if network_out is not None:
        network_out.append(network)
    start = network.resume(resumed) if resumed is not None else None
    given = hooks if hooks is not None else LayerHooks()
    saving = given.checkpoints is not None
    rank_hooks = dataclasses.replace(
        given, snapshot=network.snapshot if saving else None, stop=setup.stop_requested
    )
    try:
        trained = train_layerwise_run(
            setup, solver, network, [setup.shards[rank]], rank_hooks, progress, start
        )
        network.close()
    except PeerFailure as failure:
        network.abort(failure.ranks)
        raise
    except Exception:
        network.abort([rank])
        raise
    return trained, network.counters


# ---------------------------------------------------------------- the records of a run
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
    "steps",
    "rounds",
    "residual",
    "converged",
)
_LAYER_TOTALS = ("events", "messages", "bytes", "control", "rejected", "train_seconds")


def run_layerwise_rank(
    setup: LayerSetup,
    solver: LayerSolver,
    on_record: Callable[[EvaluationRecord], None],
    progress: bool,
    *,
    rank: int,
    timeout: float,
    saves: RankCheckpoints | None = None,
    start: Start = "new",
) -> Outcome:
    """Node ``rank`` of a dSSFN run; every layer's record brought together across the
    ranks and handed to ``on_record`` (rank 0's writes them; synchronous dSSFN makes
    them on every rank, whose rules of ``[collapse]`` judge them alike). Without
    ``virtual_seconds``: each rank's virtual clock sees only its own node.

    Synchronous dSSFN gathers with collectives (every rank is there, or the run
    has stopped). Asynchronous dSSFN carries on without failed ranks, so each
    rank sends its results to rank 0 alone (:func:`_collect`), and rank 0 takes
    them from the ranks still there.

    ``saves``: where and how often the rank saves its part (synchronous dSSFN, with
    ``run.checkpoint_every`` > 0). ``start``: "resume" and "restart" continue from the
    newest layer every rank saved (:func:`restore_layers`).
    """
    resumed = None
    if start != "new" and saves is not None:
        resumed = restore_layers(setup, saves, rank, start)
    records: list[LayerRecord] = list(resumed["layers"]["records"]) if resumed else []
    networks: list[DistributedNetwork] = []
    stream = None
    if not isinstance(setup.config.algorithm, DssfnAsyncConfig):
        stream = LayerStream(on_record, timeout, lambda: networks[0])
    hooks = LayerHooks(
        on_record=records.append,
        checkpoints=saves if saves is not None and saves.every > 0 else None,
        on_layer=stream,
    )
    trained, counters = train_layerwise_rank(
        setup,
        solver,
        rank,
        timeout=timeout,
        hooks=hooks,
        network_out=networks,
        progress=progress,
        resumed=resumed,
    )
    network = networks[0]
    local = _RankResults.of(records, trained, counters, network)
    if stream is None:
        return _collect(setup, local, trained, on_record, rank=rank, timeout=timeout)
    ranks = list(range(dist.get_world_size()))
    outcome = _layer_outcome(setup, _gathered(local), ranks, trained, stream.unwritten)
    if rank != 0:
        outcome.parameters = None
    return outcome


def _gathered(local: _RankResults) -> _RankResults:
    """Every rank's results, stacked (synchronous dSSFN: every rank is there)."""
    try:
        return _RankResults(
            rows=all_gather(local.rows),
            totals=all_gather(local.totals),
            outputs=[all_gather(layer) for layer in local.outputs],
            failures={},
        )
    except RuntimeError as error:
        raise PeerFailure([], f"gathering the results failed: {first_line(error)}") from None


class LayerStream:
    """Synchronous dSSFN's records as the run goes: after each layer every rank brings
    its node's rows of the layers rank 0 has not written yet (one all-gather, given the
    run's timeout) and every rank makes their records, which rank 0 writes, so that a
    run killed midway keeps its layers so far, and every rank's rules of ``[collapse]``
    judge the same records and stop the run at the same layer. A resumed run's first
    layer brings the layers it restored too."""

    def __init__(
        self,
        on_record: Callable[[EvaluationRecord], None],
        timeout: float,
        network: Callable[[], DistributedNetwork],
    ) -> None:
        self.on_record = on_record
        self.timeout = timeout
        self.network = network
        self.written = 0
        """Layers whose records rank 0 has written."""
        self._seen = 0

    def __call__(self, at: LayerProgress) -> None:
        first = self.written
        rows = torch.tensor(
            [
                _layer_row(r, row)
                for r, row in zip(at.records[first:], at.rows[first:], strict=True)
            ],
            dtype=torch.float64,
        )
        outputs = [layer[0].contiguous() for layer in at.history[first:]]
        local = torch.cat([rows.flatten(), *(o.flatten() for o in outputs)])
        gathered = self._gather(local, at.layer)
        sizes = [rows.numel(), *(o.numel() for o in outputs)]
        stacked_rows, *stacked = gathered.split(sizes, dim=1)
        every = stacked_rows.reshape(gathered.shape[0], *rows.shape)
        for e, output in enumerate(stacked):  # every rank: each judges the same records
            self.on_record(_layer_record(every[:, e], output.reshape(-1, *outputs[e].shape)))
        self.written = len(at.records)

    def _gather(self, local: torch.Tensor, layer: int) -> torch.Tensor:
        """Every rank's ``local``, stacked; PeerFailure naming the rank a neighbour
        reports failed within a timeout, else naming none."""
        parts = [torch.empty_like(local) for _ in range(dist.get_world_size())]
        try:
            work = dist.all_gather(parts, local, async_op=True)
            if work.wait(timedelta(seconds=self.timeout)) is False:
                raise RuntimeError(f"no answer within {self.timeout:g} s")
        except RuntimeError as error:
            self.network().raise_failure_within(self.timeout)
            raise PeerFailure(
                [], f"gathering the records of layer {layer} failed ({first_line(error)})"
            ) from None
        return torch.stack(parts)

    def unwritten(self, record: EvaluationRecord) -> None:
        """Write, at the end, the records of the layers not written yet (rank 0)."""
        self._seen += 1
        if self._seen > self.written:
            self.on_record(record)


def restore_layers(
    setup: LayerSetup, saves: RankCheckpoints, rank: int, start: Start
) -> dict[str, Any] | None:
    """Collective: this rank's saved part of the newest layer every rank saved, its
    later files removed (the run saves them again); None, to start over, when the
    ranks were restarted before saving one in common. A rank resumed by hand stops
    in one line then, as every other rank does."""
    agreed = agreed_state(saves, rank, setup.config, start, "layer")
    if agreed is None:
        return None
    state = agreed[1]
    try:
        LayerProgress.from_plain(state["layers"])
    except (KeyError, TypeError) as error:
        raise UsageError(f"rank {rank}: its checkpoint does not fit this run: {error}") from None
    return state


@dataclass
class _RankResults:
    """What a rank brings to the run's records (or, stacked on a first axis, every rank)."""

    rows: torch.Tensor
    """(layers, columns): one row of ``_LAYER_COLUMNS`` per layer."""
    totals: torch.Tensor
    """(``_LAYER_TOTALS``,)."""
    outputs: list[torch.Tensor]
    """Every layer's output matrices, (Q, width)."""
    failures: dict[int, str]
    """Neighbours dropped, and why (asynchronous runs)."""

    @classmethod
    def of(
        cls,
        records: list[LayerRecord],
        trained: LayerwiseResult,
        counters: MessageCounters,
        network: DistributedNetwork,
    ) -> _RankResults:
        """This rank's results: its layers' ``records`` and its node's rows."""
        rows = [_layer_row(record, row) for record, row in zip(records, trained.rows, strict=True)]
        totals = [
            counters.events,
            counters.messages,
            counters.bytes,
            network.control_messages,
            network.rejected,
            trained.train_seconds,
        ]
        return cls(
            rows=torch.tensor(rows, dtype=torch.float64),
            totals=torch.tensor(totals, dtype=torch.float64),
            outputs=[layer[0].contiguous() for layer in trained.history],
            failures=network.failures,
        )

    def flat(self, world: int) -> torch.Tensor:
        """Everything in one float64 vector, failures as one code per rank."""
        codes = torch.zeros(world, dtype=torch.float64)
        for neighbour, why in self.failures.items():
            fault = why.kind if isinstance(why, Reason) else Fault.UNFINISHED
            codes[neighbour] = 1 + _FAILURE_CODES.index(fault)
        parts = [self.rows.flatten(), self.totals, codes, *(o.flatten() for o in self.outputs)]
        return torch.cat(parts)

    def like(self, flat: torch.Tensor, world: int) -> _RankResults:
        """Another rank's results from ``flat`` (shaped like these)."""
        sizes = [self.rows.numel(), self.totals.numel(), world, *(o.numel() for o in self.outputs)]
        rows, totals, codes, *outputs = flat.split(sizes)
        failures = {
            int(rank): _FAILURE_CODES[int(code) - 1].value
            for rank, code in enumerate(codes.tolist())
            if 0 < code <= len(_FAILURE_CODES)
        }
        return _RankResults(
            rows=rows.view_as(self.rows),
            totals=totals,
            outputs=[o.view_as(mine) for o, mine in zip(outputs, self.outputs, strict=True)],
            failures=failures,
        )


_FAILURE_CODES = (Fault.LOST_CONNECTION, Fault.SILENT, Fault.MALFORMED, Fault.UNFINISHED)
"""How a dropped neighbour's fault travels to rank 0: as 1 + its place here. Rank 0 says
the fault's value."""


def _collect(
    setup: LayerSetup,
    local: _RankResults,
    trained: LayerwiseResult,
    on_record: Callable[[EvaluationRecord], None],
    *,
    rank: int,
    timeout: float,
) -> Outcome:
    """Every rank's results to rank 0, point to point, without waiting for failed ranks."""
    group, world = world_group(), dist.get_world_size()
    flat = local.flat(world)
    if rank != 0:
        _send_result(group, rank, flat, timeout)
        ranks = [rank]
        mine = _RankResults(
            local.rows[None], local.totals[None], [o[None] for o in local.outputs], {}
        )
        outcome = _layer_outcome(setup, mine, ranks, trained, lambda record: None)
        outcome.parameters = None
        return outcome
    arrived, lost = _receive_results(group, world, 2 * flat.numel(), local, timeout)
    failures = {n: f"rank 0 dropped it: {why}" for n, why in local.failures.items()}
    for sender in sorted(arrived):
        for n, why in local.like(arrived[sender], world).failures.items():
            failures.setdefault(n, f"rank {sender} dropped it: {why}")
    for sender, why in lost.items():
        failures.setdefault(sender, why)
    ranks = [0, *sorted(r for r in arrived if r not in failures)]
    everyone = [local, *(local.like(arrived[r], world) for r in ranks[1:])]
    stacked = _RankResults(
        rows=torch.stack([r.rows for r in everyone]),
        totals=torch.stack([r.totals for r in everyone]),
        outputs=[torch.stack(layer) for layer in zip(*(r.outputs for r in everyone), strict=True)],
        failures=failures,
    )
    return _layer_outcome(setup, stacked, ranks, trained, on_record)


def _send_result(group: dist.ProcessGroup, rank: int, flat: torch.Tensor, timeout: float) -> None:
    words = flat.view(torch.float32)
    message = Envelope(words.numel()).fill(words).seal(Kind.RESULT, rank, 0, words.numel())
    failure: list[str] = []

    def send() -> None:
        try:
            group.send([message], 0, RESULT_TAG).wait(FOREVER)
        except RuntimeError as error:
            failure.append(first_line(error))

    thread = threading.Thread(target=send, name=f"murmur-result-{rank}", daemon=True)
    thread.start()
    thread.join(timeout)
    if failure or thread.is_alive():
        why = failure[0] if failure else f"rank 0 did not take them within {timeout:g} s"
        raise PeerFailure([0], f"could not send the results to rank 0 ({why})")


def _receive_results(
    group: dist.ProcessGroup, world: int, words: int, local: _RankResults, timeout: float
) -> tuple[dict[int, torch.Tensor], dict[int, str]]:
    """Rank 0 takes every rank's results (``words`` float32: float64 bits) until each
    rank has sent them, has failed, or is reported dropped by a rank that sent them;
    a rank still silent ``timeout`` s after the last arrival is given up on."""
    condition = threading.Condition()
    arrived: dict[int, torch.Tensor] = {}
    lost: dict[int, str] = {}

    def listen(sender: int) -> None:
        def take(kind: Kind, step: int, payload: torch.Tensor | None) -> bool:
            if payload is None:  # never: a RESULT is accepted with its ``words`` only
                raise ValueError("a RESULT without results")
            with condition:
                arrived[sender] = payload.view(torch.float64)
                condition.notify_all()
            return False

        def end(why: str) -> None:
            with condition:
                lost[sender] = why
                condition.notify_all()

        receive_loop(group, sender, {Kind.RESULT: words}, take, end, tag=RESULT_TAG)

    for sender in range(1, world):
        threading.Thread(
            target=listen, args=(sender,), name=f"murmur-results-from-{sender}", daemon=True
        ).start()
    last = time.monotonic()
    with condition:
        while True:
            dropped = set(local.failures)
            for flat in arrived.values():
                dropped.update(local.like(flat, world).failures)
            waiting = [
                r
                for r in range(1, world)
                if r not in arrived and r not in lost and r not in dropped
            ]
            if not waiting:
                break
            remaining = last + timeout - time.monotonic()
            if remaining <= 0:
                for r in waiting:
                    lost[r] = f"sent no results within {timeout:g} s"
                break
            count = len(arrived) + len(lost)
            condition.wait(remaining)
            if len(arrived) + len(lost) > count:
                last = time.monotonic()
        return dict(arrived), dict(lost)


def _layer_row(record: LayerRecord, rows: LayerRows) -> list[float]:
    """This rank's row of ``_LAYER_COLUMNS`` for one layer (its node is the only one)."""
    if rows.test_accuracy is None:
        raise ValueError("a layer-wise run measures the test accuracy of every layer")
    return [
        record["layer"],
        record["width"],
        record["admm_iterations"],
        rows.test_accuracy[0],
        rows.test_loss[0],
        rows.train_accuracy[0],
        rows.train_residual[0],
        rows.train_target[0],
        rows.events[0],
        rows.messages[0],
        rows.bytes[0],
        record["wall_seconds"],
        rows.steps[0],
        rows.rounds[0],
        rows.residual[0],
        float(rows.converged[0]),
    ]


def _layer_record(at: torch.Tensor, outputs: torch.Tensor) -> LayerRecord:
    """One layer's record from the rows of the ranks, (ranks, columns), and their
    output matrices, (ranks, Q, n)."""
    column = {name: at[:, i] for i, name in enumerate(_LAYER_COLUMNS)}
    counts = {
        name: column[name].to(torch.int64).tolist() for name in ("events", "messages", "bytes")
    }
    rows = LayerRows(
        test_accuracy=column["test_accuracy"].tolist(),
        test_loss=column["test_loss"].tolist(),
        **counts,
        train_accuracy=column["train_accuracy"].tolist(),
        train_residual=column["train_residual"].tolist(),
        train_target=column["train_target"].tolist(),
        steps=column["steps"].to(torch.int64).tolist(),
        rounds=column["rounds"].to(torch.int64).tolist(),
        residual=column["residual"].tolist(),
        converged=[bool(value) for value in column["converged"].tolist()],
    )
    return layer_record(
        int(column["layer"][0]),
        rows,
        width=int(column["width"][0]),
        admm_iterations=int(column["admm_iterations"][0]),
        outputs=outputs,
        wall_seconds=float(column["wall"].max()),
    )


def _layer_outcome(
    setup: LayerSetup,
    results: _RankResults,
    ranks: list[int],
    trained: LayerwiseResult,
    on_record: Callable[[EvaluationRecord], None],
) -> Outcome:
    """The run's records and outcome from the stacked results of ``ranks``."""
    records = [
        _layer_record(results.rows[:, e], results.outputs[e]) for e in range(results.rows.shape[1])
    ]
    for record in records:
        on_record(record)
    total = {name: results.totals[:, i] for i, name in enumerate(_LAYER_TOTALS)}
    per_agent = {name: values.to(torch.int64).tolist() for name, values in total.items()}
    graph = setup.graph
    return run_outcome(
        records[-1],
        AgentTotals(per_agent["events"], per_agent["messages"], per_agent["bytes"]),
        RunFacts(
            topology=graph.name,
            iterations=trained.admm_iterations,
            train_seconds=float(total["train_seconds"].max()),
            samples=int(sum(setup.shards[rank].numel() for rank in ranks)),
            agents=graph.agents,
        ),
        parameters=results.outputs[-1],
        extra={
            **layerwise_extra(trained, records, graph, decentralized=True),
            "runtime": "distributed",
            "world_size": graph.agents,
            "ranks": ranks,
            "messages_per_agent": per_agent["messages"],
            "bytes_per_agent": per_agent["bytes"],
            "control_messages_per_agent": per_agent["control"],
            "rejected_per_agent": per_agent["rejected"],
            "failed_agents": sorted(results.failures),
            "failures": {str(rank): why for rank, why in sorted(results.failures.items())},
        },
    )
