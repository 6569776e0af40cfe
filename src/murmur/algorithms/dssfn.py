"""Decentralized SSFN, synchronous: consensus ADMM with gossip averaging.

Liang et al., arXiv 2009.13982 (docs/ALGORITHMS.md, section 3). Node m holds
its shard's layer data (G_m, C_m); per layer, every ADMM iteration is

    O_m   = (C_m + (Z_m - Lam_m) / mu) (G_m + I / mu)^-1      local, closed form
    Z_m   = prox( node m's gossip estimate of mean_j (O_j + Lam_j) )
    Lam_m = Lam_m + O_m - Z_m

where the estimate comes from ``gossip_rounds`` rounds of mixing with a doubly
stochastic H on the graph (Metropolis weights: 1/(d+1) on a d-regular graph),
and prox is the projection onto ||O||_F <= eps (layers >= 1) or the shrinkage
of the ridge (layer 0). Every round waits for the slowest node and message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from murmur.algorithms.protocols import LayerNetwork, RoundsWork
from murmur.algorithms.ssfn import (
    LayerwiseConfig,
    Regularizer,
    consensus_prox,
    matmul_flops,
)
from murmur.errors import UsageError
from murmur.topology import Graph, as_sparse, mixing_matrix


@dataclass(frozen=True)
class DssfnConfig(LayerwiseConfig):
    """Synchronous decentralized SSFN."""

    name = "dssfn"
    gossip_rounds: int = 10
    """Gossip rounds per ADMM iteration (B); more rounds, closer to exact averaging."""
    weights: Literal["metropolis", "uniform"] = "metropolis"
    """Gossip mixing matrix H (uniform = 1/(d+1), regular graphs only)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.gossip_rounds < 1:
            raise UsageError(
                f"algorithm.gossip_rounds must be at least 1, not {self.gossip_rounds}"
            )


class SyncSolver:
    """Consensus ADMM over the graph, every node in lockstep."""

    def __init__(self, config: DssfnConfig, graph: Graph) -> None:
        self.mu = config.mu
        self.rounds = config.gossip_rounds
        self.iterations_per_layer = config.admm_iterations
        self.mixing = as_sparse(mixing_matrix(graph, config.weights), dtype=torch.float64)
        self.degrees = graph.degrees().tolist()

    def solve(
        self,
        grams: torch.Tensor,
        crosses: torch.Tensor,
        regularizer: Regularizer,
        setup_flops: list[float],
        network: LayerNetwork,
    ) -> torch.Tensor:
        """``grams``, ``crosses``: the layer data of the nodes in this process (all of
        them in the simulator, one in the distributed runtime); gossip goes through
        ``network.transport_for``."""
        local, classes, width = crosses.shape
        nodes = network.graph.agents
        identity = torch.eye(width, dtype=grams.dtype)
        inverses = torch.cholesky_inverse(torch.linalg.cholesky(grams + identity / self.mu))
        transport = network.transport_for(classes * width, grams.dtype)
        everyone = torch.ones(local, dtype=torch.bool)
        rounds = self.rounds if nodes > 1 else 0
        consensus = torch.zeros_like(crosses)
        dual = torch.zeros_like(crosses)
        for _ in range(self.iterations_per_layer):
            outputs = torch.bmm(crosses + (consensus - dual) / self.mu, inverses)
            estimate = (outputs + dual).view(local, -1)
            for _ in range(rounds):
                transport.broadcast(everyone, estimate)
                estimate = torch.zeros_like(estimate)
                transport.mix(self.mixing, out=estimate)
            consensus = consensus_prox(estimate.view_as(crosses), regularizer, self.mu, nodes)
            dual += outputs - consensus
        factor_flops = float(width) ** 3
        network.work_in_rounds(
            RoundsWork(
                setup_flops=[flops + factor_flops for flops in setup_flops],
                update_flops=matmul_flops(classes, width, width),
                mix_flops=[2.0 * (degree + 1) * classes * width for degree in self.degrees],
                message_bytes=classes * width * grams.element_size(),
                rounds=rounds,
                iterations=self.iterations_per_layer,
            )
        )
        return consensus
