"""Asynchronous decentralized SSFN: ARock on the edge-split consensus ADMM.

Liang et al., arXiv 2004.05082; ARock: Peng, Xu, Yan, Yin, arXiv 1506.02396.
Each layer's problem min_O sum_m f_m(O) (f_m: node m's least squares plus its
share of the regularizer) is split over the edges: O_i = y_e = O_j for every
edge e = (i, j). ADMM on that split is a fixed-point iteration z = T z in one
variable z_{e,i} per edge end; with gamma = 2 / mu (2 / mu0 for layer 0's ridge):

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

A node is settled once its fixed-point residual ||z_i - T(z)_i|| / ||z_i||
after its latest update is at most ``tolerance``, or once it has made
``admm_iterations`` updates (the cap); every push says whether its sender is
settled (the stamp is 2 x update number + settled, so it still only grows). A
node whose neighbours are all settled keeps updating without news until it is
settled too (its inbox no longer moves, so its blocks converge); a node that is
settled and hears that every neighbour is too is done with the layer and starts
the next one on its own, whatever the rest of the network is doing. A slow node
thus gets answers from its faster neighbours for as long as it needs them, and
nobody ever waits for a round to end.

The same :class:`ArockNode` state machine and the same rule run every node on
the simulator's event loop (``murmur.sim.arock``), or one node per process in
the distributed runtime (``murmur.distributed.arock``), where its pushes go through a
push channel; there a neighbour that fails is dropped (its edge leaves the
problem) and the node carries on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from murmur.algorithms.protocols import AsyncNode, AsyncWork, LayerNetwork, LayerSolution
from murmur.algorithms.ssfn import (
    Ball,
    LayerwiseConfig,
    Regularizer,
    converged,
    layer_step,
    matmul_flops,
    tolerance_met,
)
from murmur.errors import UsageError
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
    rotated: torch.Tensor,
    curvature: torch.Tensor,
    basis: torch.Tensor,
    radius: float | None,
    start: float = 0.0,
    outside: tuple[torch.Tensor, float] | None = None,
) -> tuple[torch.Tensor, float]:
    """argmin tr(X diag-form) : X = W diag(1 / (curvature + 2 nu)) U^T with ||X||_F <= radius.

    ``rotated`` is W = V U with V = 2C - S (Q, n), ``curvature`` the diagonal a_k > 0
    of the quadratic in the eigenbasis U (``basis``). When U spans only part of the
    space (the range of a low-rank G), ``outside`` is (V, c): the quadratic's
    curvature is the same c > 0 on all the rest, where X = V_rest / (c + 2 nu), so
    X = V / (c + 2 nu) + W diag(1 / (a + 2 nu) - 1 / (c + 2 nu)) U^T.

    nu >= 0 is the multiplier of the norm bound, found by Newton's method on
    phi(nu) = 1/||X(nu)|| - 1/radius, which is concave and increasing: from the
    left of its root the iteration converges monotonically, and from ``start`` on
    its right (the last update's multiplier, usually within a hair of the new one)
    the first step lands on the left. Returns X and nu.
    """
    weights = rotated.square().sum(dim=0).numpy()
    values = curvature.numpy()
    if outside is not None:
        whole, rest = outside
        remainder = max(float(whole.square().sum()) - float(weights.sum()), 0.0)
        weights, values = np.append(weights, remainder), np.append(values, rest)
    shift = 0.0
    if radius is not None and float(np.sqrt((weights / values**2).sum())) > radius:
        shift = _ball_multiplier(weights, values, radius, start)
    scale = curvature + 2.0 * shift
    if outside is None:
        return (rotated / scale) @ basis.T, shift
    level = rest + 2.0 * shift
    return torch.addmm(whole / level, rotated * (1.0 / scale - 1.0 / level), basis.T), shift


def _ball_multiplier(
    weights: np.ndarray, curvature: np.ndarray, radius: float, start: float
) -> float:
    """The root nu > 0 of ||W diag(1 / (a + 2 nu))|| = radius (see ball_constrained_solve)."""
    shift = max(start, 0.0)
    for _ in range(100):
        denominators = curvature + 2.0 * shift
        square = float((weights / denominators**2).sum())
        norm = square**0.5
        if abs(norm - radius) <= 1e-13 * radius:
            break
        derivative = -4.0 * float((weights / denominators**3).sum())
        # d/dnu (1/norm) = -derivative / (2 norm^3)
        step = (1.0 / norm - 1.0 / radius) / (-derivative / (2.0 * square * norm))
        shift = max(shift - step, 0.0)
    return shift


class ArockNode:
    """Node i's part of one layer, as a state machine (:class:`AsyncNode`): its edge
    blocks z_{e,j}, the blocks z_{e,i} its neighbours last pushed, its update count
    and its closed-form update. The runtime tells it what arrived (``receive``) and
    who failed (``drop``), asks it what to do next (``next_action``) and carries the
    blocks ``update`` returns, with ``stamp``. The same object serves the simulated
    network and a real process."""

    def __init__(
        self,
        index: int,
        gram: torch.Tensor,
        cross: torch.Tensor,
        neighbours: list[int],
        regularizer: Regularizer,
        nodes: int,
        gamma: float,
        eta: float,
        cap: int,
        tolerance: float = 0.0,
    ) -> None:
        self.index = index
        values, basis = torch.linalg.eigh(gram)
        self.ridge = 0.0 if isinstance(regularizer, Ball) else regularizer.lam / nodes
        self.radius = regularizer.radius if isinstance(regularizer, Ball) else None
        self.gamma, self.eta, self.cap, self.tolerance = gamma, eta, cap, tolerance
        # G = Y^T Y has rank at most the node's samples: on the rest of the space the
        # update's curvature is the same constant, so only G's range needs the basis
        # (on a shard of 26 samples and 522 features, 20 times fewer flops).
        kept = values > _RANK_CUTOFF * float(values.max().clamp(min=0.0))
        self.reduced = bool(kept.sum() < len(values))
        self.values = values[kept] if self.reduced else values.clamp(min=0.0)
        self.basis = basis[:, kept] if self.reduced else basis
        self.cross2 = 2.0 * cross
        self.own = {j: torch.zeros_like(cross) for j in neighbours}
        """z_{e,j} for each edge e = (i, j): what this node pushes to j."""
        self.inbox = {j: torch.zeros_like(cross) for j in neighbours}
        """z_{e,i} as neighbour j last pushed it."""
        self.stamps = dict.fromkeys(neighbours, -1)
        """Each neighbour's newest stamp heard (2 x update number + settled; -1: nothing
        yet)."""
        self.updates = 0
        self.residual = float("inf")
        """||z_i - T(z)_i|| / ||z_i|| at the latest update."""
        self.fresh = True
        """Something arrived since the current update began (a node starts at once)."""
        self.finished = False
        self.x = torch.zeros_like(cross)
        self.shift = 0.0
        """The norm bound's multiplier at the latest update."""

    def rest_curvature(self, degree: int) -> float:
        """The update's curvature where G is 0: gamma per edge plus twice the ridge share."""
        return self.gamma * degree + 2.0 * self.ridge

    @property
    def neighbours(self) -> list[int]:
        return list(self.own)

    @property
    def solution(self) -> torch.Tensor:
        return self.x

    @property
    def blocks(self) -> dict[int, torch.Tensor]:
        return self.own

    @property
    def settled(self) -> bool:
        """The latest update met the tolerance, or the cap is reached."""
        return self.updates >= self.cap or (
            self.updates > 0 and tolerance_met(self.residual, self.tolerance)
        )

    @property
    def stamp(self) -> int:
        """What the latest update's pushes carry: 2 x its number (from 0) + settled."""
        return 2 * (self.updates - 1) + int(self.settled)

    def receive(self, sender: int, stamp: int, block: torch.Tensor) -> bool:
        """Take neighbour ``sender``'s block with its ``stamp``; an older message never
        overwrites a newer one, and nothing is taken once the layer is done."""
        if self.finished or sender not in self.stamps or stamp <= self.stamps[sender]:
            return False
        self.stamps[sender] = stamp
        self.inbox[sender] = block.view_as(self.cross2)
        self.fresh = True
        return True

    def drop(self, neighbour: int) -> None:
        """Neighbour ``neighbour`` failed: its edge leaves the problem."""
        self.own.pop(neighbour, None)
        self.inbox.pop(neighbour, None)
        self.stamps.pop(neighbour, None)

    def waiting_on(self) -> list[int]:
        """The neighbours not known to be settled."""
        return [j for j, stamp in self.stamps.items() if not _settled(stamp)]

    def next_action(self) -> str:
        """Done once this node and every neighbour are settled; update on news, or with
        no news once every neighbour is settled (they only answer then); else wait."""
        calm = not self.waiting_on()
        if self.settled and calm:
            self.finished = True
            return "done"
        if self.fresh or calm:
            return "update"
        return "wait"

    def update(self) -> dict[int, torch.Tensor]:
        """Solve for x_i from the inbox, relax the own blocks; returns them to push."""
        self.fresh = False
        incoming = sum(self.inbox.values(), torch.zeros_like(self.cross2))
        whole = self.cross2 - incoming
        rest = self.rest_curvature(len(self.own))
        # With no edge left and no ridge (rest 0) the update is flat off G's range, where
        # V = 2C has no part: the minimum-norm solution lives on the range alone.
        outside = (whole, rest) if self.reduced and rest > 0 else None
        self.x, self.shift = ball_constrained_solve(
            whole @ self.basis,
            2.0 * self.values + rest,
            self.basis,
            self.radius,
            self.shift,
            outside,
        )
        # z - eta (z - T(z)) = z - (eta / 2) (z + z_{e,i} + 2 gamma x_i), with T(z) as above
        moved = size = 0.0
        pull = (2.0 * self.gamma) * self.x
        for j, block in self.own.items():
            step = (block + self.inbox[j] + pull).mul_(-0.5 * self.eta)
            new = block + step
            moved += float(torch.vdot(step.view(-1), step.view(-1)))
            size += float(torch.vdot(new.view(-1), new.view(-1)))
            self.own[j] = new
        self.updates += 1
        self.residual = (moved / max(size, 1e-300)) ** 0.5 / self.eta if self.own else 0.0
        return self.own


_RANK_CUTOFF = 1e-10
"""Eigenvalues of G below this fraction of the largest count as 0 (G's null space)."""


def _settled(stamp: int) -> bool:
    return stamp >= 0 and stamp % 2 == 1


class AsyncSolver:
    """ARock over the graph: one :class:`ArockNode` per node of this process, driven
    by the network (all nodes on the simulator's event loop, or this process's node
    against its neighbours' processes); see the module docstring."""

    def __init__(self, config: DssfnAsyncConfig, graph: Graph) -> None:
        self.config = config
        self.eta = config.eta
        self.cap = config.admm_iterations
        self.tolerance = config.tolerance
        self.graph = graph

    def solve(
        self,
        grams: torch.Tensor,
        crosses: torch.Tensor,
        regularizer: Regularizer,
        setup_flops: list[float],
        network: LayerNetwork,
    ) -> LayerSolution:
        _, classes, width = crosses.shape
        live = network.live_neighbours
        nodes = [
            ArockNode(
                index,
                grams[local],
                crosses[local],
                live(index),
                regularizer,
                self.graph.agents,
                2.0 / layer_step(self.config, regularizer),
                self.eta,
                self.cap,
                self.tolerance,
            )
            for local, index in enumerate(network.local_nodes)
        ]
        work = AsyncWork(
            setup_flops=[flops + 4.0 * float(width) ** 3 for flops in setup_flops],
            # two dense (Q, n) x (n, n) products, whatever shortcut a node takes: as for
            # synchronous dSSFN's update (which could take the same one), like for like
            update_flops=2 * matmul_flops(classes, width, width),
            values=classes * width,
            dtype=crosses.dtype,
        )
        driven: list[AsyncNode] = list(nodes)  # the same nodes, as the protocol sees them
        network.run_async(driven, work)
        return LayerSolution(
            outputs=torch.stack([node.solution for node in nodes]),
            steps=[node.updates for node in nodes],
            rounds=[0] * len(nodes),
            residual=[node.residual for node in nodes],
            converged=[converged(node.residual, self.tolerance) for node in nodes],
        )
