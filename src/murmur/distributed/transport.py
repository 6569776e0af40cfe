"""The transport of the distributed runtime: a block of agents per rank (one by default),
messages through its :class:`~murmur.distributed.mailbox.Mailbox` and
:class:`~murmur.distributed.outbox.Outbox`.

Synchronous algorithms stay in lockstep without barriers: before mixing, a
rank waits (with a deadline) for each neighbour's message of the same
broadcast number, a VALUE or a NONE ("nothing to send this step"), so a run
gives the simulator's events, messages and parameters. A neighbour whose
connection closes is named at once; one that sends nothing, or takes nothing,
for ``timeout`` seconds is named then. The rank tells its other neighbours
(ABORT), so ranks farther away name the same failed rank: a rank whose
neighbours are silent asks them (PING) whether their processes still run. One
that does not answer (PONG) within another timeout is named; ones that do are
stalled behind another rank, and their report is waited for, up to two more
timeouts. A rank next to a failed one stops within twice the timeout, ranks
farther away as soon as the report reaches them.

A rank holding a block of agents talks to the ranks that hold its agents'
neighbours: one message per neighbouring rank and broadcast, carrying the rows
of the block that rank's agents need. Agents of one block hear each other in
memory. Every agent's messages are counted as the simulator counts them, one
per neighbour, in the block or not.

On a time-varying graph (``varying``: the one-peer exponential topology) the run's
graph holds every link, and each iteration's graph (:meth:`DistributedTransport.use_graph`,
a pure function of the iteration on every rank) says which of them carry that
step's messages: a rank sends to, and waits for, only the ranks linked to it in
that graph (one peer, or none, when a rank holds one agent), and numbers its
messages by its broadcasts, so a neighbour's numbers skip the steps it did not
talk to this rank.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

import torch
import torch.distributed as dist

from murmur.algorithms.compressors import Compressor
from murmur.algorithms.estimates import EstimateUpdate, Segments, add_packed, max_packed_words
from murmur.distributed.failures import PeerFailure, PeerTimeout
from murmur.distributed.mailbox import Mailbox
from murmur.distributed.outbox import Outbox
from murmur.distributed.wire import Envelope, Kind
from murmur.distributed.wording import rank_list
from murmur.metrics.counters import MessageCounters
from murmur.topology import Graph, as_sparse

DEFAULT_TIMEOUT = 60.0
"""Seconds to wait for a peer: to join, for each step's messages, to finish."""

T = TypeVar("T")


class DistributedTransport:
    """The :class:`~murmur.sim.transport.Transport` of a block of agents per rank.

    Rank ``r`` holds agents ``r * block`` to ``r * block + block - 1``
    (``agents``); its state is their rows, (block, P). ``neighbours`` are the
    ranks holding a neighbour of one of them. ``broadcast`` sends each
    neighbouring rank a VALUE, the rows of the block it needs, when one of those
    agents sends, else a NONE header (control traffic, counted in
    ``control_messages``, not in ``counters``). ``mix(operator, out, scale)``
    uses the block's rows of the operator: ``out += scale * operator[agents] @
    V``, with ``V_j`` the last broadcast of agent ``j``: from memory for an agent
    of the block, else what its rank had sent by the same broadcast number.

    ``broadcast`` returns once its messages are on the wire, and the next
    ``broadcast`` or ``publish`` (or ``finish``) first waits, with the deadline,
    until every neighbouring rank has taken them: each peer's mailbox always has
    a receive from this rank posted, so that does not wait for the peer's own
    sends, also when two neighbours send to each other at once.

    ``publish`` sends the agents' compressed differences as a DELTA, the packed
    codes of :mod:`murmur.algorithms.estimates` (values, int32 indices, packed
    bits), to each neighbouring rank one of whose agents sends any segment, else
    NONE; every neighbour adds the decoded difference to its copy of the agent's
    estimate, as the agent does to its own, and counts the encoded sizes the
    simulator counts. A block's DELTA carries the packed codes of each of its
    sending rows the peer needs, one after the other, then int32 words: their
    positions among those rows, their lengths in words, and how many there are.

    Values are float32, or float64 when ``initial`` is: a float64 row travels as
    twice as many float32 (the same bits), so it arrives exactly.

    Nothing is copied for the wire: the block's last broadcasts live in the
    envelope that carries them (a neighbouring rank that needs only some rows gets
    them gathered into an envelope of its own), compressed differences are packed
    straight into theirs, and ``mix`` reads the neighbours' values in the mailbox's
    receive buffers (one gathering copy of the rows the block's operator rows
    use, for the sparse product).
    """

    fused_mix: None = None
    """No one-pass mixing step: the block mixes what the neighbouring ranks sent
    through :meth:`mix`."""

    def __init__(
        self,
        group: dist.ProcessGroup,
        graph: Graph,
        rank: int,
        initial: torch.Tensor,
        timeout: float,
        counters: MessageCounters | None = None,
        block: int = 1,
        varying: bool = False,
    ) -> None:
        """``initial`` (agents, P): every agent's starting values, known to all ranks.

        ``counters``: add to these (the block's, e.g. shared by the layers of one run).
        ``block``: the agents each rank holds. ``varying``: the agents talk over each
        iteration's graph (:meth:`use_graph`), a subgraph of ``graph``.
        """
        _check_block(graph, rank, initial, block)
        self.rank = rank
        self.block = block
        first = rank * block
        self.agents = list(range(first, first + block))
        """The agents this transport sends for: the rank's own."""
        adjacency = [graph.neighbors(agent) for agent in self.agents]
        peers = _peers(adjacency, rank, block)
        self.neighbours = peers.ranks
        """The ranks this one talks to: those holding a neighbour of one of its agents."""
        self._heard = peers.heard
        """Per neighbouring rank: the agents whose rows its messages carry, in order."""
        self._told = peers.told
        """Per neighbouring rank: the block's rows (0 .. block-1) its messages carry."""
        self.graph = graph
        """The graph the agents talk over: the one given, or the graph of the iteration
        (:meth:`use_graph`)."""
        self.links = graph
        """Every link an iteration's graph may use: the graph given."""
        self.varying = varying
        self.timeout = timeout
        self.counters = counters if counters is not None else MessageCounters(block)
        self._control = 0
        self._degrees = torch.tensor([len(n) for n in adjacency], dtype=torch.int64)
        self._talking: list[int] = list(range(len(self.neighbours)))
        """The neighbouring ranks (indices in ``neighbours``) the iteration's graph links."""
        self._graphs: dict[Graph, tuple[list[int], torch.Tensor]] = {}
        self._open_envelopes(initial)
        self._delta_words = self._largest_delta()
        self._mailbox = self._open_mailbox(group, initial)
        self._deltas: list[Envelope] = []
        """The envelopes of DELTAs: one for all (a single agent), or one per neighbouring
        rank; made at the first ``publish``."""
        self._outbox = Outbox(group, rank, self.neighbours)
        self._mailbox.answer = self._outbox.answer
        self._step = 0
        self._rows: dict[int, tuple[torch.Tensor, list[int], torch.Tensor, torch.Tensor]] = {}
        self._codec: tuple[Compressor, Segments] | None = None
        """How the neighbours' DELTAs are decoded: as this rank's own last ``publish``."""

    def _open_envelopes(self, initial: torch.Tensor) -> None:
        """The envelopes of the block's VALUEs, its last broadcasts (``_sent``) starting
        as its rows of ``initial``."""
        block = self.block
        dtype = torch.float64 if initial.dtype == torch.float64 else torch.float32
        parameters = initial.shape[1]
        self._width = width = parameters * (2 if dtype == torch.float64 else 1)
        """Float32 per row on the wire."""
        self._value = Envelope(block * width)
        self._sent = self._value.payload.view(dtype).view(block, parameters)
        self._sent.copy_(initial[self.agents[0] : self.agents[0] + block])
        self._message_bytes = parameters * self._sent.element_size()
        self._values = [
            self._value if len(rows) == block else Envelope(len(rows) * width)
            for rows in self._told
        ]
        """Per neighbouring rank: the envelope of its VALUEs (all rows: ``_value``)."""
        self._told_index = [torch.tensor(rows, dtype=torch.int64) for rows in self._told]

    def _largest_delta(self) -> int:
        """The most float32 words of a DELTA, as the mailbox accepts them and the block's
        envelopes hold them: one agent's packed difference, or, between blocks, one per
        row of the most rows heard from a rank, then their positions, lengths and count."""
        words = max_packed_words(self._sent.shape[1], self._sent.element_size())
        if self.block > 1:
            words = max(map(len, self._heard), default=1) * (words + 2) + 1
        return words

    def _open_mailbox(self, group: dist.ProcessGroup, initial: torch.Tensor) -> Mailbox:
        """The mailbox of the neighbouring ranks' messages, each rank's row starting, as on
        the wire, from the ``initial`` values of its agents the block hears."""
        lengths = [len(agents) * self._width for agents in self._heard]
        heard = torch.zeros(len(self.neighbours), max(lengths, default=self._width))
        for i, agents in enumerate(self._heard):
            values = initial[agents].to(self._sent.dtype).contiguous()
            heard[i, : lengths[i]] = _wire(values).reshape(-1)
        return Mailbox(
            group,
            self.rank,
            self.neighbours,
            heard,
            delta_words=self._delta_words,
            lengths=lengths,
            skipping=self.varying,
        )

    def use_graph(self, graph: Graph) -> None:
        """Talk over ``graph``, a subgraph of :attr:`links`, from now on (a transport made
        ``varying``): every rank calls it with the same graph before the same step."""
        if graph is self.graph:
            return
        if not self.varying:
            raise ValueError("use_graph on a transport of one fixed graph")
        if graph.agents != self.links.agents:
            raise ValueError(f"a graph of {graph.agents} agents for {self.links.agents}")
        if graph not in self._graphs:
            if len(self._graphs) >= 64:  # graphs no longer used
                self._graphs.clear()
            self._graphs[graph] = self._talks_over(graph)
        self._talking, self._degrees = self._graphs[graph]
        self.graph = graph

    def _talks_over(self, graph: Graph) -> tuple[list[int], torch.Tensor]:
        """The neighbouring ranks (indices in ``neighbours``) ``graph`` links to the
        block, and its agents' degrees in it."""
        adjacency = [graph.neighbors(agent) for agent in self.agents]
        index = {peer: i for i, peer in enumerate(self.neighbours)}
        ranks = _peers(adjacency, self.rank, self.block).ranks
        strangers = [peer for peer in ranks if peer not in index]
        if strangers:
            raise ValueError(f"{graph.name} links rank {self.rank} to {rank_list(strangers)}")
        degrees = torch.tensor([len(n) for n in adjacency], dtype=torch.int64)
        return [index[peer] for peer in ranks], degrees

    @property
    def control_messages(self) -> int:
        """NONE, STOP, PING, ABORT and PONG headers sent: control traffic."""
        return self._control + self._outbox.answered

    @control_messages.setter
    def control_messages(self, value: int) -> None:
        self._control = value - self._outbox.answered

    @property
    def rejected(self) -> int:
        """Messages from peers refused as malformed."""
        return self._mailbox.rejected

    @property
    def last_sent(self) -> torch.Tensor:
        """The block's own last broadcasts, (block, P)."""
        return self._sent

    def start(self) -> None:
        self._mailbox.start()
        self._outbox.start()

    def state_dict(self) -> dict[str, Any]:
        """Where the block's traffic stands after its last broadcast: its own last values,
        the broadcast number, each neighbouring rank's values as of that number (waited
        for, as ``mix`` would: an algorithm that mixes before it broadcasts has not read
        them yet), the counts."""
        self._patiently(self._values_now)
        return {
            "sent": self._sent.clone(),
            "step": self._step,
            "received": self._mailbox.matrix(),
            "counters": self.counters.state_dict(),
            "control_messages": self.control_messages,
            "rejected": self._mailbox.rejected,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Before :meth:`start`: continue from :meth:`state_dict`, taken by every rank after
        the same iteration (so every neighbour's next message is number ``step + 1``)."""
        if state["sent"].shape != self._sent.shape or state["sent"].dtype != self._sent.dtype:
            raise ValueError(
                f"a last broadcast of {state['sent'].dtype} {tuple(state['sent'].shape)}, "
                f"expected {self._sent.dtype} {tuple(self._sent.shape)}"
            )
        self._mailbox.restore(int(state["step"]), state["received"], int(state["rejected"]))
        self._sent.copy_(state["sent"])
        self._step = int(state["step"])
        self.counters.load_state_dict(state["counters"])
        self.control_messages = int(state["control_messages"])

    def broadcast(self, senders: torch.Tensor, values: torch.Tensor) -> None:
        """The agents flagged in ``senders`` (block,) send their rows of ``values``
        (block, P): each neighbouring rank gets the rows it needs if one of them
        sends, else a NONE."""
        if senders.shape != (self.block,) or values.shape != self._sent.shape:
            raise ValueError(
                f"a block of {self.block}: senders ({self.block},) and values "
                f"{tuple(self._sent.shape)}, got {tuple(senders.shape)} and "
                f"{tuple(values.shape)}"
            )
        self._settle()
        self._step += 1
        flags = senders.tolist()
        if all(flags):
            self._sent.copy_(values)
        else:
            for row in (i for i, sends in enumerate(flags) if sends):
                self._sent[row].copy_(values[row])
        messages: dict[int, tuple[Kind, Envelope | None]] = {}
        for i in self._talking:
            if any(flags[row] for row in self._told[i]):
                messages[self.neighbours[i]] = (Kind.VALUE, self._payload(i))
            else:
                messages[self.neighbours[i]] = (Kind.NONE, None)
                self._control += 1
        self._post_each(messages)
        self.counters.record_events(senders.to(torch.int64), self._message_bytes, self._degrees)

    def broadcast_all_overwriting(self, values: torch.Tensor) -> None:
        """Every agent of the block sends its row of ``values`` (copied, so ``values``
        keeps its numbers)."""
        self.broadcast(torch.ones(values.shape[0], dtype=torch.bool, device=values.device), values)

    def _payload(self, i: int) -> Envelope:
        """The envelope of neighbouring rank ``i``'s VALUE: the block's rows it needs (in
        order) of its last broadcasts."""
        envelope = self._values[i]
        if envelope is not self._value:
            rows = self._told_index[i]
            out = envelope.payload.view(self._sent.dtype).view(rows.numel(), -1)
            torch.index_select(self._sent, 0, rows, out=out)
        return envelope

    def _delta_envelope(self, i: int) -> Envelope:
        """The envelope of the DELTAs for neighbouring rank ``i`` (all share one when the
        rank holds a single agent)."""
        if not self._deltas:
            count = 1 if self.block == 1 else len(self.neighbours)
            self._deltas = [Envelope(self._delta_words) for _ in range(count)]
        return self._deltas[0 if self.block == 1 else i]

    def publish(self, update: EstimateUpdate) -> None:
        """Send the block's sent segments of ``update`` (block rows) as DELTAs, else NONE."""
        if self.varying:
            raise ValueError(
                "publish needs every neighbour to hear every difference, which a "
                "time-varying graph does not give"
            )
        if update.sent.shape[0] != self.block or update.delta.shape != self._sent.shape:
            raise ValueError(
                f"a block of {self.block}: an update of {tuple(self._sent.shape)} values, "
                f"got {tuple(update.delta.shape)}"
            )
        self._settle()
        self._step += 1
        self._codec = (update.compressor, update.segments)
        if self.block > 1:
            self._publish_block(update)
            return
        segments = int(update.sent[0].sum())
        if segments == 0:
            self._post_each(dict.fromkeys(self.neighbours, (Kind.NONE, None)))
            self._control += len(self.neighbours)
            return
        self._sent.add_(update.delta)
        envelope = self._delta_envelope(0)
        envelope.length = update.pack(0, out=envelope.payload).numel()
        self._post_each(dict.fromkeys(self.neighbours, (Kind.DELTA, envelope)))
        payload = int((update.sent[0].to(torch.int64) * update.segment_bytes()).sum())
        degree = len(self.neighbours)
        self.counters.events_per_agent[0] += segments
        self.counters.messages_per_agent[0] += segments * degree
        self.counters.bytes_per_agent[0] += payload * degree

    def _publish_block(self, update: EstimateUpdate) -> None:
        """``publish`` for a block: each neighbouring rank gets the packed codes of the
        sending rows it needs in one DELTA (see the class docstring)."""
        segments = update.sent.to(torch.int64).sum(1)
        flags = (segments > 0).tolist()
        packed: dict[int, torch.Tensor] = {}
        messages: dict[int, tuple[Kind, Envelope | None]] = {}
        for peer_index, (peer, rows) in enumerate(zip(self.neighbours, self._told, strict=True)):
            positions = [i for i, row in enumerate(rows) if flags[row]]
            if not positions:
                messages[peer] = (Kind.NONE, None)
                self._control += 1
                continue
            for i in positions:
                if rows[i] not in packed:
                    packed[rows[i]] = update.pack(rows[i])
            parts = [packed[rows[i]] for i in positions]
            counts = [*positions, *(part.numel() for part in parts), len(parts)]
            trailer = torch.tensor(counts, dtype=torch.int32).view(torch.float32)
            envelope = self._delta_envelope(peer_index)
            envelope.length = sum(part.numel() for part in parts) + trailer.numel()
            torch.cat([*parts, trailer], out=envelope.payload[: envelope.length])
            messages[peer] = (Kind.DELTA, envelope)
        self._post_each(messages)
        for row in (i for i, sends in enumerate(flags) if sends):
            self._sent[row].add_(update.delta[row])
        payload = (update.sent.to(torch.int64) * update.segment_bytes()).sum(1)
        self.counters.record_events(segments, payload, self._degrees)

    def _add_delta(self, row: torch.Tensor, words: torch.Tensor) -> None:
        """Add a neighbour's DELTA to its row (wire float32) of the mailbox: one agent's
        packed difference, or, from a block, several (see the class docstring)."""
        if self._codec is None:
            raise ValueError("a DELTA before this agent sent any value")
        compressor, segments = self._codec
        if self.block == 1:
            add_packed(row.view(self._sent.dtype), words, compressor, segments)
            return
        heard = row.numel() // self._width
        count = int(words[-1:].view(torch.int32))
        if not 0 < count <= heard or 2 * count + 1 > words.numel():
            raise ValueError(f"a DELTA of {count} rows from a block of {heard}")
        numbers = words[-1 - 2 * count : -1].view(torch.int32).tolist()
        positions, lengths = numbers[:count], numbers[count:]
        if positions != sorted(set(positions)) or not 0 <= positions[0] <= positions[-1] < heard:
            raise ValueError(f"rows {positions} of a block of {heard}")
        if min(lengths) < 1 or sum(lengths) + 2 * count + 1 != words.numel():
            raise ValueError(f"{words.numel()} words for differences of {lengths} words")
        offset = 0
        for position, length in zip(positions, lengths, strict=True):
            start = position * self._width
            target = row[start : start + self._width].view(self._sent.dtype)
            add_packed(target, words[offset : offset + length], compressor, segments)
            offset += length

    def mix(self, operator: torch.Tensor, out: torch.Tensor, scale: float = 1.0) -> None:
        """``out += scale * operator[agents] @ V`` once every neighbouring rank's values of
        this step are in.

        The block's rows are applied as the simulator applies the whole operator, sparse
        rows over the same values in the same order, so both round alike.
        """
        sources, rows, gathered = self._operator_rows(operator)
        received = self._patiently(self._values_now)
        if not sources:
            return
        known = self._known(received)
        torch.stack([known[source] for source in sources], out=gathered)
        out.addmm_(rows, gathered, alpha=scale)

    def _values_now(self, timeout: float) -> list[torch.Tensor]:
        """Every neighbouring rank's row as of the block's last broadcast number, once the
        ranks the iteration's graph links (all, on a fixed graph) sent theirs."""
        senders = self._talking if self.varying else None
        return self._mailbox.values_at(self._step, timeout, self._add_delta, senders)

    def _known(self, received: list[torch.Tensor]) -> list[torch.Tensor]:
        """Every value the block knows, one (P,) row each (views, nothing copied): its
        own rows, then each neighbouring rank's rows in the order of ``_heard``."""
        known = list(self._sent.unbind())
        for row, agents in zip(received, self._heard, strict=True):
            heard = row[: len(agents) * self._width].view(self._sent.dtype)
            known.extend(heard.view(len(agents), self._sent.shape[1]).unbind())
        return known

    def finish(self) -> None:
        """Tell the neighbours this rank is done, and wait until they are too."""
        self._send(Kind.STOP, self._step, self.neighbours)
        self._control += len(self.neighbours)
        self._patiently(self._mailbox.wait_stopped)
        self._outbox.close()

    def _patiently(self, wait: Callable[[float], T]) -> T:
        """``wait(timeout)``; if some neighbours are silent that long, find out whether they
        are gone (a send to them fails: named at once), frozen (no PONG to a PING within
        a timeout: named then) or alive and stalled behind another rank, whose ABORT
        will name it: wait up to two more timeouts for it."""
        try:
            return wait(self.timeout)
        except PeerTimeout as silent:
            since = self._mailbox.pongs()
            self._send(Kind.PING, self._step, silent.ranks, timeout=min(self.timeout, 1.0))
            self._control += len(silent.ranks)
            quiet = self._mailbox.unanswered(silent.ranks, since, self.timeout)
            if quiet:
                raise PeerTimeout(
                    quiet,
                    f"{rank_list(quiet)} {silent.late}, nor answered a ping within "
                    f"{self.timeout:g} s",
                ) from None
            return wait(2 * self.timeout)

    def raise_failure_within(self, timeout: float) -> None:
        """Raise the failure a neighbour reported or this rank saw within ``timeout``."""
        self._mailbox.raise_failure_within(timeout)

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

    def _post_each(self, messages: Mapping[int, tuple[Kind, Envelope | None]]) -> None:
        """Post this step's messages; a send that fails is raised by the next wait."""
        self._outbox.post_each(self._step, messages)

    def _settle(self) -> None:
        """Wait (with the deadline) until the neighbouring ranks took every message posted,
        so that their envelopes may be written again."""
        try:
            self._outbox.wait(self.timeout)
        except PeerFailure:
            self._mailbox.raise_if_aborted()
            raise

    def _operator_rows(
        self, operator: torch.Tensor
    ) -> tuple[list[int], torch.Tensor, torch.Tensor]:
        """Where the value of each of the k columns non-zero in the block's rows of
        ``operator`` is in :meth:`_known` (in the operator's order), those rows as a
        sparse (block, k) matrix, and a (k, P) buffer to gather the values in."""
        cached = self._rows.get(id(operator))
        if cached is not None and cached[0] is operator:
            return cached[1], cached[2], cached[3]
        first = self.agents[0]
        if operator.layout == torch.sparse_csr:
            crow, columns = operator.crow_indices(), operator.col_indices()
            start, end = int(crow[first]), int(crow[first + self.block])
            rows = torch.zeros(self.block, operator.shape[1], dtype=torch.float64)
            counts = crow[first + 1 : first + self.block + 1] - crow[first : first + self.block]
            row_of = torch.repeat_interleave(torch.arange(self.block), counts)
            rows[row_of, columns[start:end]] = operator.values()[start:end].to(torch.float64)
        else:
            rows = operator.to_dense()[first : first + self.block].to(torch.float64)
        present = rows.any(dim=0).nonzero().squeeze(1).tolist()
        known = [*self.agents, *(agent for agents in self._heard for agent in agents)]
        where = {agent: i for i, agent in enumerate(known)}
        strangers = sorted(set(present) - set(where))
        if strangers:
            raise ValueError(
                f"operator rows {first}..{first + self.block - 1} are non-zero outside "
                "the block's agents and their neighbours"
            )
        sources = [where[j] for j in present]
        matrix = as_sparse(rows[:, present], dtype=self._sent.dtype)
        gathered = torch.empty(len(sources), self._sent.shape[1], dtype=self._sent.dtype)
        self._rows[id(operator)] = (operator, sources, matrix, gathered)
        return sources, matrix, gathered


def _check_block(graph: Graph, rank: int, initial: torch.Tensor, block: int) -> None:
    """ValueError unless ``initial`` has a row per agent of ``graph`` and rank ``rank``
    can hold a block of ``block`` of them."""
    if initial.shape[0] != graph.agents:
        raise ValueError(f"initial has {initial.shape[0]} rows for {graph.agents} agents")
    if block < 1 or graph.agents % block != 0 or rank * block >= graph.agents:
        raise ValueError(f"rank {rank} cannot hold a block of {block} of {graph.agents} agents")


class _Peers(NamedTuple):
    """Whom a block of agents talks to."""

    ranks: list[int]
    """The neighbouring ranks: those holding a neighbour of one of the block's agents."""
    heard: list[list[int]]
    """Per neighbouring rank: its agents the block hears, in order."""
    told: list[list[int]]
    """Per neighbouring rank: the block's rows (0 .. block-1) its agents hear, in order."""


def _peers(adjacency: list[list[int]], rank: int, block: int) -> _Peers:
    """The neighbouring ranks of rank ``rank``'s block, whose agents have the neighbours
    ``adjacency`` (one list per row of the block)."""
    needed: dict[int, set[int]] = {}  # a neighbouring rank -> its agents the block hears
    wanted: dict[int, set[int]] = {}  # a neighbouring rank -> the block's rows it hears
    for row, neighbours in enumerate(adjacency):
        for agent in neighbours:
            owner = agent // block
            if owner != rank:
                needed.setdefault(owner, set()).add(agent)
                wanted.setdefault(owner, set()).add(row)
    ranks = sorted(needed)
    return _Peers(
        ranks, [sorted(needed[peer]) for peer in ranks], [sorted(wanted[peer]) for peer in ranks]
    )


def world_group() -> dist.ProcessGroup:
    """The default process group, which ``init_process_group`` joined."""
    group = dist.group.WORLD
    if group is None:
        raise RuntimeError("no default process group: torch.distributed is not initialized")
    return group


def _wire(values: torch.Tensor) -> torch.Tensor:
    """What goes on the wire: float32 as is, float64 as twice as many float32."""
    return values.view(torch.float32) if values.dtype == torch.float64 else values


def all_gather(local: torch.Tensor) -> torch.Tensor:
    """Every rank's ``local`` (same shape on all), stacked: (world, *shape)."""
    parts = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, local)
    return torch.stack(parts)
