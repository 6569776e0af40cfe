"""CHOCO-SGD: decentralized SGD with compressed gossip.

Koloskova, Stich, Jaggi, "Decentralized Stochastic Optimization and Gossip
Algorithms with Compressed Communication", ICML 2019, arXiv 1902.00340.
Every agent i keeps its model x_i and the public estimates x^_j of itself and
its neighbours (:mod:`murmur.algorithms.estimates`). Each step::

    x_i  <- x_i - eta_k g_i(x_i)
    q_i   = C(x_i - x^_i);  send q_i to the neighbours
    x^_j <- x^_j + q_j                      for j in N_i and i itself
    x_i  <- x_i + gamma sum_j w_ij (x^_j - x^_i)

with eta_k = a / (eps k + 1)^d2 and W a doubly stochastic mixing matrix on the
graph. With C = none and gamma = 1 this is DSGD that adapts, then combines.
``gamma = "auto"`` is :func:`auto_gamma`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

import scipy.sparse
import torch

from murmur.algorithms import gossip_probe
from murmur.algorithms.compressors import (
    CompressionConfig,
    Compressor,
    NoCompression,
    WarmStarts,
    kept_share,
)
from murmur.algorithms.estimates import CompressedState, Message, Segments, sent_update, with_warm
from murmur.algorithms.protocols import BuildContext, Transport
from murmur.algorithms.schedules import SgdConfig, check_step
from murmur.errors import UsageError
from murmur.sections import Step
from murmur.topology import Graph, consensus_step, mixing_matrix, mixing_operator
from murmur.topology.spectra import DENSE_LIMIT, largest_eigenvalue


@dataclass(frozen=True)
class GossipConfig(CompressionConfig, SgdConfig):
    """What CHOCO-SGD and SPARQ-SGD share: mixing weights, consensus step, compressor."""

    weights: Literal["laplacian", "metropolis", "uniform"] = "metropolis"
    """Mixing matrix W: I - b L, Metropolis-Hastings, or 1/(d+1) (regular graphs)."""
    b: Step = "auto"
    """Consensus step of the Laplacian weights W = I - b L."""
    gamma: Step = "auto"
    """Consensus step on the estimates, in (0, 1]; "auto": see ``auto_gamma``."""
    compress: str = "topk"

    def mixing_weights(self) -> str:
        return self.weights

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.gamma != "auto" and not 0 < self.gamma <= 1:
            raise UsageError(f"algorithm.gamma must be in (0, 1] or 'auto', not {self.gamma:g}")
        check_step("algorithm.b", self.b)


@dataclass(frozen=True)
class ChocoConfig(GossipConfig):
    """Parameters of CHOCO-SGD."""

    name = "choco-sgd"


def auto_gamma(mixing: torch.Tensor, compressor: Compressor, parameters: int) -> float:
    """A consensus step for W and C that needs no tuning.

    First the rule: the largest step keeping I + gamma (W - I) positive
    semi-definite, 1 / lambda_max(I - W) capped at 1, times the share omega of a
    difference the compressor keeps (its ``typical_delta``: k / n for topk and
    randk, 1 / tau for qsgd, 2 / pi for the sign, 1 for none), raised to the
    power 1/2, measured on the talk-less runs. Then the check: while
    :func:`murmur.algorithms.gossip_probe.bounded` finds that compressed gossip
    grows at that step on this W, the step shrinks by 2^(1/4), at most 16 times
    (:func:`~murmur.algorithms.gossip_probe.supported_step`).
    """
    largest = _largest_of_identity_minus(mixing)
    step = min(1.0, 1.0 / largest) if largest > 0 else 1.0
    gamma = step * kept_share(compressor, parameters) ** 0.5
    if isinstance(compressor, NoCompression) or mixing.layout == torch.sparse_csr:
        return gamma  # no probe above DENSE_LIMIT agents: it simulates every agent densely
    return gossip_probe.supported_step(mixing, compressor, parameters, gamma)


def _largest_of_identity_minus(mixing: torch.Tensor) -> float:
    """lambda_max(I - W) of a dense W (eigvalsh) or a sparse CSR one (Lanczos)."""
    if mixing.layout != torch.sparse_csr:
        laplacian = torch.eye(mixing.shape[0], dtype=mixing.dtype) - mixing
        return float(torch.linalg.eigvalsh(laplacian)[-1])
    agents = mixing.shape[0]
    matrix = scipy.sparse.csr_array(
        (
            mixing.values().to(torch.float64).numpy(),
            mixing.col_indices().numpy(),
            mixing.crow_indices().numpy(),
        ),
        shape=(agents, agents),
    )
    return largest_eigenvalue(scipy.sparse.identity(agents, format="csr") - matrix)


class GossipSetup(NamedTuple):
    """The consensus operator gamma (W - I), sparse, and the compressor."""

    operator: torch.Tensor
    gamma: float
    compressor: Compressor
    segments: Segments
    beta: float | None = None
    """The Laplacian weights' step b (None: other weights)."""

    def chosen_steps(self) -> dict[str, float]:
        """gamma, and b where the weights have one."""
        steps = {"gamma": self.gamma}
        if self.beta is not None:
            steps["b"] = self.beta
        return steps


def gossip_setup(config: GossipConfig, graph: Graph, context: BuildContext) -> GossipSetup:
    beta = consensus_step(graph, config.b) if config.weights == "laplacian" else None
    if context.segments is None:
        raise ValueError(f"{config.name} needs the model's parameter tensors")
    compressor = config.compressor(context.segments.sizes, context.segments.shapes)
    gamma = float(config.gamma) if config.gamma != "auto" else 0.0
    if config.gamma == "auto":
        # Dense W (and the probe) up to DENSE_LIMIT agents, sparse above.
        mixing = (
            mixing_matrix(graph, config.weights, beta)
            if graph.agents <= DENSE_LIMIT
            else mixing_operator(graph, config.weights, beta, dtype=torch.float64)
        )
        gamma = auto_gamma(mixing, compressor, context.segments.total)
    difference = mixing_operator(graph, config.weights, beta, minus_identity=True)
    return GossipSetup(difference, gamma, compressor, Segments.whole(context.segments.total), beta)


class ChocoState(NamedTuple):
    x: torch.Tensor
    """Models, (agents, P). The estimates x^ are what the transport holds as sent."""
    warm: WarmStarts | None = None
    """The senders' warm starts (``lowrank``), kept from message to message."""


class Choco:
    """CHOCO-SGD over a fixed graph; see the module docstring."""

    def __init__(self, config: ChocoConfig, graph: Graph, context: BuildContext) -> None:
        self.gradient_step = config.gradient_step()
        self.gossip = gossip_setup(config, graph, context)
        self.seed = context.seed

    def chosen_steps(self) -> dict[str, float]:
        return self.gossip.chosen_steps()

    def init(self, params: torch.Tensor) -> ChocoState:
        return ChocoState(x=params.clone())

    def initial_sent(self, params: torch.Tensor) -> torch.Tensor:
        return params

    def params(self, state: ChocoState) -> torch.Tensor:
        return state.x

    def step(
        self, state: ChocoState, grads: torch.Tensor, iteration: int, transport: Transport
    ) -> ChocoState:
        state = with_warm(state)
        x = state.x
        x.add_(grads, alpha=-self.gradient_step(iteration))
        everyone = torch.ones(x.shape[0], 1, dtype=torch.bool, device=x.device)
        difference = torch.sub(x, transport.last_sent, out=grads)
        message = Message(self.seed, transport.agents, iteration)
        publish_and_mix(self.gossip, x, difference, everyone, (message, state), transport)
        return state


def publish_and_mix(
    gossip: GossipSetup,
    x: torch.Tensor,
    difference: torch.Tensor,
    sent: torch.Tensor,
    streams: tuple[Message, CompressedState],
    transport: Transport,
) -> None:
    """Send C(x - x^) where ``sent`` (agents, 1) says so, then step x towards the
    neighbours' estimates: x += gamma (W - I) X^. ``difference`` is x - x^; ``streams``:
    the message (whose draws the compressor uses) and the state with its warm starts."""
    message, state = streams
    transport.publish(
        sent_update(gossip.compressor, difference, sent, gossip.segments, message, state)
    )
    transport.mix(gossip.operator, out=x, scale=gossip.gamma)
