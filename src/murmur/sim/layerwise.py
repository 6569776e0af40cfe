"""The simulated network of layer-wise training: every node in this process, and
the work the solvers report turned into virtual time.

A synchronous solver's rounds last as long as the slowest node (and, when it
gossips, one message time per round); a centralized solver's work is its own;
asynchronous nodes (ARock) run on a discrete-event loop, each at its own pace,
their pushes arriving one message time after their update ends.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from murmur.algorithms.protocols import AsyncNode, AsyncWork, RoundsWork, Transport
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

    def __post_init__(self) -> None:
        if not self.ready:
            self.ready = [0.0] * self.graph.agents

    @property
    def local_nodes(self) -> list[int]:
        return list(range(self.graph.agents))

    def live_neighbours(self, node: int) -> list[int]:
        return self.graph.neighbors(node)

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
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.clock.now = state["now"]
        self.ready = list(state["ready"])
        self.counters.load_state_dict(state["counters"])
        self.compute.load_state_dict(state["compute"])


class _AsyncRun:
    """Every asynchronous node of one layer on one event loop, on absolute times (the
    nodes start the layer at different times). A node updates, and its pushes arrive
    a message time after the update ends; then it acts on what its state says:
    update again, wait for news (woken by the next arrival), or finish."""

    def __init__(self, network: SimulatedNetwork, nodes: list[AsyncNode], work: AsyncWork) -> None:
        self.network = network
        self.nodes = nodes
        self.work = work
        self.clock = EventLoop(start=min(network.ready))
        self.message_seconds = network.links.seconds(work.message_bytes)
        self.idle = [False] * len(nodes)

    def run(self) -> None:
        compute, ready = self.network.compute, self.network.ready
        for i, node in enumerate(self.nodes):
            begin = ready[node.index] + compute.seconds(node.index, self.work.setup_flops[i])
            self.clock.at(begin, lambda i=i: self._update(i))
        self.clock.run()

    def _deliver(self, receiver: int, sender: int, stamp: int, block: torch.Tensor) -> None:
        if self.nodes[receiver].receive(sender, stamp, block) and self.idle[receiver]:
            self.idle[receiver] = False
            self._update(receiver)

    def _update(self, i: int) -> None:
        node = self.nodes[i]
        blocks = node.update()
        stamp = node.stamp
        seconds = self.network.compute.seconds(node.index, self.work.update_flops)
        arrival = self.clock.now + seconds + self.message_seconds
        for j, block in blocks.items():
            self.clock.at(
                arrival, lambda j=j, block=block: self._deliver(j, node.index, stamp, block)
            )
        if blocks:
            self.network.counters.record_event(node.index, len(blocks), self.work.message_bytes)
        self.clock.at(self.clock.now + seconds, lambda: self._after_update(i))

    def _after_update(self, i: int) -> None:
        action = self.nodes[i].next_action()
        if action == "done":
            self.network.ready[self.nodes[i].index] = self.clock.now
        elif action == "update":
            self._update(i)
        else:
            self.idle[i] = True
