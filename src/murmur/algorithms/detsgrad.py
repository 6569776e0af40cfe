"""DETSGRAD: event-triggered decentralized SGD.

George & Gurram, "Distributed Deep Learning with Event-Triggered Communication",
arXiv 1909.05020. Each agent keeps its model x_i and x^_i, the copy its
neighbours hold; neighbours only ever see x^_i. Stacked over agents::

    X(k+1) = X(k) - beta_k L X^(k) - alpha_k G(k)
    agent i sends when || x_i(k+1) - x^_i(k) || >= v_k

with alpha_k = a / (eps k + 1)^d2, beta_k = b / (eps k + 1)^d1 and
v_k = v0 alpha_k: an agent sends once its drift reaches the threshold. With
v0 = 0 every agent therefore sends every step, zero drift included, and this is
DSGD with W = I - beta L. ``b = "auto"`` is 2 / (lambda_2 + lambda_max) of L,
the fastest stable gossip step on the graph, times sqrt(omega) when events are
compressed (omega: the share of a difference the compressor keeps, as for
CHOCO-SGD's ``gamma``).

Two refinements (docs/methods/detsgrad.md):

- ``trigger = "layer"``: each parameter tensor t (of n_t entries) has its own
  event, || x_i,t - x^_i,t || >= v_k sqrt(n_t / P), and is sent alone, as
  EventGraD does; the thresholds' squares add up to the model's v_k^2.
- ``compress``: an event sends q = C(x_i - x^_i) instead of x_i, and every
  holder of x^_i adds q (:mod:`murmur.algorithms.estimates`), so what the
  compressor leaves out stays in x_i - x^_i and is sent later.

Without either, an event sends x_i itself and x^_i becomes x_i exactly.

L and b are those of the graph the transport says the agents talk over this
iteration (``transport.graph``): the run's graph, or each graph of a
time-varying topology (``b = "auto"`` is then that graph's fastest step, 1/2 on
a matching, times the same compression factor).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, NamedTuple

import torch

from murmur.algorithms.compressors import CompressionConfig, WarmStarts, kept_share
from murmur.algorithms.estimates import Message, Segments, sent_update, with_warm
from murmur.algorithms.mixing import MixStep, mix_descend_drift, mix_descend_norms
from murmur.algorithms.protocols import BuildContext, Transport
from murmur.algorithms.schedules import Decaying, DecayingConsensus, SgdConfig
from murmur.errors import UsageError
from murmur.topology import Graph, PerGraph, consensus_step


@dataclass(frozen=True)
class DetsgradConfig(DecayingConsensus, CompressionConfig, SgdConfig):
    """Parameters of DETSGRAD (defaults: docs/methods/detsgrad.md)."""

    name = "detsgrad"

    v0: float = 1.0
    """Event threshold scale: v_k = v0 * alpha_k; an agent sends when its drift reaches v_k,
    so 0 sends every step."""
    trigger: Literal["model", "layer"] = "model"
    """One event for the whole model, or one per parameter tensor."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.v0 < 0:
            raise UsageError(f"algorithm.v0 must be >= 0, not {self.v0}")
        if self.compress == "lowrank" and self.trigger == "layer":
            raise UsageError(
                'algorithm.compress = "lowrank" compresses whole models; trigger = "layer" '
                "sends one tensor at a time: use another compressor"
            )


class DetsgradState(NamedTuple):
    x: torch.Tensor
    """Models, (agents, P). Each agent's x^_i is ``transport.last_sent``."""
    warm: WarmStarts | None = None
    """The senders' warm starts (``lowrank``), kept from message to message."""


class Detsgrad:
    """DETSGRAD; see the module docstring."""

    def __init__(
        self, config: DetsgradConfig, graph: Graph, context: BuildContext | None = None
    ) -> None:
        """``context`` gives the run's seed and, for ``trigger = "layer"``, the model's tensors."""
        self.gradient_step = config.gradient_step()
        segments = context.segments if context is not None else None
        self.compressor = config.compressor(
            segments.sizes if segments else (), segments.shapes if segments else ()
        )
        shrink = 1.0
        if config.b == "auto" and context is not None and context.segments is not None:
            # A compressed estimate lags its model: the step shrinks as CHOCO-SGD's does.
            sizes = context.segments.sizes
            largest = max(sizes) if config.trigger == "layer" else sum(sizes)
            shrink = kept_share(self.compressor, largest) ** 0.5

        def consensus(graph: Graph) -> tuple[torch.Tensor, Decaying]:
            b = consensus_step(graph, config.b, key="algorithm.b")
            return graph.sparse_laplacian(), Decaying(b * shrink, config.d1, config.eps)

        self.consensus = PerGraph(consensus, graph)
        """L, sparse, and the consensus step beta_k for each graph the agents talk over."""
        self.v0 = config.v0
        self.exact = config.trigger == "model" and not config.compresses()
        self.seed = context.seed if context is not None else 0
        self.layers: Segments | None = None
        if config.trigger == "layer":
            if context is None or context.segments is None:
                raise ValueError("DETSGRAD's layer trigger needs the model's parameter tensors")
            self.layers = context.segments
        sizes = self.layers.sizes if self.layers is not None else (1,)
        self.shares = torch.tensor([math.sqrt(n / sum(sizes)) for n in sizes], dtype=torch.float64)
        """Each segment's event threshold relative to v_k."""

    def chosen_steps(self) -> dict[str, float]:
        return {"b": self.consensus.value[1].scale}

    def segments(self, parameters: int) -> Segments:
        """What an event covers: each tensor, or the whole model."""
        return self.layers if self.layers is not None else Segments.whole(parameters)

    def init(self, params: torch.Tensor) -> DetsgradState:
        return DetsgradState(x=params.clone())

    def initial_sent(self, params: torch.Tensor) -> torch.Tensor:
        return params

    def params(self, state: DetsgradState) -> torch.Tensor:
        return state.x

    def step(
        self, state: DetsgradState, grads: torch.Tensor, iteration: int, transport: Transport
    ) -> DetsgradState:
        alpha = self.gradient_step(iteration)
        x = state.x
        laplacian, beta = self.consensus(transport.graph)
        step = MixStep(laplacian, x, grads, alpha, scale=-beta(iteration))
        if self.exact:
            norms = mix_descend_norms(transport, step)
            transport.broadcast(norms >= self.v0 * alpha, x)
            return state
        mix_descend_drift(transport, step)
        drift = grads
        state = with_warm(state)
        segments = self.segments(x.shape[1])
        if self.shares.device != drift.device:  # once: the state's device (a GPU)
            self.shares = self.shares.to(drift.device)
        sent = segments.norms(drift) >= self.v0 * alpha * self.shares
        message = Message(self.seed, transport.agents, iteration)
        transport.publish(sent_update(self.compressor, drift, sent, segments, message, state))
        return state
