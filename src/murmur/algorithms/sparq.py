"""SPARQ-SGD: event-triggered and compressed decentralized SGD.

Singh, Data, George, Diggavi, "SPARQ-SGD: Event-Triggered and Compressed
Communication in Decentralized Optimization", arXiv 1910.14280. CHOCO-SGD
(:mod:`murmur.algorithms.choco`) with local steps and an event trigger: every
agent takes H local SGD steps, then, at each synchronization index (k + 1
divisible by H)::

    q_i = C(x_i - x^_i)   if ||x_i - x^_i||^2 >= c_k eta_k^2, else nothing is sent
    x^_j <- x^_j + q_j    for j in N_i and i itself
    x_i  <- x_i + gamma sum_j w_ij (x^_j - x^_i)

with the growing threshold c_k = c0 (k + 1)^(1 - epsilon) of the paper
(``threshold`` = c0, ``threshold_growth`` = 1 - epsilon). With H = 1, c0 = 0
every agent sends every step (the trigger is >=, zero included), and this is
CHOCO-SGD.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from murmur.algorithms.choco import GossipConfig, gossip_setup, publish_and_mix
from murmur.algorithms.compressors import WarmStarts
from murmur.algorithms.estimates import Message, with_warm
from murmur.algorithms.protocols import BuildContext, Transport
from murmur.errors import UsageError
from murmur.topology import Graph


@dataclass(frozen=True)
class SparqConfig(GossipConfig):
    """Parameters of SPARQ-SGD."""

    name = "sparq-sgd"
    local_steps: int = 4
    """H: local SGD steps between synchronization indices (>= 1)."""
    threshold: float = 1.0
    """c0 of the event threshold c_k = c0 (k + 1)^growth on ||x_i - x^_i||^2 / eta_k^2 (>= 0)."""
    threshold_growth: float = 0.5
    """1 - epsilon: how fast the threshold grows, in [0, 1)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.local_steps < 1:
            raise UsageError(
                f"algorithm.local_steps (H) must be at least 1, not {self.local_steps}"
            )
        if self.threshold < 0:
            raise UsageError(f"algorithm.threshold must be >= 0, not {self.threshold:g}")
        if not 0 <= self.threshold_growth < 1:
            raise UsageError(
                f"algorithm.threshold_growth must be in [0, 1), not {self.threshold_growth:g}"
            )

    def steps_per_exchange(self) -> int:
        """H: an agent takes its local steps alone between two synchronization indices."""
        return self.local_steps


class SparqState(NamedTuple):
    x: torch.Tensor
    """Models, (agents, P). The estimates x^ are what the transport holds as sent."""
    warm: WarmStarts | None = None
    """The senders' warm starts (``lowrank``), kept from message to message."""


class Sparq:
    """SPARQ-SGD over a fixed graph; see the module docstring."""

    def __init__(self, config: SparqConfig, graph: Graph, context: BuildContext) -> None:
        self.gradient_step = config.gradient_step()
        self.gossip = gossip_setup(config, graph, context)
        self.seed = context.seed
        self.local_steps = config.local_steps
        self.threshold = config.threshold
        self.growth = config.threshold_growth

    def chosen_steps(self) -> dict[str, float]:
        return self.gossip.chosen_steps()

    def init(self, params: torch.Tensor) -> SparqState:
        return SparqState(x=params.clone())

    def initial_sent(self, params: torch.Tensor) -> torch.Tensor:
        return params

    def params(self, state: SparqState) -> torch.Tensor:
        return state.x

    def event_threshold(self, iteration: int) -> float:
        """c_k eta_k^2: the squared drift at which an agent sends at iteration k."""
        eta = self.gradient_step(iteration)
        return self.threshold * (iteration + 1) ** self.growth * eta**2

    def step(
        self, state: SparqState, grads: torch.Tensor, iteration: int, transport: Transport
    ) -> SparqState:
        state = with_warm(state)
        x = state.x
        x.add_(grads, alpha=-self.gradient_step(iteration))
        if (iteration + 1) % self.local_steps != 0:
            return state
        difference = torch.sub(x, transport.last_sent, out=grads)
        drift = torch.linalg.vector_norm(difference, dim=1, keepdim=True)
        sent = drift.square() >= self.event_threshold(iteration)
        message = Message(self.seed, transport.agents, iteration)
        publish_and_mix(self.gossip, x, difference, sent, (message, state), transport)
        return state
