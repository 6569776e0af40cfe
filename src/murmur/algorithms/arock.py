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

from murmur.algorithms.protocols import (
    AsyncNode,
    AsyncWork,
    LayerNetwork,
    LayerProblem,
    LayerSolution,
)
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

    nu >= 0 is the multiplier of the norm bound (:func:`ball_multipliers`). Returns X
    and nu. One node's case of :func:`solve_batch`, which nodes' updates use.
    """
    whole, rest = outside if outside is not None else (None, 0.0)
    x, shift = solve_batch(
        rotated[None],
        curvature[None],
        basis[None],
        radius,
        np.array([start]),
        None if whole is None else (whole[None], rest),
    )
    return x[0], float(shift[0])


def solve_batch(
    rotated: torch.Tensor,
    curvature: torch.Tensor,
    bases: torch.Tensor,
    radius: float | None,
    starts: np.ndarray,
    outside: tuple[torch.Tensor, float] | None = None,
) -> tuple[torch.Tensor, np.ndarray]:
    """:func:`ball_constrained_solve` for B nodes at once: ``rotated`` (B, Q, K),
    ``curvature`` (B, K), the bases (B, n, K), the last multipliers ``starts``
    (B,), ``outside`` ((B, Q, n) V, c) or None. Each node's numbers are those it gets
    alone: one batched product per node, the rest row by row."""
    turned = rotated.numpy()
    weights = np.square(turned).sum(axis=1)
    values = curvature.numpy()
    if outside is not None:
        whole, rest = outside
        total = _row_squares(whole.view(len(whole), -1))
        remainder = np.maximum(total - weights.sum(axis=1), 0.0)
        weights = np.column_stack([weights, remainder])
        values = np.column_stack([values, np.full(len(values), rest)])
    shifts = np.zeros(len(values))
    if radius is not None:
        bound = np.sqrt((weights / values**2).sum(axis=1)) > radius
        if bound.any():
            shifts[bound] = ball_multipliers(weights[bound], values[bound], radius, starts[bound])
    inverse = 1.0 / (curvature.numpy() + 2.0 * shifts[:, None])
    if outside is None:
        return torch.bmm(torch.from_numpy(turned * inverse[:, None, :]), bases.mT), shifts
    level = 1.0 / (rest + 2.0 * shifts)
    coefficients = torch.from_numpy(turned * (inverse - level[:, None])[:, None, :])
    x = torch.bmm(coefficients, bases.mT)
    return x.addcmul_(outside[0], torch.from_numpy(level)[:, None, None]), shifts


def ball_multipliers(
    weights: np.ndarray, curvature: np.ndarray, radius: float, starts: np.ndarray
) -> np.ndarray:
    """Per row, the root nu > 0 of ||W diag(1 / (a + 2 nu))|| = radius, by Newton's
    method on phi(nu) = 1/||X(nu)|| - 1/radius, which is concave and increasing: from
    the left of its root the iteration converges monotonically, and from a start on
    its right (the last update's multiplier, usually within a hair of the new one) the
    first step lands on the left. Rows stop one by one, each after the steps it would
    take alone."""
    shifts = np.maximum(starts, 0.0)
    active = np.arange(len(shifts))
    for _ in range(100):
        denominators = curvature[active] + 2.0 * shifts[active, None]
        square = (weights[active] / denominators**2).sum(axis=1)
        norm = np.sqrt(square)
        moving = np.abs(norm - radius) > 1e-13 * radius
        active, square, norm = active[moving], square[moving], norm[moving]
        if not len(active):
            break
        derivative = -4.0 * (weights[active] / denominators[moving] ** 3).sum(axis=1)
        # d/dnu (1/norm) = -derivative / (2 norm^3)
        step = (1.0 / norm - 1.0 / radius) / (-derivative / (2.0 * square * norm))
        shifts[active] = np.maximum(shifts[active] - step, 0.0)
    return shifts


@dataclass(frozen=True)
class ArockRule:
    """The numbers of one layer's ARock rule, the same at every node: the ADMM
    penalty, the relaxation step, and when a node counts as settled."""

    gamma: float
    """The edge penalty gamma = 2 / mu (2 / mu0 for layer 0's ridge)."""
    eta: float
    """The relaxation step eta, in (0, 1]."""
    cap: int
    """The most updates a node makes in the layer (``algorithm.admm_iterations``)."""
    tolerance: float = 0.0
    """The fixed-point residual at which a node is settled; 0: only the cap settles it."""


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
        rule: ArockRule,
    ) -> None:
        self.index = index
        values, basis = torch.linalg.eigh(gram)
        self.ridge = 0.0 if isinstance(regularizer, Ball) else regularizer.lam / nodes
        self.radius = regularizer.radius if isinstance(regularizer, Ball) else None
        self.rule = rule
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
        self.pending: PendingUpdate | None = None
        """The update begun and not yet made (:meth:`begin_update`)."""
        self.banks: dict[str, torch.Tensor] = {}
        """Every node's ``basis``, ``values`` and ``cross2`` of the layer, stacked, where
        they share one shape; this node's are row ``slot``."""
        self.slot = 0

    def rest_curvature(self, degree: int) -> float:
        """The update's curvature where G is 0: gamma per edge plus twice the ridge share."""
        return self.rule.gamma * degree + 2.0 * self.ridge

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
        if self.pending is not None:
            raise RuntimeError(f"node {self.index}'s update is not made yet: relax() it first")
        return self.updates >= self.rule.cap or (
            self.updates > 0 and tolerance_met(self.residual, self.rule.tolerance)
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
        if self.pending is not None:
            raise RuntimeError(f"node {self.index} lost a neighbour during an update")
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
        relax([self.begin_update()])
        return self.own

    def begin_update(self) -> PendingUpdate:
        """Start an update on what has arrived so far: its inputs are read now, its
        numbers made by :func:`relax` (with other nodes' updates, in the simulator)
        before anything reads them."""
        if self.pending is not None:
            raise RuntimeError(f"node {self.index} began an update before its last one ended")
        self.fresh = False
        self.updates += 1
        neighbours = tuple(self.own)
        self.pending = PendingUpdate(
            self,
            neighbours,
            tuple(self.own[j] for j in neighbours),
            tuple(self.inbox[j] for j in neighbours),
        )
        return self.pending

    def pad_rank(self, rank: int) -> None:
        """Keep ``rank`` basis columns (zeros past G's range, whose weight is 0), so that
        nodes of different ranks update side by side (:func:`relax`)."""
        extra = rank - self.basis.shape[1]
        if self.reduced and extra > 0:
            self.basis = torch.cat([self.basis, self.basis.new_zeros(len(self.basis), extra)], 1)
            self.values = torch.cat([self.values, self.values.new_ones(extra)])


class PendingUpdate:
    """One node's update between its start (inputs read) and :func:`relax` (numbers
    made): what the node pushes to each neighbour, and with which stamp."""

    def __init__(
        self,
        node: ArockNode,
        neighbours: tuple[int, ...],
        own: tuple[torch.Tensor, ...],
        inbox: tuple[torch.Tensor, ...],
    ) -> None:
        self.node = node
        self.neighbours = neighbours
        self.own = own
        self.inbox = inbox
        self.done = False
        self.stamp = -1
        """The pushes' stamp, set by :func:`relax`."""
        self.blocks: dict[int, torch.Tensor] = {}
        """The block pushed to each neighbour, set by :func:`relax`."""

    @property
    def group(self) -> tuple[bool, int]:
        """Updates of one group are made together: the same shapes and the same form."""
        return (
            self.node.reduced and self.node.rest_curvature(len(self.neighbours)) > 0,
            len(self.neighbours),
        )


def relax(updates: list[PendingUpdate]) -> None:
    """Make the numbers of pending updates of distinct nodes, many at a time: each
    node's x_i, its relaxed blocks and its residual are those it makes alone (batched
    products, one per node, and everything else row by row), whoever shares the batch."""
    groups: dict[tuple[bool, int], list[PendingUpdate]] = {}
    for update in sorted(updates, key=lambda update: update.node.index):
        groups.setdefault(update.group, []).append(update)
    for (outside, degree), group in groups.items():
        for start in range(0, len(group), CHUNK):
            _relax_group(group[start : start + CHUNK], outside, degree)


CHUNK = 64
"""The most updates made by one pass of tensor operations, which bounds the batch's
temporary memory. Smaller batches are not faster: on satimage's first two layers
batches of 2 took 57 s where whole batches (20 nodes) took 48 s."""


def _relax_group(updates: list[PendingUpdate], outside: bool, degree: int) -> None:
    """:func:`relax` for updates of one shape: ``degree`` neighbours each."""
    nodes = [update.node for update in updates]
    first = nodes[0]
    inbox = [_stacked([update.inbox[d] for update in updates]) for d in range(degree)]
    whole = _rows(nodes, "cross2")
    for d, blocks in enumerate(inbox):  # V = 2C - sum_j z_{e,i}, in the inbox's order
        whole = whole - blocks if d == 0 else whole.sub_(blocks)
    rest = first.rest_curvature(degree)
    bases = _rows(nodes, "basis")
    rotated = torch.bmm(whole, bases)
    # With no edge left and no ridge (rest 0) the update is flat off G's range, where
    # V = 2C has no part: the minimum-norm solution lives on the range alone.
    x, shifts = solve_batch(
        rotated,
        torch.from_numpy(2.0 * _rows(nodes, "values").numpy() + rest),
        bases,
        first.radius,
        np.array([node.shift for node in nodes]),
        (whole, rest) if outside else None,
    )
    own = [_stacked([update.own[d] for update in updates]) for d in range(degree)]
    new, residuals = _relax_blocks(own, inbox, x, first.rule.gamma, first.rule.eta, len(nodes) > 1)
    rows = [blocks.unbind() for blocks in new]  # every node's views at once
    for update, node, solution, shift, residual, *edges in zip(
        updates, nodes, x.unbind(), shifts.tolist(), residuals.tolist(), *rows, strict=True
    ):
        node.x, node.shift, node.residual = solution, shift, residual
        node.own = dict(zip(update.neighbours, edges, strict=True))
        node.pending = None
        update.blocks, update.stamp, update.done = node.own, node.stamp, True


def _rows(nodes: list[ArockNode], name: str) -> torch.Tensor:
    """The nodes' tensors ``name`` ("basis", "values" or "cross2") on a new first axis: rows of
    their layer's bank, a view where the nodes are consecutive rows of it."""
    bank = nodes[0].banks.get(name)
    if bank is None or any(node.banks.get(name) is not bank for node in nodes):
        return _stacked([getattr(node, name) for node in nodes])
    first, last = nodes[0].slot, nodes[-1].slot
    if last - first + 1 == len(nodes) and all(
        node.slot == first + k for k, node in enumerate(nodes)
    ):
        return bank[first : last + 1]
    return bank[torch.tensor([node.slot for node in nodes])]


def _stacked(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The tensors on a new first axis: a copy, or a view of a single one."""
    return tensors[0].unsqueeze(0) if len(tensors) == 1 else torch.stack(tensors)


def _relax_blocks(
    own: list[torch.Tensor],
    inbox: list[torch.Tensor],
    x: torch.Tensor,
    gamma: float,
    eta: float,
    copied: bool,
) -> tuple[list[torch.Tensor], np.ndarray]:
    """Relax each edge's blocks (B, Q, n), z <- z - eta (z - T(z)) = z - (eta / 2)
    (z + z_{e,i} + 2 gamma x_i), in place where ``own`` holds copies, and return them
    with each node's residual ||z - T(z)|| / ||z||, its blocks' squares summed in their
    order."""
    moved, size = np.zeros(len(x)), np.zeros(len(x))
    new = []
    for blocks, heard in zip(own, inbox, strict=True):
        step = torch.add(blocks, heard).add_(x, alpha=2.0 * gamma).mul_(-0.5 * eta)
        relaxed = blocks.add_(step) if copied else blocks + step
        moved = moved + _row_squares(step.view(len(x), -1))
        size = size + _row_squares(relaxed.view(len(x), -1))
        new.append(relaxed)
    residuals = np.sqrt(moved / np.maximum(size, 1e-300)) / eta if own else np.zeros(len(x))
    return new, residuals


def _row_squares(rows: torch.Tensor) -> np.ndarray:
    """Each row's sum of squares: the same for a row whatever rows come with it."""
    values = rows.numpy()
    return np.einsum("ij,ij->i", values, values)


_RANK_CUTOFF = 1e-10
"""Eigenvalues of G below this fraction of the largest count as 0 (G's null space)."""


def _settled(stamp: int) -> bool:
    return stamp >= 0 and stamp % 2 == 1


def _bank(nodes: list[ArockNode]) -> None:
    """Stack the layer's bases, their eigenvalues and the targets once, so that a batch
    of consecutive nodes reads them as one view (:func:`_rows`)."""
    for name in ("basis", "values", "cross2"):
        if len({getattr(node, name).shape for node in nodes}) == 1:
            bank = torch.stack([getattr(node, name) for node in nodes])
            for slot, node in enumerate(nodes):
                node.banks[name], node.slot = bank, slot
                setattr(node, name, bank[slot])


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

    def solve(self, problem: LayerProblem, network: LayerNetwork) -> LayerSolution:
        grams, crosses, regularizer = problem.grams, problem.crosses, problem.regularizer
        _, classes, width = crosses.shape
        live = network.live_neighbours
        rule = ArockRule(
            2.0 / layer_step(self.config, regularizer), self.eta, self.cap, self.tolerance
        )
        nodes = [
            ArockNode(
                index,
                grams[local],
                crosses[local],
                live(index),
                regularizer,
                self.graph.agents,
                rule,
            )
            for local, index in enumerate(network.local_nodes)
        ]
        rank = max(node.basis.shape[1] for node in nodes)
        for node in nodes:
            node.pad_rank(rank)
        _bank(nodes)
        work = AsyncWork(
            setup_flops=[flops + 4.0 * float(width) ** 3 for flops in problem.setup_flops],
            # two dense (Q, n) x (n, n) products, whatever shortcut a node takes: as for
            # synchronous dSSFN's update (which could take the same one), like for like
            update_flops=2 * matmul_flops(classes, width, width),
            values=classes * width,
            dtype=crosses.dtype,
            relax=relax,
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
