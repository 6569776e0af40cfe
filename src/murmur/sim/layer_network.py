"""The simulated network of layer-wise training: every node in this process, and
the work the solvers report turned into virtual time.

A synchronous solver's rounds last as long as the slowest node (and, when it
gossips, one message time per round); a centralized solver's work is its own;
asynchronous nodes (ARock) run on a discrete-event loop, each at its own pace,
their pushes arriving one message time after their update ends.

With ``faults.drop`` = p each asynchronous push is lost with probability p,
drawn from the run's ``"faults"`` stream; it still counts as sent, and as
dropped. A node that lost its news would wait forever, as a real one would
without timeouts, so two rules stand in for retransmission:

- a waiting node that hears nothing for ``RETRY`` times its expected update
  and message time updates anyway, which pushes its blocks again (an update
  with no news still moves them, as ARock allows);
- a node that is done with the layer answers a push (not an answer) with its
  last block for that neighbour, whose stamp says it is settled, so that a
  neighbour that lost the news can finish too.

Without drops neither rule is armed and runs are exactly as before.

Nodes may crash (``faults.crashes``, asynchronous dSSFN): at the start of layer
``faults.crash_at`` they stop for good, and their neighbours drop their edges
from that layer's problem on (as the distributed runtime drops a failed
neighbour), so the others reach consensus on the data they still hold. A
crashed node keeps the network it had; it cannot rejoin, since it would lack
the features of the layers it missed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar, cast

import torch

from murmur.algorithms.protocols import (
    AsyncNode,
    AsyncWork,
    BatchedAsyncNode,
    PendingUpdate,
    RoundsWork,
    Transport,
)
from murmur.metrics.counters import MessageCounters
from murmur.sim.events import ComputeTimes, EventLoop, LinkDelays
from murmur.sim.transport import InMemoryTransport
from murmur.topology import Graph


@dataclass
class SimulatedNetwork:
    """A :class:`~murmur.algorithms.protocols.LayerNetwork` of every node in one
    process, on a virtual clock."""

    graph: Graph
    counters: MessageCounters
    clock: EventLoop
    compute: ComputeTimes
    links: LinkDelays
    ready: list[float] = field(default_factory=list)
    """Per node: the virtual time it finished its previous layer."""
    drop: float = 0.0
    """Probability that an asynchronous push is lost."""
    faults: torch.Generator | None = None
    """The stream losses are drawn from (needed when ``drop`` > 0)."""
    dropped: int = 0
    """Pushes lost so far."""
    crashes: tuple[list[int], int] = ([], 0)
    """The nodes that crash and the layer at whose start they do."""
    down: set[int] = field(default_factory=set)
    """Nodes crashed so far."""
    batched: ClassVar[bool] = True
    """Make the numbers of asynchronous updates many at a time (:attr:`AsyncWork.relax`);
    False makes each as it begins. The events and numbers are the same either way."""

    def __post_init__(self) -> None:
        if not self.ready:
            self.ready = [0.0] * self.graph.agents
        if self.drop > 0 and self.faults is None:
            raise ValueError("losing messages needs the generator to draw them from")

    def lost(self) -> bool:
        """Whether the next message is lost (one draw, only when messages get lost)."""
        if self.drop == 0:
            return False
        assert self.faults is not None
        lost = float(torch.rand((), generator=self.faults, dtype=torch.float64)) < self.drop
        self.dropped += int(lost)
        return lost

    @property
    def local_nodes(self) -> list[int]:
        return list(range(self.graph.agents))

    def live_neighbours(self, node: int) -> list[int]:
        return [j for j in self.graph.neighbors(node) if j not in self.down]

    def begin_layer(self, layer: int) -> None:
        nodes, at = self.crashes
        if layer == at:
            self.down.update(nodes)

    @property
    def crashed(self) -> frozenset[int]:
        return frozenset(self.down)

    def transport_for(self, width: int, dtype: torch.dtype) -> Transport:
        return InMemoryTransport(
            self.graph, torch.zeros(self.graph.agents, width, dtype=dtype), counters=self.counters
        )

    def total(self, values: torch.Tensor) -> torch.Tensor:
        return values.sum(dim=0)

    def work_alone(self, node: int, flops: float) -> None:
        self.clock.advance(self.compute.seconds(node, flops))
        self.ready = [self.clock.now] * self.graph.agents

    def work_in_rounds(self, work: RoundsWork) -> None:
        compute = self.compute
        self.clock.advance(compute.round_seconds(list(work.setup_flops)))
        update_seconds = compute.round_seconds(work.update_flops)
        mix_seconds = compute.round_seconds(list(work.mix_flops))
        message_seconds = self.links.seconds(work.message_bytes)
        self.clock.advance(
            work.iterations * update_seconds + work.rounds * (message_seconds + mix_seconds)
        )
        self.ready = [self.clock.now] * self.graph.agents

    def run_async(self, nodes: list[AsyncNode], work: AsyncWork) -> None:
        _AsyncRun(self, nodes, work).run()

    @property
    def virtual_seconds(self) -> float:
        return max([self.clock.now, *self.ready])

    def state_dict(self) -> dict[str, Any]:
        """The network between two layers (no event pending): clock, counts, streams."""
        if self.clock.pending:
            raise RuntimeError("a layer network's state is saved between layers only")
        return {
            "now": self.clock.now,
            "ready": list(self.ready),
            "counters": self.counters.state_dict(),
            "compute": self.compute.state_dict(),
            "dropped": self.dropped,
            "faults": self.faults.get_state() if self.faults is not None else None,
            "down": sorted(self.down),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.clock.now = state["now"]
        self.ready = list(state["ready"])
        self.counters.load_state_dict(state["counters"])
        self.compute.load_state_dict(state["compute"])
        self.dropped = state["dropped"]
        self.down = set(state["down"])
        if self.faults is not None:
            self.faults.set_state(state["faults"])


@dataclass
class _Made:
    """A message whose numbers are already made: an eager node's update, or an answer."""

    neighbours: tuple[int, ...]
    done: bool
    stamp: int
    blocks: dict[int, torch.Tensor]


RETRY = 4.0
"""A waiting node that heard nothing for this many times its expected update plus
message time updates anyway (only when messages get lost)."""


class _AsyncRun:
    """Every asynchronous node of one layer on one event loop, on absolute times (the
    nodes start the layer at different times). A node updates, and its pushes arrive
    a message time after the update ends; then it acts on what its state says:
    update again, wait for news (woken by the next arrival, or by its retry timer
    when messages get lost), or finish."""

    def __init__(self, network: SimulatedNetwork, nodes: list[AsyncNode], work: AsyncWork) -> None:
        self.network = network
        self.nodes = nodes
        self.work = work
        live = [ready for node, ready in enumerate(network.ready) if node not in network.down]
        self.clock = EventLoop(start=min(live))
        self.message_seconds = network.links.seconds(work.message_bytes)
        self.idle = [False] * len(nodes)
        self.waits = [0] * len(nodes)
        """How many times each node began to wait: a retry timer set for an earlier
        wait does nothing."""
        self.local = {node.index: i for i, node in enumerate(nodes)}
        self.begun: list[PendingUpdate | None] = [None] * len(nodes)
        """Each node's latest update begun (batched nodes)."""
        self.pending: list[PendingUpdate] = []
        """Updates begun whose numbers are not made yet: made together, as late as can be."""

    def run(self) -> None:
        compute, ready = self.network.compute, self.network.ready
        for i, node in enumerate(self.nodes):
            if node.index in self.network.down:
                continue
            begin = ready[node.index] + compute.seconds(node.index, self.work.setup_flops[i])
            self.clock.at(begin, partial(self._update, i))
        self.clock.run()

    def _push(
        self,
        at: float,
        receivers: tuple[int, ...],
        sender: int,
        message: PendingUpdate,
        answer: bool = False,
    ) -> None:
        """``sender``'s blocks of ``message`` to ``receivers``, arriving at ``at``, but
        for those lost (one draw each, in order). They arrive in that order, as one
        event: nothing else can come between messages sent at once."""
        kept = [self.local[j] for j in receivers if not self.network.lost()]
        if kept:
            self.clock.at(at, lambda: self._deliver_all(kept, sender, message, answer))

    def _deliver_all(
        self, receivers: list[int], sender: int, message: PendingUpdate, answer: bool
    ) -> None:
        for receiver in receivers:
            self._deliver(receiver, sender, message, answer)

    def _deliver(self, receiver: int, sender: int, message: PendingUpdate, answer: bool) -> None:
        if not message.done:
            self._make_pending()
        node = self.nodes[receiver]
        if node.receive(sender, message.stamp, message.blocks[node.index]):
            if self.idle[receiver]:
                self.idle[receiver] = False
                self._update(receiver)
        elif self.network.drop > 0 and not answer and node.finished:
            self._answer(receiver, sender)

    def _answer(self, i: int, neighbour: int) -> None:
        """Node i, done with the layer, sends ``neighbour`` its last block again."""
        node = self.nodes[i]
        block = node.blocks.get(neighbour)
        if block is None:
            return
        self._push(
            self.clock.now + self.message_seconds,
            (neighbour,),
            node.index,
            _Made((neighbour,), True, node.stamp, {neighbour: block}),
            answer=True,
        )
        self.network.counters.record_event(node.index, 1, self.work.message_bytes)

    def _update(self, i: int) -> None:
        node = self.nodes[i]
        if self.work.relax is None or not self.network.batched:
            blocks = node.update()
            message: PendingUpdate = _Made(tuple(blocks), True, node.stamp, blocks)
        else:
            message = self.begun[i] = cast(BatchedAsyncNode, node).begin_update()
            self.pending.append(message)
        seconds = self.network.compute.seconds(node.index, self.work.update_flops)
        arrival = self.clock.now + seconds + self.message_seconds
        self._push(arrival, message.neighbours, node.index, message)
        if message.neighbours:
            self.network.counters.record_event(
                node.index, len(message.neighbours), self.work.message_bytes
            )
        self.clock.at(self.clock.now + seconds, lambda: self._after_update(i))

    def _make_pending(self) -> None:
        """Make the numbers of every update begun and not yet made, in one batch: they
        are of distinct nodes, each read what had arrived when it began."""
        assert self.work.relax is not None
        self.work.relax(self.pending)
        self.pending = []

    def _after_update(self, i: int) -> None:
        begun = self.begun[i]
        if begun is not None and not begun.done:
            self._make_pending()
        action = self.nodes[i].next_action()
        if action == "done":
            self.network.ready[self.nodes[i].index] = self.clock.now
        elif action == "update":
            self._update(i)
        else:
            self.idle[i] = True
            if self.network.drop > 0:
                self.waits[i] += 1
                wait = self.waits[i]
                self.clock.at(self.clock.now + self._patience(i), lambda: self._retry(i, wait))

    def _patience(self, i: int) -> float:
        expected = self.network.compute.mean_seconds(self.nodes[i].index, self.work.update_flops)
        return RETRY * (expected + self.message_seconds)

    def _retry(self, i: int, wait: int) -> None:
        """Node i's timer of its ``wait``-th wait: still waiting then, it updates anyway."""
        if self.idle[i] and self.waits[i] == wait:
            self.idle[i] = False
            self._update(i)
