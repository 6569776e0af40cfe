"""DETSGRAD-GT: event-triggered decentralized SGD with gradient tracking.

DETSGRAD (:mod:`murmur.algorithms.detsgrad`) in which every agent steps along
y_i, its estimate of the network's average gradient, instead of its own
gradient (gradient tracking: Nedic, Olshevsky, Shi, "Achieving Geometric
Convergence for Distributed Optimization over Time-Varying Graphs", 2017;
Pu & Nedic, "Distributed Stochastic Gradient Tracking Methods", 2020). An
event sends the pair (x_i, y_i) as one message of 2P values; neighbours hold
the last pair sent, (x^_i, y^_i). Stacked over agents, each iteration::

    M(k)   = mu M(k-1) + (1 - mu) G(k)              smoothed gradients, M(0) = G(0)
    Y(k)   = Y(k-1) - beta_k L Y^ + M(k) - M(k-1)    Y(0) = M(0)
    X(k+1) = X(k) - beta_k L X^ - alpha_k Y(k)
    agent i sends (x_i, y_i) when ||x_i - x^_i|| >= v0 alpha_k or ||y_i - y^_i|| >= v_y

Because 1^T L = 0, sum_i y_i = sum_i m_i at every step whatever was sent: y
tracks the average smoothed gradient, and an agent whose own data hold one
class still steps the way the whole network would. That removes the
heterogeneity that makes DSGD and DETSGRAD need a strong consensus step on
non-i.i.d. splits, so a weaker step, and the fewer events it causes, suffice.
The smoothing mu keeps y from moving with every mini-batch's noise, which would
fire its trigger every step.

With ``compress``, an event sends C(x_i - x^_i) and C(y_i - y^_i) instead,
each as its own message (:mod:`murmur.algorithms.estimates`), when its own
trigger fires; ``b = "auto"`` then shrinks by sqrt(omega), as CHOCO-SGD's gamma.

alpha_k, beta_k as in DETSGRAD. ``b = "auto"`` is half DETSGRAD's,
1 / (lambda_2 + lambda_max) of L: with tracking, the full step diverged at
alpha = 0.1 on mnist5k (ring of 10, one digit per agent), where half of it
reached DSGD's accuracy.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from murmur.algorithms import gossip_probe
from murmur.algorithms.compressors import CompressionConfig, kept_share
from murmur.algorithms.estimates import Message, with_warm
from murmur.algorithms.protocols import BuildContext, Transport
from murmur.algorithms.schedules import Decaying, DecayingConsensus, SgdConfig
from murmur.algorithms.tracking import (
    TrackedPair,
    half_triggers,
    model_and_tracker,
    publish_halves,
)
from murmur.errors import UsageError
from murmur.topology import Graph, consensus_step
from murmur.topology.spectra import DENSE_LIMIT


@dataclass(frozen=True)
class DetsgradGtConfig(DecayingConsensus, CompressionConfig, SgdConfig):
    """Parameters of DETSGRAD-GT."""

    name = "detsgrad-gt"

    v0: float = 15.0
    """Model threshold: an agent sends once ||x_i - x^_i|| reaches v0 alpha_k (>= 0)."""
    vy: float = 3.0
    """Tracker threshold: or once ||y_i - y^_i|| reaches vy (>= 0)."""
    momentum: float = 0.9
    """mu, the smoothing of the gradients the trackers follow, in [0, 1)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.v0 < 0 or self.vy < 0:
            raise UsageError("algorithm.v0 and algorithm.vy must be >= 0")
        if not 0 <= self.momentum < 1:
            raise UsageError(f"algorithm.momentum must be in [0, 1), not {self.momentum:g}")


DetsgradGtState = TrackedPair
"""DETSGRAD-GT's state: ``grad_memory`` holds each agent's smoothed gradient m_i."""


class DetsgradGt:
    """DETSGRAD-GT over a fixed graph; see the module docstring."""

    def __init__(
        self, config: DetsgradGtConfig, graph: Graph, context: BuildContext | None = None
    ) -> None:
        """``context``: the run's seed and model size, which compression needs."""
        self.laplacian = graph.sparse_laplacian()
        self.gradient_step = config.gradient_step()
        segments = context.segments if context is not None else None
        self.compressor = (
            config.compressor(
                segments.sizes if segments else (), segments.shapes if segments else ()
            )
            if config.compresses()
            else None
        )
        self.seed = context.seed if context is not None else 0
        b = consensus_step(graph, config.b)
        if config.b == "auto":
            b /= 2
            if self.compressor is not None:
                if context is None or context.segments is None:
                    raise ValueError("a compressed DETSGRAD-GT needs the model's size")
                parameters = context.segments.total
                b *= kept_share(self.compressor, parameters) ** 0.5
                if graph.agents <= DENSE_LIMIT:  # the probe simulates every agent densely
                    unit = torch.eye(graph.agents, dtype=torch.float64) - graph.laplacian()
                    b = gossip_probe.supported_step(unit, self.compressor, parameters, b)
        self.consensus_step = Decaying(b, config.d1, config.eps)
        self.v0 = config.v0
        self.vy = config.vy
        self.momentum = config.momentum

    def chosen_steps(self) -> dict[str, float]:
        return {"b": self.consensus_step.scale}

    def init(self, params: torch.Tensor) -> DetsgradGtState:
        return DetsgradGtState(pair=self.initial_sent(params))

    def initial_sent(self, params: torch.Tensor) -> torch.Tensor:
        return model_and_tracker(params)

    def params(self, state: DetsgradGtState) -> torch.Tensor:
        return state.x

    def step(
        self, state: DetsgradGtState, grads: torch.Tensor, iteration: int, transport: Transport
    ) -> DetsgradGtState:
        if state.grad_memory is None or state.scratch is None:
            state.tracker.copy_(grads)
            state = state._replace(grad_memory=grads.clone(), scratch=torch.empty_like(state.pair))
        else:
            # m <- mu m + (1 - mu) g; y <- y + (m_new - m_old): grads becomes m_new - m_old.
            grads.sub_(state.grad_memory).mul_(1.0 - self.momentum)
            state.grad_memory.add_(grads)
            state.tracker.add_(grads)
        pair, x, y = state.pair, state.x, state.tracker
        transport.mix(self.laplacian, out=pair, scale=-self.consensus_step(iteration))
        alpha = self.gradient_step(iteration)
        x.add_(y, alpha=-alpha)
        drift = torch.sub(pair, transport.last_sent, out=state.scratch)
        sent = half_triggers(drift, self.v0 * alpha, self.vy)
        if self.compressor is None:
            transport.broadcast(sent.any(1), pair)
            return state
        state = with_warm(state)
        message = Message(self.seed, transport.agents, iteration)
        publish_halves(transport, self.compressor, drift, sent, message, state)
        return state
