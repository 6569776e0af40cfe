"""DSGD: decentralized SGD that sends every step (Nedic & Ozdaglar; Lian et al. 2017).

Every agent broadcasts every iteration and combines with a doubly stochastic
mixing matrix W on the graph. Two orders are standard::

    combine-then-adapt (cta):  x_i <- sum_j W_ij x_j - alpha_k g_i(x_i)
    adapt-then-combine (atc):  x_i <- sum_j W_ij (x_j - alpha_k g_j(x_j))

with alpha_k = a / (eps k + 1)^d2. CTA with W = I - b L is DETSGRAD with a zero
threshold and a constant consensus step; ATC with exact averaging
(W = 11^T / N) is centralized SGD on the union of the agents' batches.

W is computed from the graph the transport says the agents talk over this
iteration (``transport.graph``): the run's graph, or each graph of a
time-varying topology, which gets its own weights (on a random matching every
pair averages, W_ij = 1/2, with Laplacian "auto" or Metropolis weights).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

import torch

from murmur.algorithms.mixing import MixStep, mix_replace, mix_replace_descend
from murmur.algorithms.protocols import Transport
from murmur.algorithms.schedules import SgdConfig, check_step
from murmur.sections import Step
from murmur.topology import Graph, PerGraph, consensus_step, mixing_operator


@dataclass(frozen=True)
class DsgdConfig(SgdConfig):
    """Parameters of DSGD."""

    name = "dsgd"
    weights: Literal["laplacian", "metropolis", "uniform"] = "laplacian"
    """Mixing matrix: I - b L, Metropolis-Hastings, or 1/(d+1) (regular graphs)."""

    def mixing_weights(self) -> str:
        return self.weights

    b: Step = "auto"
    """Consensus step of the Laplacian weights W = I - b L; "auto" picks
    2 / (lambda_2 + lambda_max)."""
    order: Literal["cta", "atc"] = "cta"
    """Combine then adapt, or adapt then combine."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_step("algorithm.b", self.b)


class DsgdState(NamedTuple):
    x: torch.Tensor
    """Models, (agents, P)."""


class Dsgd:
    """DSGD; see the module docstring."""

    def __init__(self, config: DsgdConfig, graph: Graph) -> None:
        self.steps: dict[str, float] = {}

        def mixing(graph: Graph) -> torch.Tensor:
            beta = consensus_step(graph, config.b) if config.weights == "laplacian" else None
            if beta is not None and not self.steps:  # the run's graph comes first
                self.steps["b"] = beta
            return mixing_operator(graph, config.weights, beta)

        self.mixing = PerGraph(mixing, graph)
        """W, sparse, for each graph the agents talk over."""
        self.gradient_step = config.gradient_step()
        self.adapt_first = config.order == "atc"

    def chosen_steps(self) -> dict[str, float]:
        return dict(self.steps)

    def init(self, params: torch.Tensor) -> DsgdState:
        return DsgdState(x=params.clone())

    def initial_sent(self, params: torch.Tensor) -> torch.Tensor:
        return params

    def params(self, state: DsgdState) -> torch.Tensor:
        return state.x

    def step(
        self, state: DsgdState, grads: torch.Tensor, iteration: int, transport: Transport
    ) -> DsgdState:
        alpha = self.gradient_step(iteration)
        x = state.x
        mixing = self.mixing(transport.graph)
        # x is overwritten whole by the mixing, so its values may be handed over uncopied.
        if self.adapt_first:
            x.add_(grads, alpha=-alpha)
            transport.broadcast_all_overwriting(x)
            mix_replace(transport, MixStep(mixing, x))
            return state
        transport.broadcast_all_overwriting(x)
        mix_replace_descend(transport, MixStep(mixing, x, grads, alpha))
        return state
