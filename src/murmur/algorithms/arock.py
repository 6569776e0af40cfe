"""Asynchronous decentralized SSFN: ARock on the edge-split consensus ADMM.

Liang et al., arXiv 2004.05082; ARock: Peng, Xu, Yan, Yin, arXiv 1506.02396.
Each layer's problem min_O sum_m f_m(O) (f_m: node m's least squares plus its
share of the regularizer) is split over the edges: O_i = y_e = O_j for every
edge e = (i, j). ADMM on that split is a fixed-point iteration z = T z in one
variable z_{e,i} per edge end; with gamma = 2 / mu:

    x_i       = argmin_x f_i(x) + (gamma d_i / 2) ||x||^2 + < sum_{e at i} z_{e,i}, x >
    T(z)_{e,j} = (z_{e,j} - z_{e,i}) / 2 - gamma x_i            for every edge e = (i, j)

Node i's block is {z_{e,j}: its edges}: the values only x_i changes. When node
i wakes it reads the z_{e,i} its neighbours last pushed (possibly stale),
solves for x_i in closed form (an eigendecomposition of G_i, computed once per
layer, turns the norm bound into a scalar equation), relaxes its block,

    z_{e,j} <- z_{e,j} - eta (z_{e,j} - T(z)_{e,j}),

and pushes each z_{e,j} to j alone; it waits for no one: as soon as an update
is done it starts the next one with whatever has arrived. Only when nothing at
all has arrived since its last update does it sleep until the next message
(its x_i would not change), and not even then once every neighbour has made
its quota, since those send only in answer. At a fixed point every x_i is
the same minimizer of sum_m f_m, the centralized solution.

Each node makes at least ``admm_iterations`` updates per layer (its quota).
After that it only answers news, until every neighbour has made its quota too
(each message carries its sender's update count); then it starts the next
layer on its own, whatever the rest of the network is doing. A slow node thus
gets answers from its faster neighbours for as long as it needs them, and
nobody ever waits for a round to end.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from murmur.algorithms.ssfn import Ball, LayerwiseConfig, Regularizer, matmul_flops
from murmur.errors import UsageError
from murmur.runtime.events import EventLoop
from murmur.topology import Graph


@dataclass(frozen=True)
class DssfnAsyncConfig(LayerwiseConfig):
    """Asynchronous decentralized SSFN (ARock)."""

    name = "dssfn-async"
    eta: float = 0.5
    """ARock relaxation step, in (0, 1]; 1 with no delays is plain edge ADMM."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.eta <= 1:
            raise UsageError(f"algorithm.eta must be in (0, 1], not {self.eta}")


def ball_constrained_solve(
    rotated: torch.Tensor, curvature: torch.Tensor, basis: torch.Tensor, radius: float | None
) -> torch.Tensor:
    """argmin tr(X diag-form) : X = W diag(1 / (curvature + 2 nu)) U^T with ||X||_F <= radius.

    ``rotated`` is W = (2C - S) U (Q, n), ``curvature`` the diagonal a_k > 0 of the
    quadratic in the eigenbasis U (``basis``). nu >= 0 is the multiplier of the
    norm bound, found by Newton's method on 1/||X(nu)|| - 1/radius (concave and
    increasing in nu, so the iteration from nu = 0 converges monotonically).
    """
    weights = rotated.square().sum(dim=0)
    scale = curvature
    if radius is not None:
        norm = float((weights / scale.square()).sum().sqrt())
        if norm > radius:
            shift = 0.0
            for _ in range(100):
                denominators = curvature + 2.0 * shift
                square = float((weights / denominators.square()).sum())
                norm = square**0.5
                if abs(norm - radius) <= 1e-13 * radius:
                    break
                derivative = -4.0 * float((weights / denominators**3).sum())
                # d/dnu (1/norm) = -derivative / (2 norm^3)
                step = (1.0 / norm - 1.0 / radius) / (-derivative / (2.0 * square * norm))
                shift = max(shift - step, 0.0)
            scale = curvature + 2.0 * shift
    return (rotated / scale) @ basis.T


class AsyncSolver:
    """ARock over the graph on the event loop; see the module docstring."""

    def __init__(self, config: DssfnAsyncConfig, graph: Graph) -> None:
        self.gamma = 2.0 / config.mu
        self.eta = config.eta
        self.iterations_per_layer = config.admm_iterations
        self.neighbors = [graph.neighbors(i) for i in range(graph.agents)]

    def solve(self, grams, crosses, regularizer: Regularizer, setup_flops, network):
        nodes, classes, width = crosses.shape
        # Nodes start this layer at different times; one loop per layer, on absolute times.
        clock = EventLoop(start=min(network.ready))
        compute = network.compute
        counters = network.counters
        ridge = 0.0 if isinstance(regularizer, Ball) else regularizer.lam / nodes
        radius = regularizer.radius if isinstance(regularizer, Ball) else None
        message_bytes = classes * width * crosses.element_size()
        message_seconds = network.links.seconds(message_bytes)
        update_flops = 2 * matmul_flops(classes, width, width)
        eigen_flops = 4.0 * float(width) ** 3

        own = [{j: torch.zeros_like(crosses[0]) for j in self.neighbors[i]} for i in range(nodes)]
        inbox = [{j: torch.zeros_like(crosses[0]) for j in self.neighbors[i]} for i in range(nodes)]
        stamps = [{j: -1 for j in self.neighbors[i]} for i in range(nodes)]
        done = [0] * nodes
        result = torch.zeros_like(crosses)
        spectra: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * nodes

        quota = self.iterations_per_layer
        # fresh[i]: node i has received something since its current update began.
        # idle[i]: node i waits for news rather than update again on the same inputs.
        fresh = [False] * nodes
        idle = [False] * nodes
        finished = [False] * nodes

        def deliver(receiver: int, sender: int, stamp: int, value: torch.Tensor) -> None:
            if finished[receiver] or stamp <= stamps[receiver][sender]:
                return  # an older message never overwrites a newer one
            stamps[receiver][sender] = stamp
            inbox[receiver][sender] = value
            fresh[receiver] = True
            if idle[receiver]:
                idle[receiver] = False
                wake(receiver)

        def wake(i: int) -> None:
            if spectra[i] is None:
                values, basis = torch.linalg.eigh(grams[i])
                spectra[i] = (values.clamp(min=0.0), basis)
            values, basis = spectra[i]
            fresh[i] = False
            degree = len(self.neighbors[i])
            incoming = sum(inbox[i].values(), torch.zeros_like(crosses[0]))
            rotated = (2.0 * crosses[i] - incoming) @ basis
            curvature = 2.0 * values + self.gamma * degree + 2.0 * ridge
            x = ball_constrained_solve(rotated, curvature, basis, radius)
            result[i] = x
            seconds = compute.seconds(i, update_flops)
            for j in self.neighbors[i]:
                block = own[i][j]
                target = (block - inbox[i][j]) / 2.0 - self.gamma * x
                own[i][j] = block - self.eta * (block - target)
                arrival = clock.now + seconds + message_seconds
                value, stamp = own[i][j], done[i]
                clock.at(arrival, lambda j=j, value=value, stamp=stamp: deliver(j, i, stamp, value))
            if degree:
                counters.record_event(i, degree, message_bytes)
            done[i] += 1
            clock.at(clock.now + seconds, lambda: after_update(i))

        def after_update(i: int) -> None:
            # A message's stamp is its sender's update count, so it tells whether the
            # sender has made its quota.
            mine = done[i] >= quota
            theirs = all(stamps[i][j] >= quota - 1 for j in self.neighbors[i])
            if mine and theirs:
                finished[i] = True
                network.ready[i] = clock.now
            elif fresh[i] or theirs:
                wake(i)
            else:
                idle[i] = True

        for i in range(nodes):
            start = network.ready[i] + compute.seconds(i, setup_flops[i] + eigen_flops)
            clock.at(start, lambda i=i: wake(i))
        clock.run()
        return result
