"""Decentralized SSFN, synchronous: consensus ADMM with gossip averaging.

Liang et al., arXiv 2009.13982 (docs/methods/ssfn.md). Node m holds
its shard's layer data (G_m, C_m); per layer, every ADMM iteration is

    O_m   = (C_m + (Z_m - Lam_m) / mu) (G_m + I / mu)^-1      local, closed form
    Z_m   = prox( node m's gossip estimate of mean_j (O_j + Lam_j) )
    Lam_m = Lam_m + O_m - Z_m

where the estimate comes from rounds of mixing with a doubly stochastic H on the
graph (Metropolis weights: 1/(d+1) on a d-regular graph), and prox is the
projection onto ||O||_F <= eps (layers >= 1) or the shrinkage of the ridge
(layer 0). Every round waits for the slowest node and message.

With ``warm_start`` a phase starts from the node's previous estimate plus the change of
its own value, so the estimates keep tracking the average of the current values
(the mixing is doubly stochastic, so their average is always exactly that) and
start each phase nearly agreed once ADMM settles.

How long each phase runs: a fixed ``gossip_rounds``, or with "auto" until the
estimates agree within ``consensus_tolerance``: a round that moves the stack of
estimates E by ||H E - E|| bounds their distance to consensus by
||H E - E|| / (1 - lambda_2(H)), so gossip stops once that bound is at most the
tolerance times ||E|| (at most ``gossip_cap`` rounds). Mixing on a sparse graph
slows as it grows (on a ring 1 - lambda_2 ~ 1/N^2), and so does every phase.
ADMM stops once its relative primal and dual residuals, summed over the nodes,
are at most ``tolerance`` (at most ``admm_iterations`` iterations). Both sums are
the only global numbers a node needs: one all-reduce per round in the
distributed runtime; the virtual clock counts them as free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from murmur.algorithms.protocols import (
    LayerNetwork,
    LayerProblem,
    LayerSolution,
    RoundsWork,
    Transport,
)
from murmur.algorithms.ssfn import (
    LayerwiseConfig,
    consensus_prox,
    converged,
    layer_step,
    matmul_flops,
    relative_residual,
    residual_of,
    tolerance_met,
)
from murmur.errors import UsageError
from murmur.topology import Graph, as_sparse, mixing_matrix


@dataclass(frozen=True)
class DssfnConfig(LayerwiseConfig):
    """Synchronous decentralized SSFN."""

    name = "dssfn"
    gossip_rounds: int | Literal["auto"] = "auto"
    """Gossip rounds per ADMM iteration (B), or "auto": until the nodes agree within
    ``consensus_tolerance``."""
    consensus_tolerance: float = 1e-5
    """With auto rounds: the bound on the relative distance of the estimates to their
    average at which a gossip phase stops."""
    gossip_cap: int = 5000
    """With auto rounds: the most rounds of one gossip phase."""
    warm_start: bool = True
    """Each gossip phase starts from the previous phase's estimates plus the change of
    the node's own value (dynamic average consensus), not from the own value alone: the
    average is the same, but as ADMM settles the estimates start nearly agreed, so auto
    rounds need few rounds. False: every phase starts afresh, as in the paper."""
    weights: Literal["metropolis", "uniform"] = "metropolis"
    """Gossip mixing matrix H (uniform = 1/(d+1), regular graphs only)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.gossip_rounds != "auto" and self.gossip_rounds < 1:
            raise UsageError(
                f'algorithm.gossip_rounds must be at least 1 or "auto", not {self.gossip_rounds}'
            )
        if not 0 < self.consensus_tolerance < 1:
            raise UsageError(
                f"algorithm.consensus_tolerance must be in (0, 1), not {self.consensus_tolerance}"
            )
        if self.gossip_cap < 1:
            raise UsageError(f"algorithm.gossip_cap must be at least 1, not {self.gossip_cap}")


def spectral_gap(mixing: torch.Tensor) -> float:
    """1 - lambda_2 of a symmetric doubly stochastic H: how fast gossip mixes."""
    values = torch.linalg.eigvalsh(mixing.to(torch.float64))
    return float(1.0 - values[-2]) if len(values) > 1 else 1.0


class SyncSolver:
    """Consensus ADMM over the graph, every node in lockstep."""

    def __init__(self, config: DssfnConfig, graph: Graph) -> None:
        self.config = config
        self.rounds = config.gossip_rounds
        self.cap = config.admm_iterations
        self.tolerance = config.tolerance
        self.gossip_cap = config.gossip_cap
        self.warm_start = config.warm_start
        dense = mixing_matrix(graph, config.weights)
        self.mixing = as_sparse(dense, dtype=torch.float64)
        self.agreement = config.consensus_tolerance * spectral_gap(dense)
        """Stop gossip once ||H E - E|| <= this * ||E||."""
        self.degrees = graph.degrees().tolist()

    def solve(self, problem: LayerProblem, network: LayerNetwork) -> LayerSolution:
        """Gossip goes through ``network.transport_for``, the stopping rules' sums
        through ``network.total``."""
        grams, crosses, regularizer = problem.grams, problem.crosses, problem.regularizer
        local, classes, width = crosses.shape
        nodes = network.graph.agents
        mu = layer_step(self.config, regularizer)
        identity = torch.eye(width, dtype=grams.dtype)
        inverses = torch.cholesky_inverse(torch.linalg.cholesky(grams + identity / mu))
        transport = network.transport_for(classes * width, grams.dtype)
        consensus = torch.zeros_like(crosses)
        dual = torch.zeros_like(crosses)
        estimate = last = None
        iterations = rounds = 0
        residuals = [float("inf")] * local
        while iterations < self.cap:
            outputs = torch.bmm(crosses + (consensus - dual) / mu, inverses)
            own = (outputs + dual).view(local, -1)
            start = _gossip_start(own, estimate, last, self.warm_start)
            estimate, used = self._gossip(transport, start, network)
            last = own
            rounds += used
            previous = consensus
            consensus = consensus_prox(estimate.view_as(crosses).clone(), regularizer, mu, nodes)
            dual += outputs - consensus
            iterations += 1
            squares = relative_residual(outputs, consensus, previous)
            if self.tolerance > 0:  # one number for the whole network
                residuals = [residual_of(network.total(squares))] * local
                if tolerance_met(residuals[0], self.tolerance):
                    break
            elif iterations == self.cap:  # a fixed count: each node's own, nothing to agree
                residuals = [residual_of(row) for row in squares]
        factor_flops = float(width) ** 3
        network.work_in_rounds(
            RoundsWork(
                setup_flops=[flops + factor_flops for flops in problem.setup_flops],
                update_flops=matmul_flops(classes, width, width),
                mix_flops=[2.0 * (degree + 1) * classes * width for degree in self.degrees],
                message_bytes=classes * width * grams.element_size(),
                rounds=rounds,
                iterations=iterations,
            )
        )
        return LayerSolution(
            outputs=consensus,
            steps=[iterations] * local,
            rounds=[rounds] * local,
            residual=residuals,
            converged=[converged(residual, self.tolerance) for residual in residuals],
        )

    def _gossip(
        self, transport: Transport, estimate: torch.Tensor, network: LayerNetwork
    ) -> tuple[torch.Tensor, int]:
        """Mix ``estimate`` (local nodes, k): a fixed number of rounds, or until the
        nodes agree; returns the estimate and the rounds used."""
        if network.graph.agents == 1:
            return estimate, 0
        everyone = torch.ones(estimate.shape[0], dtype=torch.bool)
        fixed = self.rounds != "auto"
        limit = self.gossip_cap if self.rounds == "auto" else self.rounds
        used = 0
        while used < limit:
            transport.broadcast(everyone, estimate)
            mixed = torch.zeros_like(estimate)
            transport.mix(self.mixing, out=mixed)
            used += 1
            if not fixed:
                squares = torch.stack(
                    [(mixed - estimate).square().sum(1), mixed.square().sum(1)], dim=1
                )
                moved, size = (float(value) for value in network.total(squares))
                if moved <= (self.agreement**2) * size:
                    estimate = mixed
                    break
            estimate = mixed
        return estimate, used


def _gossip_start(
    own: torch.Tensor, estimate: torch.Tensor | None, last: torch.Tensor | None, warm: bool
) -> torch.Tensor:
    """Where an iteration's gossip starts: the node's own value, or with ``warm`` (once
    there is a last estimate) the last estimate moved by what the own value moved."""
    if estimate is None or last is None or not warm:
        return own
    return estimate + (own - last)
