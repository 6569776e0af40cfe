"""The simulator's transport: agents' messages in memory, every one counted.

It implements :class:`~murmur.algorithms.protocols.Transport` (``broadcast``,
``publish``, ``mix``, ``last_sent``, ``agents``). Delivery is instant and
lossless, so every neighbour of ``j`` holds the same latest value of ``j`` and
one stacked tensor stands for all mailboxes (:mod:`murmur.sim.lossy` keeps one
per directed edge, for runs that lose messages). The distributed runtime implements
the same calls over gloo (``murmur.distributed.transport``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from murmur.algorithms.estimates import EstimateUpdate
from murmur.algorithms.protocols import MixStep
from murmur.metrics.counters import MessageCounters
from murmur.sim.fused import FusedMixing
from murmur.topology import Graph, PerGraph


class InMemoryTransport:
    """Instant, lossless delivery between agents held in one process."""

    def __init__(
        self,
        graph: Graph,
        initial: torch.Tensor,
        counters: MessageCounters | None = None,
        *,
        compiled: bool = False,
    ) -> None:
        """``initial`` (agents, P): the values every agent is known to start from.

        ``counters``: add to these (e.g. shared by the layers of one run) instead of new ones.
        ``compiled``: mix through one compiled pass over the state (:mod:`murmur.sim.fused`).
        """
        if initial.shape[0] != graph.agents:
            raise ValueError(
                f"initial values have {initial.shape[0]} rows for {graph.agents} agents"
            )
        self.sent = initial.clone()
        """Row j: the value agent j last sent, as every agent holds it (delivery is instant)."""
        self.graph = graph
        """The graph the agents talk over: the one given, or the graph of the iteration
        (:meth:`use_graph`)."""
        self.device = initial.device
        """Where the agents' values, the counters and the operators live (a GPU's memory
        when ``run.device = "cuda"``): a step reads nothing back from it."""
        if counters is None:
            counters = MessageCounters(graph.agents, device=self.device)
        self.counters = counters
        self._degrees_of = PerGraph(lambda graph: graph.degrees().to(self.device), graph)
        self._degrees = self._degrees_of.value
        self._operators = OnDevice(self.device)
        self._message_bytes = initial.shape[1] * initial.element_size()
        self.agents = list(range(graph.agents))
        """The agents this transport sends for: all of them."""
        self._fused = FusedMixing(lambda: self.sent) if compiled else None

    @property
    def fused_mix(self) -> FusedMixing | None:
        """The compiled mixing step :mod:`murmur.algorithms.mixing` takes; None where the
        run steps eagerly, or fell back to it (:attr:`compile_fallback`)."""
        if self._fused is None or self._fused.fallback is not None:
            return None
        return self._fused

    @property
    def compile_fallback(self) -> str | None:
        """Why a compiled run steps eagerly after all (its kernel failed to build, or
        disagreed with the eager step on this machine); None otherwise."""
        return self._fused.fallback if self._fused is not None else None

    def use_graph(self, graph: Graph) -> None:
        """Talk over ``graph`` (of the same agents) from now on: one graph of a
        time-varying topology, for algorithms that send every agent's whole model to
        every neighbour at every step (:class:`~murmur.sim.faults.VaryingGraph`)."""
        if graph is self.graph:
            return
        if graph.agents != self.graph.agents:
            raise ValueError(f"a graph of {graph.agents} agents for {self.graph.agents}")
        self.graph = graph
        self._degrees = self._degrees_of(graph)

    def broadcast(self, senders: torch.Tensor, values: torch.Tensor) -> None:
        """Agents flagged in ``senders`` (bool, (agents,)) send their row of ``values``."""
        copy_rows(self.sent, values, senders)
        self.counters.record_events(senders.to(torch.int64), self._message_bytes, self._degrees)

    def broadcast_all_overwriting(self, values: torch.Tensor) -> None:
        """Every agent sends its row of ``values``, whose numbers the caller overwrites
        next: instead of copying them, the transport takes ``values``' memory as what was
        sent and gives its old memory to ``values``."""
        held = self.sent
        if values.shape != held.shape or values.dtype != held.dtype:
            raise ValueError(
                f"values {tuple(values.shape)} {values.dtype} for a transport of "
                f"{tuple(held.shape)} {held.dtype}"
            )
        if not (values.is_contiguous() and held.is_contiguous()):
            everyone = torch.ones(values.shape[0], dtype=torch.bool, device=self.device)
            self.broadcast(everyone, values)
            return
        new, old = values.untyped_storage(), held.untyped_storage()
        new_offset, old_offset = values.storage_offset(), held.storage_offset()
        held.set_(new, new_offset, values.shape, values.stride())
        values.set_(old, old_offset, held.shape, held.stride())
        everyone = torch.ones(values.shape[0], dtype=torch.int64, device=self.device)
        self.counters.record_events(everyone, self._message_bytes, self._degrees)

    def publish(self, update: EstimateUpdate) -> None:
        """Each agent sends its sent segments of ``update``: every holder of its public
        estimate (itself and its neighbours) adds its row of ``update.delta``."""
        segments = update.sent.to(torch.int64).sum(1)
        add_rows(self.sent, update.delta, segments > 0)
        payload = (update.sent.to(torch.int64) * update.segment_bytes()).sum(1)
        self.counters.record_events(segments, payload, self._degrees)

    def mix(self, operator: torch.Tensor, out: torch.Tensor, scale: float = 1.0) -> None:
        """``out += scale * operator @ sent``; a sparse operator costs O(edges * P)."""
        if self.fused_mix is not None:
            self.fused_mix(MixStep(operator, out, scale=scale), keep=True, drift="none")
            return
        out.addmm_(self._operators(operator), self.sent, alpha=scale)

    @property
    def last_sent(self) -> torch.Tensor:
        """Every agent's own last broadcast: with instant delivery, what its neighbours hold."""
        return self.sent

    def state_dict(self) -> dict[str, Any]:
        """What the agents hold of each other and what they sent, for a checkpoint."""
        # "published" is the checkpoint format's name for what every agent last sent.
        return {"published": self.sent, "counters": self.counters.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Take the values and counts of :meth:`state_dict`, in place."""
        self.sent.copy_(state["published"])
        self.counters.load_state_dict(state["counters"])


INDEXED_DEVICES = {"cpu"}
"""The device types on which :func:`add_rows` and :func:`copy_rows` read the row mask to
touch only its rows (a read is free on the CPU). On any other device (a GPU) they
write every row through the mask and read nothing back, with the same numbers."""


def indexed(device: torch.device) -> bool:
    """Whether row writes on ``device`` read their masks to touch only their rows."""
    return device.type in INDEXED_DEVICES


class OnDevice:
    """Tensors the algorithms derive on the CPU (mixing operators, message sizes), each
    copied once to ``device`` and kept for as long as the original lives."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._copies: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def __call__(self, tensor: torch.Tensor) -> torch.Tensor:
        if tensor.device == self.device:
            return tensor
        known = self._copies.get(id(tensor))
        if known is not None and known[0] is tensor:
            return known[1]
        if len(self._copies) >= 256:  # operators of graphs no longer used
            self._copies.clear()
        copy = tensor.to_dense() if self.device.type == "meta" and tensor.is_sparse_csr else tensor
        # meta tensors (shapes only, no sparse kernels) stand for a device in the tests
        moved = copy.to(self.device, non_blocking=True)
        self._copies[id(tensor)] = (tensor, moved)
        return moved


def add_rows(target: torch.Tensor, source: torch.Tensor, rows: torch.Tensor) -> None:
    """``target[rows] += source[rows]`` for a boolean row mask, touching only those rows."""
    if not indexed(target.device):
        torch.where(rows.unsqueeze(1), target + source, target, out=target)
        return
    if bool(rows.all()):
        target.add_(source)
        return
    chosen = rows.nonzero().squeeze(1)
    target.index_add_(0, chosen, source.index_select(0, chosen))


def copy_rows(target: torch.Tensor, source: torch.Tensor, rows: torch.Tensor) -> None:
    """``target[rows] = source[rows]`` for a boolean row mask, touching only those rows."""
    if not indexed(target.device):
        torch.where(rows.unsqueeze(1), source, target, out=target)
        return
    if bool(rows.all()):
        target.copy_(source)
        return
    chosen = rows.nonzero().squeeze(1)
    target.index_copy_(0, chosen, source.index_select(0, chosen))
