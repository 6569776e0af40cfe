"""The simulator's transport when messages get lost: one mailbox per directed edge.

With ``faults.drop`` = p each point-to-point message is lost with probability
p, independently, drawn from the run's ``"faults"`` stream; a receiver that
loses a message keeps the last value it had of the sender. Neighbours of one
agent then hold different values of it, so this transport keeps what every
receiver holds of every sender, one row per directed edge, next to each
agent's own last broadcast (``last_sent``):

- ``broadcast`` copies a sender's row into the mailboxes of the edges whose
  message survived;
- ``publish`` adds a compressed difference to the estimate the sender keeps of
  itself, and to the mailboxes of the edges whose message survived: a receiver
  that lost a difference keeps an estimate that differs from the sender's from
  then on (later differences are taken against the sender's own estimate, so
  the receiver's error is never sent again), which is what losing a difference
  does to CHOCO-SGD, SPARQ-SGD and compressed DETSGRAD;
- ``mix(W, out, s)`` adds s (W_ii x^_i + sum_j W_ij m_ji) to row i of ``out``,
  where x^_i is agent i's own last broadcast and m_ji what i last received
  from j. The columns of W then no longer act on one common value per agent:
  DSGD's average is no longer kept, and DETSGRAD-GT's trackers no longer sum
  to the smoothed gradients' sum (1^T L = 0 held only for common values).

With ``faults.resend`` a sender learns within the round which of its messages were
lost (acknowledgments) and sends them again: an edge whose value was lost gets the
sender's last broadcast at the next iteration even when the sender has no event (a
message, not an event), and a lost difference is owed to that edge and goes with the
sender's next message to it, or alone at the next iteration when the sender sends
nothing, its codes counted again. A receiver's estimate is then always the sender's
less what it is still owed: a loss delays it instead of leaving it wrong for good.
Since every sender then knows what each neighbour holds of it, ``mix`` with a
symmetric W mixes each edge as the difference of what its two ends hold of each
other, sum_j W_ij (m_ji - m_ij) (plus the row sum times x^_i): the mix then adds
nothing to the network's sum while values are still owed, so DSGD keeps its average
and the trackers of DETSGRAD-GT and BEER keep summing to the gradients' sum.

Every message is counted as sent, lost or not (its bytes were spent);
``dropped_per_agent`` counts each sender's lost ones. With p = 0 the results
equal :class:`~murmur.sim.transport.InMemoryTransport`'s bit for bit (the
receivers' rows are summed in the same order), only slower; the simulator uses
this transport only when some fault is injected or the graph varies.

The simulator's faults and time-varying graphs (:mod:`murmur.sim.faults`) set,
before each iteration, through :meth:`LossyTransport.enter`, the graph the agents
talk over (``graph``, from which the algorithms derive their weights), which
agents are alive and which directed edges are active: in that graph, their
link up and both ends alive. Then:

- a crashed agent sends nothing (``broadcast`` and ``publish`` skip its row, so
  its own last broadcast stays what it was);
- a message goes only over an active edge and is counted only there: an event
  costs as many messages as the sender has active edges, and nothing travels
  over an inactive one (the receiver keeps what it last had);
- ``mix`` takes the inactive edges out of the operator: W_ij of an inactive edge
  (i, j) moves to the diagonal W_ii. Both ends know the link is out (nothing
  arrives over it in a synchronous round), so both leave it out, and a
  symmetric doubly stochastic W stays so, keeping the network average; a
  Laplacian L becomes the Laplacian of the active subgraph, so 1^T L = 0 still
  holds (DETSGRAD-GT keeps tracking). A lost message is the other fault: the
  receiver does not know what it missed and mixes its stale value with full
  weight.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from murmur.algorithms.estimates import EstimateUpdate
from murmur.metrics.counters import MessageCounters
from murmur.sim.transport import add_rows, copy_rows
from murmur.topology import Graph, as_sparse


class LossyTransport:
    """Delivery between agents held in one process, each message lost with
    probability ``drop``; see the module docstring."""

    def __init__(
        self,
        graph: Graph,
        initial: torch.Tensor,
        drop: float,
        stream: torch.Generator,
        resend: bool = False,
    ) -> None:
        """``initial`` (agents, P): the values every agent is known to start from;
        ``stream``: the generator the losses are drawn from; ``resend``: lost messages
        are sent again (see the module docstring)."""
        if initial.shape[0] != graph.agents:
            raise ValueError(
                f"initial values have {initial.shape[0]} rows for {graph.agents} agents"
            )
        agents = graph.agents
        edges = graph.edges
        self.senders = torch.cat([edges[:, 0], edges[:, 1]])
        """Sender of each directed edge, (2E,)."""
        self.receivers = torch.cat([edges[:, 1], edges[:, 0]])
        """Receiver of each directed edge, (2E,)."""
        everyone = torch.arange(agents)
        # One slot per (receiver, sender) pair, the agents themselves included, ordered
        # by receiver, then sender: mix sums a receiver's slots in the order W's row is.
        keys = torch.cat([self.receivers, everyone]) * agents + torch.cat([self.senders, everyone])
        slot = torch.empty_like(keys)
        slot[keys.argsort()] = torch.arange(keys.numel())
        self._edge_slots, self._own_slots = slot[: self.senders.numel()], slot[-agents:]
        self._slot_receivers = torch.cat([self.receivers, everyone])[keys.argsort()]
        self._slot_senders = torch.cat([self.senders, everyone])[keys.argsort()]
        self.graph = graph
        """The graph the agents talk over in this iteration (see :meth:`enter`)."""
        self.active = torch.ones(self.senders.numel(), dtype=torch.bool)
        """Which directed edges carry messages in this iteration."""
        self.alive = torch.ones(agents, dtype=torch.bool)
        """Which agents send in this iteration."""
        self.own = initial.clone()
        """Each agent's own last broadcast (``last_sent``)."""
        self.held = initial[self._slot_senders].clone()
        """What each receiver holds of each sender, one row per slot."""
        self.drop = drop
        self.stream = stream
        self.counters = MessageCounters(agents)
        self.dropped_per_agent = torch.zeros(agents, dtype=torch.int64)
        """Messages each agent sent that were lost."""
        self._degrees = graph.degrees()
        self._message_bytes = initial.shape[1] * initial.element_size()
        self._spread: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._acknowledged: dict[int, tuple[torch.Tensor, torch.Tensor | None]] = {}
        """Resend: each operator's weights of the edges' acknowledged gaps."""
        self.agents = list(range(agents))
        """The agents this transport sends for: all of them."""
        self.resend = resend
        edges_out = self.senders.numel()
        self.stale = torch.zeros(edges_out, dtype=torch.bool)
        """Resend: the directed edges whose last value was lost."""
        self.owed = torch.zeros(edges_out if resend else 0, initial.shape[1], dtype=initial.dtype)
        """Resend: the sum of each directed edge's lost differences."""
        self.owed_bytes = torch.zeros(edges_out, dtype=torch.int64)
        """Resend: the bytes of the codes each directed edge is owed."""

    def enter(self, graph: Graph, active: torch.Tensor, alive: torch.Tensor) -> None:
        """The next iteration: the agents talk over ``graph``, along the directed edges
        ``active`` flags (bool, one per directed edge of the graph this transport was
        built on: its edges (i, j) first, then (j, i)); ``alive`` (bool, (agents,)) flags
        the agents that are not crashed."""
        self.graph = graph
        self.active = active
        self.alive = alive
        self._degrees = torch.bincount(self.senders[active], minlength=len(self.agents))

    @property
    def dropped(self) -> int:
        """Messages lost so far, all senders together."""
        return int(self.dropped_per_agent.sum())

    def view(self, receiver: int, sender: int) -> torch.Tensor:
        """What ``receiver`` holds of ``sender`` (itself or a neighbour): a read-only copy."""
        keys = self._slot_receivers * len(self.agents) + self._slot_senders
        slot = (keys == receiver * len(self.agents) + sender).nonzero()
        if slot.numel() == 0:
            raise ValueError(f"agent {receiver} is not a neighbour of agent {sender}")
        return self.own[sender].clone() if receiver == sender else self.held[int(slot)].clone()

    def _survivors(self, *shape: int) -> torch.Tensor:
        """Which messages arrive: bool of ``(2E, *shape)``, True with probability 1 - drop."""
        draws = torch.rand(self.senders.numel(), *shape, generator=self.stream)
        return draws >= self.drop

    def broadcast(self, senders: torch.Tensor, values: torch.Tensor) -> None:
        """Agents flagged in ``senders`` (bool, (agents,)) send their row of ``values``;
        each edge's message arrives unless it is lost. With resend, the edges whose last
        value was lost get the sender's last broadcast too."""
        senders = senders & self.alive
        copy_rows(self.own, values, senders)
        sent = senders[self.senders] & self.active
        again = self.stale & ~sent & self.active & self.alive[self.senders]
        tried = sent | again
        arrived = tried & self._survivors()
        for slot, sender in _pairs(self._edge_slots, self.senders, arrived):
            self.held[slot].copy_(self.own[sender])
        self._count_lost(tried & ~arrived)
        self.counters.record_events(senders.to(torch.int64), self._message_bytes, self._degrees)
        if self.resend:  # lost, or meant for a link that is down: owed until it arrives
            self.stale = (self.stale | senders[self.senders]) & ~arrived
            again_per_agent = self._per_sender(again.to(torch.int64))
            self.counters.record_messages(again_per_agent, again_per_agent * self._message_bytes)

    def publish(self, update: EstimateUpdate) -> None:
        """Each agent sends its sent segments of ``update``, one message per segment and
        neighbour: it adds its row of ``update.delta`` to its own estimate, and every
        neighbour whose message of a segment arrived adds that segment. With resend,
        what an edge is owed goes with its first segment's message (or alone)."""
        sending = update.sent & self.alive.unsqueeze(1)
        add_rows(self.own, update.delta, sending.any(1))
        sent = sending[self.senders] & self.active.unsqueeze(1)
        arrived = sent & self._survivors(len(update.segments))
        if self.resend:
            self._pay_owed(sent, arrived)
        for index, part in enumerate(update.segments.slices):
            for slot, sender in _pairs(self._edge_slots, self.senders, arrived[:, index]):
                self.held[slot, part].add_(update.delta[sender, part])
        self._count_lost((sent & ~arrived).sum(1))
        segments = sending.to(torch.int64).sum(1)
        payload = (sending.to(torch.int64) * update.segment_bytes()).sum(1)
        self.counters.record_events(segments, payload, self._degrees)
        if self.resend:  # lost, or meant for a link that is down: owed until it arrives
            self._owe(update, sending[self.senders] & ~arrived)

    def _pay_owed(self, sent: torch.Tensor, arrived: torch.Tensor) -> None:
        """Resend: each edge owed something sends it with its first segment's message
        this round, or alone where it sends none; what arrives is added to the
        receiver's estimate, and its bytes are counted either way."""
        owing = (self.owed_bytes > 0) & self.active & self.alive[self.senders]
        carried = sent.any(1)
        alone = owing & ~carried
        first = sent.to(torch.int64).argmax(1, keepdim=True)
        delivered = owing & torch.where(carried, arrived.gather(1, first).squeeze(1), False)
        delivered |= alone & self._survivors()
        for slot, edge in zip(
            self._edge_slots[delivered].tolist(),
            delivered.nonzero().squeeze(1).tolist(),
            strict=True,
        ):
            self.held[slot].add_(self.owed[edge])
        self._count_lost(alone & ~delivered)
        spent = torch.where(owing, self.owed_bytes, 0)
        self.counters.record_messages(
            self._per_sender(alone.to(torch.int64)), self._per_sender(spent)
        )
        self.owed[delivered] = 0.0
        self.owed_bytes[delivered] = 0

    def _owe(self, update: EstimateUpdate, lost: torch.Tensor) -> None:
        """Resend: add each lost segment (2E, S) to what its edge is owed."""
        sizes = update.segment_bytes()
        for index, part in enumerate(update.segments.slices):
            edges = lost[:, index].nonzero().squeeze(1)
            if edges.numel():
                self.owed[edges, part] += update.delta[self.senders[edges], part]
                self.owed_bytes[edges] += int(sizes[index])

    def _per_sender(self, counts: torch.Tensor) -> torch.Tensor:
        """Per-edge counts (2E,) summed over each sender, (agents,) int64."""
        return torch.bincount(
            self.senders, weights=counts.to(torch.float64), minlength=len(self.agents)
        ).to(torch.int64)

    def _count_lost(self, lost: torch.Tensor) -> None:
        """Add the lost messages of each directed edge (2E,) to its sender's count."""
        self.dropped_per_agent += torch.bincount(
            self.senders, weights=lost.to(torch.float64), minlength=len(self.agents)
        ).to(torch.int64)

    def mix(self, operator: torch.Tensor, out: torch.Tensor, scale: float = 1.0) -> None:
        """``out_i += scale (W_ii x^_i + sum_j W_ij m_ji)`` for the sparse ``operator`` W:
        each agent's own last broadcast and what it received of its neighbours, the
        weight of each inactive edge moved to the diagonal."""
        for agent, slot in enumerate(self._own_slots.tolist()):
            self.held[slot].copy_(self.own[agent])
        if bool(self.active.all()):
            spread = self._spread_of(operator)
        else:
            spread = as_sparse(self._spread_dense(operator, self.active), operator.dtype)
        out.addmm_(spread, self.held, alpha=scale)
        if self.resend:
            self._mix_acknowledged(operator, out, scale)

    def _mix_acknowledged(self, operator: torch.Tensor, out: torch.Tensor, scale: float) -> None:
        """Resend, symmetric W: ``out_s += scale sum_r W_sr (x^_s - m_rs)``, m_rs what
        neighbour r holds of s, over the active edges. Each edge is then mixed as the
        difference of what its two ends hold of each other, so sum_i of the mix is
        (row sum) x sum_i x^_i exactly however many messages are still owed: DSGD keeps
        the network average and the trackers of DETSGRAD-GT and BEER keep summing to the
        gradients' sum. Every sender knows m_rs from the acknowledgments. Without a loss
        m_rs = x^_s bit for bit and this adds exact zeros."""
        weights = self._acknowledged_of(operator)
        if weights is None:
            return
        gaps = self.own[self.senders] - self.held[self._edge_slots]
        gaps[~self.active] = 0.0  # an edge that is down is not mixed at either end
        out.addmm_(weights, gaps, alpha=scale)

    def _acknowledged_of(self, operator: torch.Tensor) -> torch.Tensor | None:
        """(agents, 2E): entry (s, e) = W_sr for the directed edge e from s to r;
        None where W is not symmetric (the edge's two ends would weigh it differently)."""
        known = self._acknowledged.get(id(operator))
        if known is None or known[0] is not operator:
            if len(self._acknowledged) >= _SPREADS_KEPT:
                self._acknowledged.clear()
            dense = operator.to_dense()
            weights = torch.zeros(dense.shape[0], self.senders.numel(), dtype=dense.dtype)
            if torch.equal(dense, dense.T):
                edges = torch.arange(self.senders.numel())
                weights[self.senders, edges] = dense[self.senders, self.receivers]
            # dense: a sparse product rounds differently, and docs/results come from this one
            known = (operator, weights if bool(weights.any()) else None)
            self._acknowledged[id(operator)] = known
        return known[1]

    def _spread_of(self, operator: torch.Tensor) -> torch.Tensor:
        """W spread over the slots, sparse, for an operator used with every edge active."""
        known = self._spread.get(id(operator))
        if known is None or known[0] is not operator:
            if len(self._spread) >= _SPREADS_KEPT:  # one operator per graph that varies
                self._spread.clear()
            known = (operator, as_sparse(self._spread_dense(operator, None), operator.dtype))
            self._spread[id(operator)] = known
        return known[1]

    def _spread_dense(self, operator: torch.Tensor, active: torch.Tensor | None) -> torch.Tensor:
        """W spread over the slots: (agents, slots), entry (i, slot of (i, j)) = W_ij,
        with the weight of each edge that ``active`` (None: all) leaves out on W_ii."""
        dense = operator.to_dense()
        spread = torch.zeros(dense.shape[0], self.held.shape[0], dtype=dense.dtype)
        slots = torch.arange(self.held.shape[0])
        spread[self._slot_receivers, slots] = dense[self._slot_receivers, self._slot_senders]
        if active is not None:
            inactive = self._edge_slots[~active]
            receivers = self._slot_receivers[inactive]
            moved = torch.zeros(dense.shape[0], dtype=dense.dtype)
            moved.index_add_(0, receivers, spread[receivers, inactive])
            spread[receivers, inactive] = 0.0
            spread[torch.arange(dense.shape[0]), self._own_slots] += moved
        return spread

    @property
    def last_sent(self) -> torch.Tensor:
        """Every agent's own last broadcast, or its own public estimate."""
        return self.own

    def state_dict(self) -> dict[str, Any]:
        """Every mailbox, the counts and the loss stream, for a checkpoint."""
        return {
            "own": self.own,
            "held": self.held,
            "dropped": self.dropped_per_agent,
            "stream": self.stream.get_state(),
            "counters": self.counters.state_dict(),
            "stale": self.stale,
            "owed": self.owed,
            "owed_bytes": self.owed_bytes,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Take the mailboxes, counts and stream of :meth:`state_dict`, in place."""
        self.own.copy_(state["own"])
        self.held.copy_(state["held"])
        self.dropped_per_agent.copy_(state["dropped"])
        self.stream.set_state(state["stream"])
        self.counters.load_state_dict(state["counters"])
        if "stale" in state:  # checkpoints from before resend have none: nothing owed
            self.stale.copy_(state["stale"])
            self.owed.copy_(state["owed"])
            self.owed_bytes.copy_(state["owed_bytes"])


_SPREADS_KEPT = 64
"""Operators whose spread over the slots is kept (the graphs of a varying topology
bring a new operator every few iterations)."""


def _pairs(
    slots: torch.Tensor, senders: torch.Tensor, arrived: torch.Tensor
) -> list[tuple[int, int]]:
    """(mailbox slot, sender) of the directed edges whose message arrived. The caller
    copies row by row: gathering the rows first (index_copy_) is several times slower."""
    return list(zip(slots[arrived].tolist(), senders[arrived].tolist(), strict=True))
