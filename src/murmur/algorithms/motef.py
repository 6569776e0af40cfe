"""MoTEF: BEER's compressed model and tracker messages, with a tracker of momentum.

Islamov, Gao, Stich, "Towards Faster Decentralized Stochastic Optimization with
Communication Compression" (MoTEF: Momentum Tracking and Error Feedback), ICLR 2025,
arXiv 2405.20114. Every agent i keeps its model x_i, a momentum m_i of its
stochastic gradients, a tracker v_i of the network's average momentum, and public
estimates h_i (of x_i) and g_i (of v_i) that it and its neighbours hold alike. Each
step, with W the mixing matrix, C the compressor, gamma the consensus step, eta_k the
learning rate and lambda in (0, 1] the momentum's weight of a new gradient::

    m_i' <- (1 - lambda) m_i + lambda grad_i(x_i; batch k)
    v_i  <- v_i + gamma sum_j w_ij (g_j - g_i) + m_i' - m_i
    x_i  <- x_i + gamma sum_j w_ij (h_j - h_i) - eta_k v_i
    send C(v_i - g_i) and C(x_i - h_i); every holder adds them to g_i and h_i

in murmur's order of BEER (one exchange a step carries both messages; the tracker's
half of step k - 1 is taken at step k). The trackers sum to the momenta's sum at
every step, whatever the compressor drops; what the tracker takes in each step is
lambda (grad_i - m_i), about lambda times BEER's change grad_i - grad_i', so
the compressed difference v_i - g_i is smaller and its error is too. lambda = 1 is
BEER step for step.

The momentum and the tracker start at the first stochastic gradient (m = v = grad at
step 0), as BEER's tracker does, so that sum_i v_i = sum_i m_i from the start. The
authors' code starts v at the full-batch gradient of the initial model and m at
zero, which leaves that first gradient in the trackers' sum for good;
``benchmarks/motef_reference.py`` runs their update from both starts.

Both halves are messages of their own: two a step, both counted, at float32, with
the compressor's exact encoded size (the authors' notebook counts one message a step).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from murmur.algorithms.beer import Beer, BeerConfig
from murmur.algorithms.protocols import BuildContext
from murmur.errors import UsageError
from murmur.topology import Graph


@dataclass(frozen=True)
class MotefConfig(BeerConfig):
    """Parameters of MoTEF: BEER's, and the momentum's weight of a new gradient."""

    name = "motef"
    lam: float = 0.1
    """lambda in (0, 1]: m <- (1 - lambda) m + lambda grad; 1 is BEER."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.lam <= 1:
            raise UsageError(f"algorithm.lam must be in (0, 1], not {self.lam:g}")


class Motef(Beer):
    """MoTEF over a fixed graph; see the module docstring."""

    def __init__(self, config: MotefConfig, graph: Graph, context: BuildContext) -> None:
        super().__init__(config, graph, context)
        self.lam = config.lam

    def track(
        self, tracker: torch.Tensor, grads: torch.Tensor, memory: torch.Tensor, first: bool
    ) -> None:
        """v += m' - m with m' = (1 - lambda) m + lambda grad; ``memory`` is m, which
        the ``first`` step sets to the gradient (lambda = 1 once)."""
        lam = 1.0 if first else self.lam
        tracker.sub_(memory)
        memory.mul_(1 - lam).add_(grads, alpha=lam)
        tracker.add_(memory)
