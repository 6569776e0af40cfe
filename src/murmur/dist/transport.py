"""The transport of the distributed runtime: one agent per rank, messages through
its :class:`~murmur.dist.mailbox.Mailbox` and :class:`~murmur.dist.mailbox.Outbox`.

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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import torch
import torch.distributed as dist

from murmur.algorithms.compressors import Compressor
from murmur.algorithms.estimates import EstimateUpdate, Segments, add_packed, max_packed_words
from murmur.dist.mailbox import (
    Kind,
    Mailbox,
    Outbox,
    PeerFailure,
    PeerTimeout,
)
from murmur.metrics.counters import MessageCounters
from murmur.topology import Graph, as_sparse

DEFAULT_TIMEOUT = 60.0
"""Seconds to wait for a peer: to join, for each step's messages, to finish."""


class DistributedTransport:
    """The :class:`~murmur.sim.transport.Transport` of one agent per rank.

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

    ``publish`` sends the rank's compressed difference as a DELTA, the packed
    codes of :mod:`murmur.algorithms.estimates` (values, int32 indices, packed
    bits), when the agent sends any segment, else NONE; every neighbour adds
    the decoded difference to its copy of this agent's estimate, as this agent
    does to its own, and counts the encoded sizes the simulator counts.

    Values are float32, or float64 when ``initial`` is: a float64 row travels as
    twice as many float32 (the same bits), so it arrives exactly.
    """

    def __init__(
        self,
        group: dist.ProcessGroup,
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
        self.agents = [rank]
        """The agents this transport sends for: the rank's own."""
        self.neighbours = graph.neighbors(rank)
        self.graph = graph
        """The graph the agents talk over: always the one given."""
        self.timeout = timeout
        self.counters = counters if counters is not None else MessageCounters(1)
        self.control_messages = 0
        dtype = torch.float64 if initial.dtype == torch.float64 else torch.float32
        self._sent = initial[rank : rank + 1].to(dtype, copy=True)
        self._message_bytes = self._sent.numel() * self._sent.element_size()
        self._mailbox = Mailbox(
            group,
            rank,
            self.neighbours,
            _wire(initial[self.neighbours].to(dtype).contiguous()),
            delta_words=max_packed_words(self._sent.shape[1], self._sent.element_size()),
        )
        self._outbox = Outbox(group, rank, self.neighbours)
        self._step = 0
        self._rows: dict[int, tuple[torch.Tensor, list[int], torch.Tensor]] = {}
        self._codec: tuple[Compressor, Segments] | None = None
        """How the neighbours' DELTAs are decoded: as this rank's own last ``publish``."""

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

    def state_dict(self) -> dict[str, Any]:
        """Where this agent's traffic stands after its last broadcast: its own last value,
        the broadcast number, each neighbour's value as of that number (waited for, as
        ``mix`` would: an algorithm that mixes before it broadcasts has not read them
        yet), the counts."""
        received = self._patiently(
            partial(self._mailbox.values_at, self._step, add=self._add_delta)
        )
        return {
            "sent": self._sent.clone(),
            "step": self._step,
            "received": received.clone(),
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

    def publish(self, update: EstimateUpdate) -> None:
        """Send this agent's sent segments of ``update`` (one row) as a DELTA, else NONE."""
        if update.sent.shape[0] != 1 or update.delta.shape != self._sent.shape:
            raise ValueError(
                f"one agent per rank: an update of one row of {self._sent.shape[1]} values, "
                f"got {tuple(update.delta.shape)}"
            )
        self._step += 1
        self._codec = (update.compressor, update.segments)
        segments = int(update.sent[0].sum())
        if segments == 0:
            self._send(Kind.NONE, self._step, self.neighbours)
            self.control_messages += len(self.neighbours)
            return
        self._sent.add_(update.delta)
        self._send(Kind.DELTA, self._step, self.neighbours, payload=update.pack(0))
        payload = int((update.sent[0].to(torch.int64) * update.segment_bytes()).sum())
        degree = len(self.neighbours)
        self.counters.events_per_agent[0] += segments
        self.counters.messages_per_agent[0] += segments * degree
        self.counters.bytes_per_agent[0] += payload * degree

    def _add_delta(self, row: torch.Tensor, words: torch.Tensor) -> None:
        """Add a neighbour's DELTA to its row (wire float32) of the mailbox."""
        if self._codec is None:
            raise ValueError("a DELTA before this agent published any")
        compressor, segments = self._codec
        add_packed(row.view(self._sent.dtype), words, compressor, segments)

    def mix(self, operator: torch.Tensor, out: torch.Tensor, scale: float = 1.0) -> None:
        """``out += scale * operator[rank] @ V`` once every neighbour's value of this step is in.

        The row is applied as the simulator applies the whole operator, one sparse
        row over the same values in the same order, so both round alike.
        """
        sources, row = self._operator_row(operator)
        received = self._patiently(
            partial(self._mailbox.values_at, self._step, add=self._add_delta)
        )
        received = received.view(self._sent.dtype)
        if not sources:
            return
        values = torch.stack([self._sent[0] if j < 0 else received[j] for j in sources])
        out.addmm_(row, values, alpha=scale)

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

    def _operator_row(self, operator: torch.Tensor) -> tuple[list[int], torch.Tensor]:
        """Row ``rank`` of ``operator`` as a sparse (1, k) row over its k non-zero columns,
        and where each column's value is: -1 for this agent's own, else the
        neighbour's row in the mailbox."""
        cached = self._rows.get(id(operator))
        if cached is not None and cached[0] is operator:
            return cached[1], cached[2]
        if operator.layout == torch.sparse_csr:
            rows, columns = operator.crow_indices(), operator.col_indices()
            start, end = int(rows[self.rank]), int(rows[self.rank + 1])
            present = columns[start:end].tolist()
            coefficients = operator.values()[start:end]
        else:
            dense = operator.to_dense()[self.rank]
            present = dense.nonzero().squeeze(1).tolist()
            coefficients = dense[present]
        strangers = sorted(set(present) - {self.rank, *self.neighbours})
        if strangers:
            raise ValueError(
                f"operator row {self.rank} is non-zero outside the agent and its neighbours"
            )
        sources = [-1 if j == self.rank else self.neighbours.index(j) for j in present]
        row = as_sparse(coefficients.unsqueeze(0).to(torch.float64), dtype=self._sent.dtype)
        self._rows[id(operator)] = (operator, sources, row)
        return sources, row


def _wire(values: torch.Tensor) -> torch.Tensor:
    """What goes on the wire: float32 as is, float64 as twice as many float32."""
    return values.view(torch.float32) if values.dtype == torch.float64 else values


def all_gather(local: torch.Tensor) -> torch.Tensor:
    """Every rank's ``local`` (same shape on all), stacked: (world, *shape)."""
    parts = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, local)
    return torch.stack(parts)
