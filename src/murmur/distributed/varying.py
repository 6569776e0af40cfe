"""Time-varying graphs in the distributed runtime: the one-peer exponential topology.

At iteration t every rank talks over the graph ``one_peer_exponential(graph, t //
topology.every)``, a function of the iteration alone, so every rank knows each
step's graph without a word, and it is the graph the simulator's schedule draws
for that iteration (:mod:`murmur.sim.faults`). The algorithm (one that sends
every agent's whole model at every step, :func:`~murmur.training.plan.distributed_varying`)
derives its mixing weights from it as in the simulator; the transport sends only
over its edges (:meth:`~murmur.distributed.transport.DistributedTransport.use_graph`).
"""

from __future__ import annotations

from typing import Any

import torch

from murmur.algorithms.protocols import Algorithm, Transport, Wrapped
from murmur.config import Config
from murmur.distributed.transport import DistributedTransport
from murmur.topology import Graph, one_peer_exponential


class OnePeerGraphs(Wrapped):
    """``algorithm`` stepped over each iteration's graph of the one-peer exponential
    topology on ``graph``, each lasting ``every`` iterations, told to ``transport``
    before each step; everything but its step is the algorithm's."""

    def __init__(
        self, algorithm: Algorithm, transport: DistributedTransport, graph: Graph, every: int
    ) -> None:
        super().__init__(algorithm)
        self.transport = transport
        self.graph = graph
        self.every = every
        self._graphs: dict[int, Graph] = {}
        self._rounds = one_peer_rounds(graph)

    def graph_at(self, iteration: int) -> Graph:
        """The graph the agents talk over at ``iteration`` (one object per pairing)."""
        phase = (iteration // self.every) % self._rounds
        if phase not in self._graphs:
            self._graphs[phase] = one_peer_exponential(self.graph, phase)
        return self._graphs[phase]

    def step(self, state: Any, grads: torch.Tensor, iteration: int, transport: Transport) -> Any:
        self.transport.use_graph(self.graph_at(iteration))
        return self.algorithm.step(state, grads, iteration, transport)


def one_peer_rounds(graph: Graph) -> int:
    """The pairings of the one-peer exponential topology on ``graph`` before they repeat:
    ceil(log2 N) (at least 1), as :func:`~murmur.topology.one_peer_exponential` cycles."""
    return max((graph.agents - 1).bit_length(), 1)


def links(config: Config, graph: Graph) -> Graph:
    """Every link the run's agents talk over: ``graph``, or on a one-peer topology the
    union of its pairings (the hypercube, for N a power of two), which the transport
    keeps a connection on, not the exponential graph's other edges."""
    return graph if config.topology.varying == "none" else one_peer_links(graph)


def one_peer_links(graph: Graph) -> Graph:
    """The union of the one-peer exponential topology's pairings on ``graph``."""
    pairings = [one_peer_exponential(graph, phase) for phase in range(one_peer_rounds(graph))]
    edges = torch.cat([pairing.edges for pairing in pairings])
    return Graph(graph.agents, edges, f"one_peer_links({graph.name})")


def topology_name(config: Config, graph: Graph) -> str:
    """The run's topology as the simulator names it: ``one_peer(exponential) every 1``."""
    topology = config.topology
    if topology.varying == "none":
        return graph.name
    return f"{topology.varying}({graph.name}) every {topology.every}"


def exchange_span(config: Config, graph: Graph) -> int:
    """The iterations from one exchange between two neighbours to their next: the
    algorithm's, times the pairings' period on a one-peer topology (two neighbours
    talk once in that period, so ranks may drift that much further apart)."""
    span = config.algorithm.steps_per_exchange()
    if config.topology.varying == "none":
        return span
    return span * one_peer_rounds(graph) * config.topology.every
