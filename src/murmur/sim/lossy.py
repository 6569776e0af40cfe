"""The simulator's transport when messages get lost: one mailbox per directed edge.

With ``faults.drop`` = p each point-to-point message is lost with probability
p, independently, drawn from the run's ``"faults"`` stream; a receiver that
loses a message keeps the last value it had of the sender. Neighbours of one
agent then hold different values of it, so this transport keeps what every
receiver holds of every sender, one mailbox per directed edge, next to each
agent's own last broadcast (``last_sent``). A mailbox is a row of memory only
while it differs from the sender's own row: ``synced`` flags the edges whose
receiver holds the sender's own row exactly, and those read that row. All rows
live in one ``store``, a block per agent (its own row, then a mailbox per edge it
sends over), so that one sparse CSR product over the store, its columns sorted as
CSR needs, reads every receiver's slots in the order of W's row:

- ``broadcast`` makes the edges whose message survived synced again, after copying
  the sender's old row into the mailbox of each synced edge whose message was lost;
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
receivers' rows are summed in the same order), a little slower; the simulator uses
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

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from murmur.algorithms.estimates import EstimateUpdate
from murmur.metrics.counters import MessageCounters
from murmur.sim.transport import add_rows, copy_rows, indexed
from murmur.topology import Graph


class LossyTransport:
    """Delivery between agents held in one process, each message lost with
    probability ``drop``; see the module docstring."""

    fused_mix: None = None
    """No one-pass mixing step: the mailboxes mix through :meth:`mix`."""
    compile_fallback: None = None
    """Nothing to fall back from: a run that loses messages, or whose links go down or
    graph varies, is never compiled."""

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
        self.device = device = initial.device
        """Where the mailboxes, masks and counters live (a GPU's memory on
        ``run.device = "cuda"``); the structure of the slots is worked out on the CPU."""
        senders = torch.cat([edges[:, 0], edges[:, 1]])
        self._slots = _Slots(senders, torch.cat([edges[:, 1], edges[:, 0]]), agents)
        self._cpu_senders = senders
        self.senders = senders.to(device)
        """Sender of each directed edge, (2E,)."""
        self.receivers = self._slots.edge_receivers.to(device)
        """Receiver of each directed edge, (2E,)."""
        self.graph = graph
        """The graph the agents talk over in this iteration (see :meth:`enter`)."""
        self.active = torch.ones(self.senders.numel(), dtype=torch.bool, device=device)
        """Which directed edges carry messages in this iteration."""
        self.alive = torch.ones(agents, dtype=torch.bool, device=device)
        """Which agents send in this iteration."""
        self._active_here = torch.ones(self.senders.numel(), dtype=torch.bool)
        """``active`` as the schedule drew it, on the CPU."""
        self._stores(initial)
        self.synced = torch.ones(self.senders.numel(), dtype=torch.bool, device=device)
        """Which directed edges' receivers hold exactly their sender's own row (their
        mailbox row is not read)."""
        self.drop = drop
        self.stream = stream
        self.counters = MessageCounters(agents, device=device)
        self.dropped_per_agent = torch.zeros(agents, dtype=torch.int64, device=device)
        """Messages each agent sent that were lost."""
        self._degrees = graph.degrees().to(device)
        self._message_bytes = initial.shape[1] * initial.element_size()
        self._spreads: dict[int, tuple[torch.Tensor, torch.Tensor | None, _Spread]] = {}
        self._everything_up = True
        """Every directed edge active and every agent alive in this iteration."""
        self._acknowledged: dict[int, tuple[torch.Tensor, torch.Tensor | None]] = {}
        """Resend: each operator's weights of the edges' acknowledged gaps."""
        self.agents = list(range(agents))
        """The agents this transport sends for: all of them."""
        self.resend = resend
        self._owing(initial)

    def _stores(self, initial: torch.Tensor) -> None:
        """The store of every agent's own row and mailboxes, and its row indices."""
        agents, block, device = initial.shape[0], self._slots.block, self.device
        self.store = torch.empty(
            agents * block, initial.shape[1], dtype=initial.dtype, device=device
        )
        """One block of rows per agent: its own row, then one mailbox per directed
        edge it sends over (``_Slots.box_rows``), what that edge's receiver holds of
        it where ``synced`` is False. ``mix`` reads it through one sparse product."""
        self.own = self.store.view(agents, block, -1)[:, 0]
        """Each agent's own last broadcast (``last_sent``), a view of ``store``."""
        self.own.copy_(initial)
        self._boxes = self._slots.box_rows.to(device)
        self._of_edges = self._slots.of_edges.to(device)
        self._every_slot = self._slots.every_slot.to(device)
        self._own_rows = self.senders * block
        self._indexed = indexed(device)

    def _owing(self, initial: torch.Tensor) -> None:
        """Resend's records of what each directed edge is owed, empty to start."""
        edges_out, device = self.senders.numel(), self.device
        self.stale = torch.zeros(edges_out, dtype=torch.bool, device=device)
        """Resend: the directed edges whose last value was lost."""
        rows = edges_out if self.resend else 0
        self.owed = torch.zeros(rows, initial.shape[1], dtype=initial.dtype, device=device)
        """Resend: the sum of each directed edge's lost differences."""
        self.owed_bytes = torch.zeros(edges_out, dtype=torch.int64, device=device)
        """Resend: the bytes of the codes each directed edge is owed."""

    def enter(self, graph: Graph, active: torch.Tensor, alive: torch.Tensor) -> None:
        """The next iteration: the agents talk over ``graph``, along the directed edges
        ``active`` flags (bool, one per directed edge of the graph this transport was
        built on: its edges (i, j) first, then (j, i)); ``alive`` (bool, (agents,)) flags
        the agents that are not crashed."""
        self.graph = graph
        self._active_here = active.cpu()  # drawn on the CPU: reading it waits for nothing
        self._everything_up = bool(self._active_here.all()) and bool(alive.cpu().all())
        degrees = torch.bincount(self._cpu_senders[self._active_here], minlength=len(self.agents))
        self.active = active.to(self.device, non_blocking=True)
        self.alive = alive.to(self.device, non_blocking=True)
        self._degrees = degrees.to(self.device, non_blocking=True)

    @property
    def dropped(self) -> int:
        """Messages lost so far, all senders together."""
        return int(self.dropped_per_agent.sum())

    def view(self, receiver: int, sender: int) -> torch.Tensor:
        """What ``receiver`` holds of ``sender`` (itself or a neighbour): a read-only copy."""
        edge = self._slots.edge_of(receiver, sender)
        if edge is None:
            raise ValueError(f"agent {receiver} is not a neighbour of agent {sender}")
        if edge < 0 or bool(self.synced[edge]):
            return self.own[sender].clone()
        return self.store[int(self._boxes[edge])].clone()

    def _survivors(self, *shape: int) -> torch.Tensor:
        """Which messages arrive: bool of ``(2E, *shape)``, True with probability 1 - drop."""
        draws = torch.rand(self.senders.numel(), *shape, generator=self.stream)
        return (draws >= self.drop).to(self.device, non_blocking=True)  # drawn on the CPU

    def _keep_apart(self, edges: torch.Tensor) -> None:
        """The receivers of the synced directed edges flagged in ``edges`` (bool, (2E,))
        keep what they hold of the sender now, in their mailboxes, before its own row
        moves on without them."""
        parting = edges & self.synced
        if not self._indexed:  # every mailbox written through the mask, nothing read
            own = self.store.index_select(0, self._own_rows)
            held = self.store.index_select(0, self._boxes)
            self.store.index_copy_(0, self._boxes, torch.where(parting[:, None], own, held))
            self.synced &= ~parting
            return
        if bool(parting.any()):
            rows = parting.nonzero().squeeze(1)
            own = self.store.index_select(0, self._own_rows[rows])
            self.store.index_copy_(0, self._boxes[rows], own)
            self.synced &= ~parting

    def broadcast(self, senders: torch.Tensor, values: torch.Tensor) -> None:
        """Agents flagged in ``senders`` (bool, (agents,)) send their row of ``values``;
        each edge's message arrives unless it is lost. With resend, the edges whose last
        value was lost get the sender's last broadcast too."""
        senders = senders if self._everything_up else senders & self.alive
        sending = senders[self.senders]
        tried = sent = sending if self._everything_up else sending & self.active
        if self.resend:  # only resend leaves edges stale
            again = self.stale & ~sent & self.active & self.alive[self.senders]
            tried = sent | again
        arrived = tried & self._survivors()
        self._keep_apart(sending & ~arrived)
        copy_rows(self.own, values, senders)
        self.synced |= arrived
        self._count_lost(tried & ~arrived)
        self.counters.record_events(senders.to(torch.int64), self._message_bytes, self._degrees)
        if self.resend:  # lost, or meant for a link that is down: owed until it arrives
            self.stale = (self.stale | sending) & ~arrived
            again_per_agent = self._per_sender(again.to(torch.int64))
            self.counters.record_messages(again_per_agent, again_per_agent * self._message_bytes)

    def broadcast_all_overwriting(self, values: torch.Tensor) -> None:
        """Every agent sends its row of ``values`` (copied: the store keeps its own
        memory, so ``values`` keeps its numbers)."""
        self.broadcast(torch.ones(values.shape[0], dtype=torch.bool, device=values.device), values)

    def publish(self, update: EstimateUpdate) -> None:
        """Each agent sends its sent segments of ``update``, one message per segment and
        neighbour: it adds its row of ``update.delta`` to its own estimate, and every
        neighbour whose message of a segment arrived adds that segment. With resend,
        what an edge is owed goes with its first segment's message (or alone)."""
        sending = update.sent & self.alive.unsqueeze(1)
        sent = sending[self.senders] & self.active.unsqueeze(1)
        arrived = sent & self._survivors(len(update.segments))
        missed = (sending[self.senders] & ~arrived).any(1)
        delivered = self._owed_delivered(sent, arrived) if self.resend else None
        self._keep_apart(missed if delivered is None else missed | delivered)
        add_rows(self.own, update.delta, sending.any(1))
        if delivered is not None:
            self._pay_owed(delivered)
        for index, part in enumerate(update.segments.slices):
            self._add_to_boxes(arrived[:, index] & ~self.synced, update.delta, part)
        self._count_lost((sent & ~arrived).sum(1))
        segments = sending.to(torch.int64).sum(1)
        payload = (sending.to(torch.int64) * update.segment_bytes()).sum(1)
        self.counters.record_events(segments, payload, self._degrees)
        if self.resend:  # lost, or meant for a link that is down: owed until it arrives
            self._owe(update, sending[self.senders] & ~arrived)

    def _add_to_boxes(self, edges: torch.Tensor, delta: torch.Tensor, part: slice) -> None:
        """The mailboxes of the directed edges ``edges`` flags (bool, (2E,)) add their
        sender's ``part`` of ``delta``."""
        boxes = self.store.narrow(1, part.start, part.stop - part.start)
        if not self._indexed:  # every mailbox written through the mask, nothing read
            held = boxes.index_select(0, self._boxes)
            source = delta[:, part].index_select(0, self.senders)
            boxes.index_copy_(0, self._boxes, torch.where(edges[:, None], held + source, held))
            return
        rows = edges.nonzero().squeeze(1)
        if rows.numel():
            boxes.index_add_(0, self._boxes[rows], delta[self.senders[rows], part])

    def _owed_delivered(self, sent: torch.Tensor, arrived: torch.Tensor) -> torch.Tensor:
        """Resend: each edge owed something sends it with its first segment's message
        this round, or alone where it sends none; the edges whose owed sum arrives
        (bool, (2E,)). Its bytes are counted either way."""
        owing = (self.owed_bytes > 0) & self.active & self.alive[self.senders]
        carried = sent.any(1)
        alone = owing & ~carried
        first = sent.to(torch.int64).argmax(1, keepdim=True)
        delivered = owing & torch.where(carried, arrived.gather(1, first).squeeze(1), False)
        delivered |= alone & self._survivors()
        self._count_lost(alone & ~delivered)
        spent = torch.where(owing, self.owed_bytes, 0)
        self.counters.record_messages(
            self._per_sender(alone.to(torch.int64)), self._per_sender(spent)
        )
        return delivered

    def _pay_owed(self, delivered: torch.Tensor) -> None:
        """Resend: the receivers of the ``delivered`` edges (kept apart already) add what
        they were owed, and the edges owe nothing more."""
        if self._indexed:
            edges = delivered.nonzero().squeeze(1)
            if edges.numel():
                self.store.index_add_(0, self._boxes[edges], self.owed.index_select(0, edges))
        else:  # every mailbox written through the mask, nothing read
            held = self.store.index_select(0, self._boxes)
            paid = torch.where(delivered[:, None], held + self.owed, held)
            self.store.index_copy_(0, self._boxes, paid)
        self.owed.masked_fill_(delivered[:, None], 0.0)
        self.owed_bytes.masked_fill_(delivered, 0)

    def _owe(self, update: EstimateUpdate, lost: torch.Tensor) -> None:
        """Resend: add each lost segment (2E, S) to what its edge is owed."""
        sizes = update.segment_bytes()
        for index, part in enumerate(update.segments.slices):
            if not self._indexed:  # every row written through the mask, nothing read
                owed = self.owed[:, part]
                source = update.delta[:, part].index_select(0, self.senders)
                owed.copy_(torch.where(lost[:, index : index + 1], owed + source, owed))
                self.owed_bytes += torch.where(lost[:, index], sizes[index], 0)
                continue
            edges = lost[:, index].nonzero().squeeze(1)
            if edges.numel():
                self.owed[edges, part] += update.delta[self.senders[edges], part]
                self.owed_bytes[edges] += int(sizes[index])

    def _per_sender(self, counts: torch.Tensor) -> torch.Tensor:
        """Per-edge counts (2E,) summed over each sender, (agents,) int64."""
        totals = torch.zeros(len(self.agents), dtype=torch.int64, device=self.device)
        return totals.index_add_(0, self.senders, counts.to(torch.int64))

    def _count_lost(self, lost: torch.Tensor) -> None:
        """Add the lost messages of each directed edge (2E,) to its sender's count."""
        self.dropped_per_agent.index_add_(0, self.senders, lost.to(torch.int64))

    def mix(self, operator: torch.Tensor, out: torch.Tensor, scale: float = 1.0) -> None:
        """``out_i += scale (W_ii x^_i + sum_j W_ij m_ji)`` for the sparse ``operator`` W:
        each agent's own last broadcast and what it received of its neighbours, the
        weight of each inactive edge moved to the diagonal. One sparse product over
        ``store``: a slot reads its sender's own row while its edge is synced, its
        mailbox otherwise, in the same order either way."""
        spread = self._spread_of(operator, None if self._everything_up else self._active_here)
        matrix = torch.sparse_csr_tensor(
            spread.crow,
            spread.columns(self.synced),
            spread.weights,
            size=(len(self.agents), self.store.shape[0]),
            check_invariants=False,  # sorted and distinct by construction (_Slots)
        )
        if self.device.type == "meta":  # shapes only, and no sparse kernels: the tests'
            matrix = matrix.to_dense()
        out.addmm_(matrix, self.store, alpha=scale)
        if self.resend:
            self._mix_acknowledged(operator, out, scale)

    def _mix_acknowledged(self, operator: torch.Tensor, out: torch.Tensor, scale: float) -> None:
        """Resend, symmetric W: ``out_s += scale sum_r W_sr (x^_s - m_rs)``, m_rs what
        neighbour r holds of s, over the active edges. Each edge is then mixed as the
        difference of what its two ends hold of each other, so sum_i of the mix is
        (row sum) x sum_i x^_i exactly however many messages are still owed: DSGD keeps
        the network average and the trackers of DETSGRAD-GT and BEER keep summing to the
        gradients' sum. Every sender knows m_rs from the acknowledgments. A synced edge's
        gap is exactly zero and is left out of the product."""
        weights = self._acknowledged_of(operator)
        if weights is None:
            return
        apart = (~self.synced & self.active).nonzero().squeeze(1)
        if apart.numel() == 0:
            return
        held = self.store.index_select(0, self._boxes[apart])
        gaps = self.own.index_select(0, self.senders[apart]) - held
        out.addmm_(weights[:, apart], gaps, alpha=scale)

    def _acknowledged_of(self, operator: torch.Tensor) -> torch.Tensor | None:
        """(agents, 2E): entry (s, e) = W_sr for the directed edge e from s to r;
        None where W is not symmetric (the edge's two ends would weigh it differently)."""
        known = self._acknowledged.get(id(operator))
        if known is None or known[0] is not operator:
            if len(self._acknowledged) >= _SPREADS_KEPT:
                self._acknowledged.clear()
            dense = operator.cpu().to_dense()
            weights = torch.zeros(dense.shape[0], self.senders.numel(), dtype=dense.dtype)
            if torch.equal(dense, dense.T):
                edges = torch.arange(self.senders.numel())
                senders, receivers = self._cpu_senders, self._slots.edge_receivers
                weights[senders, edges] = dense[senders, receivers]
            # dense: a sparse product rounds differently, and docs/results come from this one
            known = (operator, weights.to(self.device) if bool(weights.any()) else None)
            self._acknowledged[id(operator)] = known
        return known[1]

    def _spread_of(self, operator: torch.Tensor, active: torch.Tensor | None) -> _Spread:
        """W over the slots with the directed edges ``active`` flags (None: all), kept
        per operator with the last edges it was used with."""
        known = self._spreads.get(id(operator))
        if known is None or known[0] is not operator or not _same(known[1], active):
            if len(self._spreads) >= _SPREADS_KEPT:  # one operator per graph that varies
                self._spreads.clear()
            weights = self._slots.weights(operator.cpu(), active)
            spread = self._slots.spread(weights).to(self.device)
            known = (operator, None if active is None else active.clone(), spread)
            self._spreads[id(operator)] = known
        return known[2]

    @property
    def last_sent(self) -> torch.Tensor:
        """Every agent's own last broadcast, or its own public estimate."""
        return self.own

    def state_dict(self) -> dict[str, Any]:
        """Every mailbox, the counts and the loss stream, for a checkpoint. ``held`` has
        a row per slot (receiver, then sender, the agents themselves included), what
        each receiver holds of each sender."""
        return {
            "own": self.own,
            "held": self.store.index_select(0, self._every_slot.columns(self.synced)),
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
        held = state["held"]
        if held.shape[0] != self._slots.senders.numel():
            raise ValueError(f"{held.shape[0]} mailboxes for {self._slots.senders.numel()} slots")
        boxes = held.to(self.device).index_select(0, self._of_edges)
        self.store.index_copy_(0, self._boxes, boxes)
        # A receiver holding its sender's own row bit for bit reads that row again.
        own = self.own.index_select(0, self.senders)
        self.synced = (boxes.view(torch.uint8) == own.view(torch.uint8)).all(1)
        self.dropped_per_agent.copy_(state["dropped"])
        self.stream.set_state(state["stream"])
        self.counters.load_state_dict(state["counters"])
        if "stale" in state:  # checkpoints from before resend have none: nothing owed
            self.stale.copy_(state["stale"])
            self.owed.copy_(state["owed"])
            self.owed_bytes.copy_(state["owed_bytes"])


_SPREADS_KEPT = 64
"""Operators whose weights over the slots are kept (the graphs of a varying topology
bring a new operator every few iterations)."""


def _same(kept: torch.Tensor | None, active: torch.Tensor | None) -> bool:
    """Whether two sets of active edges (None: all) are the same."""
    if kept is None or active is None:
        return kept is None and active is None
    return torch.equal(kept, active)


class _Slots:
    """The (receiver, sender) pairs each receiver mixes, the agents themselves
    included, ordered by receiver, then sender: ``mix`` sums a receiver's slots in the
    order W's row is, so without losses it equals the lossless product bit for bit."""

    def __init__(self, senders: torch.Tensor, receivers: torch.Tensor, agents: int) -> None:
        """``senders``, ``receivers``: of each directed edge, (2E,)."""
        self.edge_receivers = receivers
        """The receiver of each directed edge, (2E,)."""
        everyone = torch.arange(agents)
        keys = torch.cat([receivers, everyone]) * agents + torch.cat([senders, everyone])
        order = keys.argsort()
        self.agents = agents
        self.keys = keys[order]
        self.receivers = torch.cat([receivers, everyone])[order]
        """Each slot's receiver."""
        self.senders = torch.cat([senders, everyone])[order]
        """Each slot's sender."""
        self.edges = torch.cat([torch.arange(senders.numel()), torch.full((agents,), -1)])[order]
        """Each slot's directed edge, -1 for an agent's own slot."""
        slot = torch.empty_like(keys)
        slot[order] = torch.arange(keys.numel())
        self.of_edges, self.of_own = slot[: senders.numel()], slot[senders.numel() :]
        """The slot of each directed edge, and of each agent's own value."""
        out_degrees = torch.bincount(senders, minlength=agents)
        self.block = 1 + int(out_degrees.max()) if senders.numel() else 1
        """Rows per agent in the transport's store: its own, then a mailbox per
        directed edge it sends over, as many as the largest out-degree."""
        by_sender = senders.argsort(stable=True)
        starts = torch.cumsum(out_degrees, 0) - out_degrees
        rank = torch.empty_like(senders)
        rank[by_sender] = torch.arange(senders.numel()) - starts[senders[by_sender]]
        self.box_rows = senders * self.block + 1 + rank
        """Each directed edge's mailbox row: in its sender's block, so that every
        receiver's slots read rows in increasing order (sender by sender), as a
        sparse CSR operator needs."""
        self.every_slot = self.spread(torch.ones(keys.numel()))
        """Every slot, weighing 1: the store row each reads (``columns``)."""

    def edge_of(self, receiver: int, sender: int) -> int | None:
        """The directed edge from ``sender`` to ``receiver``: -1 when they are the same
        agent, None when they are not neighbours."""
        found = (self.keys == receiver * self.agents + sender).nonzero()
        return int(self.edges[int(found)]) if found.numel() else None

    def weights(self, operator: torch.Tensor, active: torch.Tensor | None) -> torch.Tensor:
        """W over the slots, (slots,): slot (i, j) weighs W_ij, with the weight of each
        directed edge that ``active`` (None: all) leaves out moved to W_ii."""
        values = self._entries(operator)
        if active is not None:
            inactive = self.of_edges[~active]
            receivers = self.receivers[inactive]
            moved = torch.zeros(self.agents, dtype=values.dtype)
            moved.index_add_(0, receivers, values[inactive])
            values[inactive] = 0.0
            values[self.of_own] += moved
        return values

    def _entries(self, operator: torch.Tensor) -> torch.Tensor:
        """W_ij of every slot (i, j), (slots,): read from a CSR operator's entries (a
        W entry off the slots, which no graph of the transport's has, is not read)."""
        if operator.layout != torch.sparse_csr:
            return operator.to_dense()[self.receivers, self.senders]
        crow, columns = operator.crow_indices(), operator.col_indices()
        rows = torch.repeat_interleave(torch.arange(self.agents), crow.diff())
        keys = rows * self.agents + columns
        at = torch.searchsorted(self.keys, keys).clamp(max=self.keys.numel() - 1)
        found = self.keys[at] == keys
        values = torch.zeros(self.keys.numel(), dtype=operator.dtype)
        values[at[found]] = operator.values()[found]
        return values

    def spread(self, values: torch.Tensor) -> _Spread:
        """The slots of nonzero weight in ``values`` (slots,), as the rows of a sparse
        CSR operator over the transport's store."""
        slots = (values != 0).nonzero().squeeze(1)
        rows = torch.bincount(self.receivers[slots], minlength=self.agents)
        edges = self.edges[slots]
        own = self.senders[slots] * self.block
        mailboxes = torch.cat([self.box_rows, self.box_rows.new_zeros(1)])  # [-1]: an own slot
        return _Spread(
            crow=torch.cat([rows.new_zeros(1), rows.cumsum(0)]),
            weights=values[slots],
            edges=edges,
            own_columns=own,
            box_columns=torch.where(edges < 0, own, mailboxes[edges]),
        )


@dataclass(frozen=True)
class _Spread:
    """W over the slots it weighs, in order: a sparse CSR operator's rows and values,
    and for each entry the store row it reads, its sender's own or its edge's mailbox."""

    crow: torch.Tensor
    weights: torch.Tensor
    edges: torch.Tensor
    """Each entry's directed edge, -1 for an agent's own slot."""
    own_columns: torch.Tensor
    box_columns: torch.Tensor
    """The mailbox row of each entry's edge (its own row for an own slot)."""

    def to(self, device: torch.device) -> _Spread:
        """The same entries on ``device``."""
        if self.crow.device == device:
            return self
        return _Spread(*(getattr(self, f.name).to(device) for f in dataclasses.fields(self)))

    def columns(self, synced: torch.Tensor) -> torch.Tensor:
        """The store row of each entry: its sender's own row for an own slot or a
        ``synced`` edge, the edge's mailbox otherwise."""
        reads_own = torch.cat([synced, synced.new_ones(1)])[self.edges]  # [-1]: own slots
        return torch.where(reads_own, self.own_columns, self.box_columns)
