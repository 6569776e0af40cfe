"""BEER: decentralized SGD with compressed gradient tracking.

Zhao, Li, Li, Richtarik, Chi, "BEER: Fast O(1/T) Rate for Decentralized
Nonconvex Optimization with Communication Compression", NeurIPS 2022, arXiv
2201.13320. Every agent i keeps its model x_i, a tracker v_i of the network's
average gradient, and public estimates h_i (of x_i) and g_i (of v_i) that it and
its neighbours hold alike (:mod:`murmur.algorithms.estimates`). Each step, with
W the mixing matrix, C the compressor, gamma the consensus step and eta_k the
learning rate::

    v_i <- v_i + gamma sum_j w_ij (g_j - g_i) + grad_i(x_i; batch k) - grad_i(x_i'; batch k-1)
    x_i <- x_i + gamma sum_j w_ij (h_j - h_i) - eta_k v_i
    send C(v_i - g_i) and C(x_i - h_i); every holder adds them to g_i and h_i

(the paper's order, with the tracker's half of step k - 1 taken at step k: both
mixes read the estimates before this step's messages, so one exchange a step
carries both). Because sum_i (W - I) = 0, sum_i v_i = sum_i grad_i at every step
whatever the compressor drops: the trackers follow the average gradient, and an
agent whose own data hold one class steps the way the whole network would.

The model and the tracker are one row of 2P values, [x_i | v_i], whose estimates
[h_i | g_i] the transport holds; each half is compressed on its own and is its
own message (two a step, both counted, as the paper's two compressed messages).
The tracker starts at the first gradient (v = grad at step 0, g = 0) and h at the
initial model, which every agent knows (all start from the same seed). With C =
none and gamma = 1 this is gradient tracking (GT-DSGD). ``gamma = "auto"`` is
CHOCO-SGD's :func:`~murmur.algorithms.choco.auto_gamma`.

With event triggers (``v0``, ``vy`` > 0, DETSGRAD-GT's), an agent sends its model's
half only when ||x_i - h_i|| >= v0 eta_k and its tracker's only when ||v_i - g_i||
>= vy; what it does not send stays in the difference for later, and the trackers
still sum to the gradients' sum. v0 = vy = 0 (the default) sends both every step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from murmur.algorithms.choco import GossipConfig, GossipSetup, gossip_setup
from murmur.algorithms.estimates import Message, with_warm
from murmur.algorithms.protocols import BuildContext, Transport
from murmur.algorithms.tracking import (
    TrackedPair,
    half_triggers,
    model_and_tracker,
    publish_halves,
)
from murmur.errors import UsageError
from murmur.topology import Graph


@dataclass(frozen=True)
class BeerConfig(GossipConfig):
    """Parameters of BEER: CHOCO-SGD's mixing weights, consensus step and compressor,
    and event triggers on the two halves."""

    name = "beer"
    v0: float = 0.0
    """Model trigger: an agent sends C(x_i - h_i) once ||x_i - h_i|| reaches v0 eta_k (>= 0)."""
    vy: float = 0.0
    """Tracker trigger: it sends C(v_i - g_i) once ||v_i - g_i|| reaches vy (>= 0)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.v0 < 0 or self.vy < 0:
            raise UsageError("algorithm.v0 and algorithm.vy must be >= 0")


BeerState = TrackedPair
"""BEER's state: the tracker is v_i, ``grad_memory`` each agent's gradient of the step
before, and the transport's estimates are [h_i | g_i]."""


class Beer:
    """BEER over a fixed graph; see the module docstring."""

    def __init__(self, config: BeerConfig, graph: Graph, context: BuildContext) -> None:
        self.gradient_step = config.gradient_step()
        self.gossip: GossipSetup = gossip_setup(config, graph, context)
        self.seed = context.seed
        self.v0, self.vy = config.v0, config.vy

    def chosen_steps(self) -> dict[str, float]:
        return self.gossip.chosen_steps()

    def init(self, params: torch.Tensor) -> BeerState:
        return BeerState(pair=self.initial_sent(params))

    def initial_sent(self, params: torch.Tensor) -> torch.Tensor:
        return model_and_tracker(params)

    def params(self, state: BeerState) -> torch.Tensor:
        return state.x

    def step(
        self, state: BeerState, grads: torch.Tensor, iteration: int, transport: Transport
    ) -> BeerState:
        last, scratch = state.grad_memory, state.scratch
        first = last is None
        if last is None or scratch is None:
            last, scratch = torch.zeros_like(grads), torch.empty_like(state.pair)
            state = state._replace(grad_memory=last, scratch=scratch)
        state = with_warm(state)
        pair, x, v = state.pair, state.x, state.tracker
        gossip = self.gossip
        # [x | v] += gamma (W - I) [h | g], both read before this step's messages
        transport.mix(gossip.operator, out=pair, scale=gossip.gamma)
        self.track(v, grads, last, first)
        eta = self.gradient_step(iteration)
        x.add_(v, alpha=-eta)
        difference = torch.sub(pair, transport.last_sent, out=scratch)
        sent = half_triggers(difference, self.v0 * eta, self.vy)
        message = Message(self.seed, transport.agents, iteration)
        publish_halves(transport, gossip.compressor, difference, sent, message, state)
        return state

    def track(
        self, tracker: torch.Tensor, grads: torch.Tensor, memory: torch.Tensor, first: bool
    ) -> None:
        """Add to the ``tracker`` what the tracked gradient moved, and remember it in
        ``memory`` (zero before the ``first`` step): BEER tracks the raw gradients."""
        del first  # the zero memory makes the first step's change the gradient itself
        tracker.add_(grads).sub_(memory)
        memory.copy_(grads)
