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

The same :class:`ArockNode` and the same rule run every node on the simulator's
event loop, or one node per process in the distributed runtime, where its
pushes go through a :class:`PushChannel`; there a neighbour that fails is
dropped (its edge leaves the problem) and the node carries on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

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


class ArockNode:
    """Node i's part of one layer: its edge blocks z_{e,j}, the blocks z_{e,i} its
    neighbours last pushed, and its closed-form update. The same object serves the
    simulated network and a real process."""

    def __init__(
        self,
        gram: torch.Tensor,
        cross: torch.Tensor,
        neighbours: list[int],
        regularizer: Regularizer,
        nodes: int,
        gamma: float,
        eta: float,
    ) -> None:
        values, self.basis = torch.linalg.eigh(gram)
        self.values = values.clamp(min=0.0)
        self.cross2 = 2.0 * cross
        self.gamma, self.eta = gamma, eta
        self.ridge = 0.0 if isinstance(regularizer, Ball) else regularizer.lam / nodes
        self.radius = regularizer.radius if isinstance(regularizer, Ball) else None
        self.own = {j: torch.zeros_like(cross) for j in neighbours}
        """z_{e,j} for each edge e = (i, j): what this node pushes to j."""
        self.inbox = {j: torch.zeros_like(cross) for j in neighbours}
        """z_{e,i} as neighbour j last pushed it."""

    @property
    def neighbours(self) -> list[int]:
        return list(self.own)

    def update(self) -> torch.Tensor:
        """Solve for x_i from the inbox, relax the own blocks; returns x_i (Q, n)."""
        incoming = sum(self.inbox.values(), torch.zeros_like(self.cross2))
        rotated = (self.cross2 - incoming) @ self.basis
        curvature = 2.0 * self.values + self.gamma * len(self.own) + 2.0 * self.ridge
        x = ball_constrained_solve(rotated, curvature, self.basis, self.radius)
        for j, block in self.own.items():
            target = (block - self.inbox[j]) / 2.0 - self.gamma * x
            self.own[j] = block - self.eta * (block - target)
        return x

    def drop(self, neighbour: int) -> None:
        """Neighbour ``neighbour`` failed: its edge leaves the problem."""
        self.own.pop(neighbour, None)
        self.inbox.pop(neighbour, None)


def layer_done(updates: int, stamps: dict[int, int], quota: int) -> bool:
    """A node is done with a layer once it and every neighbour have made the quota of
    updates (``stamps``: each neighbour's newest update number, counted from 0)."""
    return updates >= quota and neighbours_done(stamps, quota)


def neighbours_done(stamps: dict[int, int], quota: int) -> bool:
    return all(stamp >= quota - 1 for stamp in stamps.values())


class PushChannel(Protocol):
    """One layer's messages of a node that runs in a process of its own."""

    neighbours: list[int]
    """The neighbours still there when the layer began."""

    def push(self, blocks: dict[int, torch.Tensor], stamp: int) -> None:
        """Send ``blocks[j]`` to each neighbour j, without waiting; a newer push to j
        replaces one not yet on the wire."""

    def news(self) -> dict[int, tuple[int, torch.Tensor]]:
        """The newest ``(stamp, block)`` from each neighbour heard since the last call."""

    def failed(self) -> list[int]:
        """Neighbours found gone since the last call (never listed twice)."""

    def wait(self, needed: list[int]) -> None:
        """Until news or a failure; a neighbour of ``needed`` silent past the
        deadline is then failed."""

    def close(self) -> None:
        """The layer is done here: tell the neighbours after the last pushes."""


class AsyncSolver:
    """ARock over the graph: every node on the event loop (simulator), or this
    process's node against its neighbours' processes; see the module docstring."""

    def __init__(self, config: DssfnAsyncConfig, graph: Graph) -> None:
        self.gamma = 2.0 / config.mu
        self.eta = config.eta
        self.iterations_per_layer = config.admm_iterations
        self.neighbors = [graph.neighbors(i) for i in range(graph.agents)]

    def solve(self, grams, crosses, regularizer: Regularizer, setup_flops, network):
        channel = network.pushes_for(crosses.shape[1] * crosses.shape[2], crosses.dtype)
        if channel is None:
            return self._simulate(grams, crosses, regularizer, setup_flops, network)
        return self._run_node(grams[0], crosses[0], regularizer, network, channel)[None]

    def _run_node(self, gram, cross, regularizer, network, channel: PushChannel) -> torch.Tensor:
        """This process's node: update as soon as there is news, push, repeat."""
        nodes = network.graph.agents
        node = ArockNode(
            gram,
            cross,
            channel.neighbours,
            regularizer,
            nodes,
            self.gamma,
            self.eta,
        )
        quota = self.iterations_per_layer
        stamps = dict.fromkeys(node.neighbours, -1)
        updates, fresh = 0, True
        x = torch.zeros_like(cross)
        while True:
            for j in channel.failed():
                node.drop(j)
                stamps.pop(j, None)
            for j, (stamp, block) in channel.news().items():
                if j in stamps and stamp > stamps[j]:
                    stamps[j] = stamp
                    node.inbox[j] = block.view_as(cross)
                    fresh = True
            if layer_done(updates, stamps, quota):
                break
            if fresh or neighbours_done(stamps, quota):
                fresh = False
                x = node.update()
                channel.push(node.own, updates)
                updates += 1
            else:
                channel.wait([j for j, stamp in stamps.items() if stamp < quota - 1])
        channel.close()
        return x

    def _simulate(self, grams, crosses, regularizer: Regularizer, setup_flops, network):
        nodes, classes, width = crosses.shape
        # Nodes start this layer at different times; one loop per layer, on absolute times.
        clock = EventLoop(start=min(network.ready))
        compute = network.compute
        counters = network.counters
        message_bytes = classes * width * crosses.element_size()
        message_seconds = network.links.seconds(message_bytes)
        update_flops = 2 * matmul_flops(classes, width, width)
        eigen_flops = 4.0 * float(width) ** 3

        states = [
            ArockNode(
                grams[i],
                crosses[i],
                self.neighbors[i],
                regularizer,
                nodes,
                self.gamma,
                self.eta,
            )
            for i in range(nodes)
        ]
        stamps = [dict.fromkeys(self.neighbors[i], -1) for i in range(nodes)]
        done = [0] * nodes
        result = torch.zeros_like(crosses)
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
            states[receiver].inbox[sender] = value
            fresh[receiver] = True
            if idle[receiver]:
                idle[receiver] = False
                wake(receiver)

        def wake(i: int) -> None:
            node = states[i]
            fresh[i] = False
            result[i] = node.update()
            seconds = compute.seconds(i, update_flops)
            arrival = clock.now + seconds + message_seconds
            for j, value in node.own.items():
                stamp = done[i]
                clock.at(arrival, lambda j=j, value=value, stamp=stamp: deliver(j, i, stamp, value))
            if node.own:
                counters.record_event(i, len(node.own), message_bytes)
            done[i] += 1
            clock.at(clock.now + seconds, lambda: after_update(i))

        def after_update(i: int) -> None:
            # A message's stamp is its sender's update count, so it tells whether the
            # sender has made its quota.
            if layer_done(done[i], stamps[i], quota):
                finished[i] = True
                network.ready[i] = clock.now
            elif fresh[i] or neighbours_done(stamps[i], quota):
                wake(i)
            else:
                idle[i] = True

        for i in range(nodes):
            begin = network.ready[i] + compute.seconds(i, setup_flops[i] + eigen_flops)
            clock.at(begin, lambda i=i: wake(i))
        clock.run()
        return result
