"""DETSGRAD: event-triggered decentralized SGD.

George & Gurram, "Distributed Deep Learning with Event-Triggered Communication",
arXiv 1909.05020. Each agent keeps its model x_i and x^_i, the copy it last
broadcast; neighbours only ever see x^_i. Stacked over agents::

    X(k+1) = X(k) - beta_k L X^(k) - alpha_k G(k)
    agent i broadcasts x_i(k+1) when || x_i(k+1) - x^_i(k) || >= v_k

with alpha_k = a / (eps k + 1)^d2, beta_k = b / (eps k + 1)^d1 and
v_k = v0 alpha_k: an agent sends once its drift reaches the threshold. With
v0 = 0 every agent therefore sends every step, zero drift included, and this is
DSGD with W = I - beta L.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from murmur.algorithms.protocols import Transport
from murmur.algorithms.schedules import Decaying, SgdConfig
from murmur.errors import UsageError
from murmur.topology import Graph, as_sparse, check_consensus_step


@dataclass(frozen=True)
class DetsgradConfig(SgdConfig):
    """Parameters of DETSGRAD (defaults from docs/ALGORITHMS.md, section 1)."""

    name = "detsgrad"
    b: float = 0.2
    """Consensus step scale: beta_k = b / (eps k + 1)^d1; needs b * lambda_max(L) < 2."""
    v0: float = 1.0
    """Event threshold scale: v_k = v0 * alpha_k; an agent sends when its drift reaches v_k,
    so 0 sends every step."""
    d1: float = 0.1
    """Decay exponent of the consensus step."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.b <= 0:
            raise UsageError(f"algorithm.b must be positive, not {self.b}")
        if self.v0 < 0:
            raise UsageError(f"algorithm.v0 must be >= 0, not {self.v0}")
        if self.d1 < 0:
            raise UsageError("algorithm.d1 must be >= 0")


class DetsgradState(NamedTuple):
    x: torch.Tensor
    """Models, (agents, P). Each agent's last broadcast x^_i is ``transport.last_sent``."""


class Detsgrad:
    """DETSGRAD over a fixed graph; see the module docstring."""

    def __init__(self, config: DetsgradConfig, graph: Graph) -> None:
        check_consensus_step(graph, config.b, key="algorithm.b")
        self.laplacian = as_sparse(graph.laplacian())
        self.gradient_step = config.gradient_step()
        self.consensus_step = Decaying(config.b, config.d1, config.eps)
        self.v0 = config.v0

    def init(self, params: torch.Tensor) -> DetsgradState:
        return DetsgradState(x=params.clone())

    def params(self, state: DetsgradState) -> torch.Tensor:
        return state.x

    def step(
        self, state: DetsgradState, grads: torch.Tensor, iteration: int, transport: Transport
    ) -> DetsgradState:
        alpha = self.gradient_step(iteration)
        x = state.x
        transport.mix(self.laplacian, out=x, scale=-self.consensus_step(iteration))
        x.add_(grads, alpha=-alpha)
        drift = torch.linalg.vector_norm(torch.sub(x, transport.last_sent, out=grads), dim=1)
        transport.broadcast(drift >= self.v0 * alpha, x)
        return state
