"""One ARock node's update written out by hand: the closed-form x_i and the relaxed blocks.

With the norm bound inactive,

    x_i = (2 C - sum_j z_{e,i}) (2 G + (gamma d_i + 2 lam / N) I)^-1
    T(z)_{e,j} = (z_{e,j} - z_{e,i}) / 2 - gamma x_i
    z_{e,j} <- z_{e,j} - eta (z_{e,j} - T(z)_{e,j})
"""

from __future__ import annotations

import pytest
import torch

from murmur.algorithms.arock import ArockNode, ArockRule, ball_constrained_solve
from murmur.algorithms.ssfn import Ball, Ridge

GRAM = torch.tensor([[2.0, 1.0], [1.0, 3.0]], dtype=torch.float64)
CROSS = torch.tensor([[1.0, 2.0], [-1.0, 0.5]], dtype=torch.float64)
INBOX = {
    1: torch.tensor([[0.5, -1.0], [2.0, 0.0]], dtype=torch.float64),
    2: torch.tensor([[-0.25, 0.75], [1.0, -3.0]], dtype=torch.float64),
}
OWN = {
    1: torch.tensor([[1.0, 0.0], [0.0, -2.0]], dtype=torch.float64),
    2: torch.tensor([[0.0, 1.5], [-1.0, 1.0]], dtype=torch.float64),
}
GAMMA = 0.5
NODES = 4


def _node(regularizer, eta: float) -> ArockNode:
    node = ArockNode(0, GRAM, CROSS, [1, 2], regularizer, NODES, ArockRule(GAMMA, eta, cap=10))
    node.inbox = {j: block.clone() for j, block in INBOX.items()}
    node.own = {j: block.clone() for j, block in OWN.items()}
    return node


def _closed_form(ridge: float) -> torch.Tensor:
    """x_i from the normal equations, the norm bound inactive."""
    curvature = 2.0 * GRAM + (GAMMA * len(INBOX) + 2.0 * ridge) * torch.eye(2, dtype=GRAM.dtype)
    rhs = 2.0 * CROSS - sum(INBOX.values())
    return torch.linalg.solve(curvature, rhs.T).T


def _relaxed(own: dict, x: torch.Tensor, eta: float) -> dict:
    """z - eta (z - T(z)) for each own block."""
    targets = {j: (own[j] - INBOX[j]) / 2.0 - GAMMA * x for j in own}
    return {j: own[j] - eta * (own[j] - targets[j]) for j in own}


def test_an_update_returns_the_closed_form_x_and_relaxes_the_blocks_by_eta():
    """Two updates with a ridge: x_i solves the normal equations, blocks move by eta."""
    lam = 8.0  # ridge share lam / N = 2
    node = _node(Ridge(lam), eta=0.5)
    x = _closed_form(lam / NODES)
    first = _relaxed(OWN, x, 0.5)
    node.update()
    torch.testing.assert_close(node.solution, x, rtol=0, atol=1e-12)
    for j in OWN:
        torch.testing.assert_close(node.own[j], first[j], rtol=0, atol=1e-12)
        assert not torch.allclose(node.own[j], _relaxed(OWN, x, 1.0)[j], atol=1e-3)
    second = _relaxed(first, x, 0.5)
    node.update()
    torch.testing.assert_close(node.solution, x, rtol=0, atol=1e-12)
    for j in OWN:
        torch.testing.assert_close(node.own[j], second[j], rtol=0, atol=1e-12)


def test_a_ball_that_does_not_bind_adds_no_ridge_and_eta_one_takes_the_full_step():
    """Ball constraint far away: x_i without a ridge term; eta = 1 sets z to T(z)."""
    node = _node(Ball(1e6), eta=1.0)
    x = _closed_form(0.0)
    node.update()
    torch.testing.assert_close(node.solution, x, rtol=0, atol=1e-12)
    for j in OWN:
        target = (OWN[j] - INBOX[j]) / 2.0 - GAMMA * x
        torch.testing.assert_close(node.own[j], target, rtol=0, atol=1e-12)


# ---------------------------------------------------------------- the node's state machine


def _machine(cap: int = 2, tolerance: float = 0.0) -> ArockNode:
    return ArockNode(
        0, GRAM, CROSS, [1, 2], Ridge(8.0), NODES, ArockRule(GAMMA, 0.5, cap, tolerance)
    )


SETTLED, BUSY = 1, 0
"""The last bit of a stamp: its sender is settled."""


def _stamp(update: int, settled: int) -> int:
    return 2 * update + settled


def test_a_node_starts_by_updating_then_waits_for_news():
    """Nothing heard yet: the first update is due; after it, with no news, it waits."""
    node = _machine()
    assert node.next_action() == "update"
    blocks = node.update()
    assert sorted(blocks) == [1, 2] and node.updates == 1
    assert node.next_action() == "wait"


def test_news_is_taken_only_when_newer_and_only_from_neighbours():
    """An older or equal stamp, or a stranger's block, changes nothing."""
    node = _machine()
    node.update()
    block = torch.ones(2, 2, dtype=torch.float64)
    assert node.receive(1, _stamp(0, BUSY), block)
    assert node.next_action() == "update"
    assert not node.receive(1, _stamp(0, BUSY), 2 * block)  # same stamp: the first one stays
    assert torch.equal(node.inbox[1], block)
    assert not node.receive(3, 5, block)  # not a neighbour
    assert node.stamps == {1: 0, 2: -1}


def test_stamps_count_updates_and_say_whether_the_node_is_settled():
    """Cap 2, no tolerance: the first update's stamp is 2 x 0 + busy, the second's
    2 x 1 + settled (the cap is reached)."""
    node = _machine(cap=2)
    node.update()
    assert node.stamp == _stamp(0, BUSY) and not node.settled
    node.update()
    assert node.stamp == _stamp(1, SETTLED) and node.settled


def test_a_node_answers_without_news_once_its_neighbours_are_settled_and_then_finishes():
    """Neighbours settled: update without news until settled (the cap here), then done;
    a done node takes no more news."""
    node = _machine(cap=2)
    node.update()
    for j in (1, 2):
        node.receive(j, _stamp(1, SETTLED), torch.zeros(2, 2, dtype=torch.float64))
    node.update()  # the news
    assert node.updates == 2 and node.next_action() == "done"
    assert not node.receive(1, _stamp(5, SETTLED), torch.zeros(2, 2, dtype=torch.float64))


def test_a_node_that_is_not_settled_keeps_updating_for_settled_neighbours():
    """Every neighbour settled: the node updates again and again without news."""
    node = _machine(cap=3)
    for j in (1, 2):
        node.receive(j, _stamp(2, SETTLED), torch.zeros(2, 2, dtype=torch.float64))
    actions = []
    while (action := node.next_action()) != "done":
        actions.append(action)
        node.update()
    assert actions == ["update"] * 3


def test_with_settled_neighbours_a_node_stops_on_the_tolerance_before_its_cap():
    """Fixed inbox: the blocks converge geometrically (by 1 - eta / 2 per update here),
    so the residual meets 1e-6 well before the cap of 1000 and the node is done."""
    node = _machine(cap=1000, tolerance=1e-6)
    for j in (1, 2):
        node.receive(j, _stamp(0, SETTLED), torch.full((2, 2), 0.5, dtype=torch.float64))
    residuals = []
    while node.next_action() != "done":
        node.update()
        residuals.append(node.residual)
    assert node.updates < 100 and residuals[-1] <= 1e-6 < residuals[-2]
    assert node.stamp % 2 == SETTLED


def test_a_busy_neighbour_is_waited_for():
    """A neighbour whose last stamp says busy keeps a settled node from finishing."""
    node = _machine(cap=1)
    node.update()
    node.receive(1, _stamp(0, SETTLED), torch.zeros(2, 2, dtype=torch.float64))
    node.receive(2, _stamp(0, BUSY), torch.zeros(2, 2, dtype=torch.float64))
    node.update()
    assert node.settled and node.waiting_on() == [2] and node.next_action() == "wait"


def test_a_dropped_neighbour_leaves_the_problem_and_is_no_longer_waited_for():
    """Dropping the silent neighbour lets the node finish with the other one."""
    node = _machine(cap=1)
    node.update()
    node.receive(1, _stamp(0, SETTLED), torch.zeros(2, 2, dtype=torch.float64))
    node.update()
    assert node.next_action() == "wait"  # neighbour 2 is not settled
    node.drop(2)
    assert node.neighbours == [1] and node.next_action() == "done"


def test_after_a_drop_the_update_uses_only_the_remaining_neighbours_blocks():
    """x_i and the relaxed blocks as if the node had only neighbour 1 (d_i = 1)."""
    node = _node(Ridge(lam=2.0), eta=0.5)
    node.drop(2)
    own = node.update()
    curvature = 2.0 * GRAM + (GAMMA * 1 + 2.0 * 2.0 / NODES) * torch.eye(2, dtype=GRAM.dtype)
    x = torch.linalg.solve(curvature, (2.0 * CROSS - INBOX[1]).T).T
    torch.testing.assert_close(node.solution, x)
    target = (OWN[1] - INBOX[1]) / 2.0 - GAMMA * x
    assert list(own) == [1]
    torch.testing.assert_close(own[1], OWN[1] - 0.5 * (OWN[1] - target))


def test_dropping_a_node_that_is_not_a_neighbour_changes_nothing():
    """A failure report about a stranger is ignored."""
    node = _node(Ball(radius=100.0), eta=0.5)
    node.drop(7)
    assert node.neighbours == [1, 2] and sorted(node.inbox) == [1, 2]
    assert sorted(node.stamps) == [1, 2]


def test_a_binding_ball_with_small_curvature_scales_the_free_solution_onto_the_sphere():
    """Curvature 0.5 everywhere: the free X = 2 W has norm 10 > 5, and nu = 1/4 gives X = W."""
    rotated = torch.tensor([[3.0, 4.0, 0.0]], dtype=torch.float64)
    curvature = torch.full((3,), 0.5, dtype=torch.float64)
    basis = torch.eye(3, dtype=torch.float64)
    torch.testing.assert_close(ball_constrained_solve(rotated, curvature, basis, 5.0)[0], rotated)
    torch.testing.assert_close(
        ball_constrained_solve(rotated, curvature, basis, 20.0)[0], 2 * rotated
    )


def test_the_update_count_grows_by_one_per_update():
    """Three updates are stamped 0, 1, 2 and counted as 3."""
    node = _machine(cap=5)
    for _ in range(3):
        node.update()
    assert node.updates == 3


def _ball_solution(gram: torch.Tensor, rhs: torch.Tensor, radius: float) -> torch.Tensor:
    """argmin tr(X gram X^T) - <rhs, X> on ||X|| <= radius, by bisection on the multiplier
    of X(nu) = rhs (2 gram + 2 nu I)^-1 (gram positive definite)."""
    identity = torch.eye(gram.shape[0], dtype=gram.dtype)

    def solution(nu: float) -> torch.Tensor:
        return torch.linalg.solve(2.0 * gram + 2.0 * nu * identity, rhs.T).T

    if float(solution(0.0).norm()) <= radius:
        return solution(0.0)
    low, high = 0.0, 1.0
    while float(solution(high).norm()) > radius:
        low, high = high, 2.0 * high
    for _ in range(200):
        middle = 0.5 * (low + high)
        low, high = (middle, high) if float(solution(middle).norm()) > radius else (low, middle)
    return solution(high)


def test_a_node_with_fewer_samples_than_features_solves_on_the_range_of_its_gram():
    """G of 3 samples and 8 features has rank 3: the node keeps only G's range, and its
    x_i still equals the full solution (curvature gamma d on the null space), with the
    norm bound binding or not, update after update."""
    stream = torch.Generator().manual_seed(3)
    inputs = torch.randn(3, 8, generator=stream, dtype=torch.float64)
    targets = torch.randn(3, 2, generator=stream, dtype=torch.float64)
    gram, cross = inputs.T @ inputs, targets.T @ inputs
    for radius in (0.05, 1e6):
        node = ArockNode(0, gram, cross, [1, 2], Ball(radius), NODES, ArockRule(GAMMA, 0.5, cap=10))
        assert node.reduced and node.basis.shape == (8, 3)
        for _ in range(3):
            node.inbox = {
                j: torch.randn(2, 8, generator=stream, dtype=torch.float64) for j in (1, 2)
            }
            node.update()
            curvature = gram + 0.5 * GAMMA * 2 * torch.eye(8, dtype=torch.float64)
            rhs = 2.0 * cross - sum(node.inbox.values())
            expected = _ball_solution(curvature, rhs, radius)
            torch.testing.assert_close(node.solution, expected, rtol=0, atol=1e-9)
            assert (radius > 1) or float(node.solution.norm()) == pytest.approx(radius, rel=1e-9)


def test_a_low_rank_node_left_without_neighbours_takes_the_minimum_norm_solution():
    """Both neighbours fail on a ball layer: nothing curves the update off G's range,
    and x_i is the bound-constrained least squares on the node's own data, with no part
    off that range (no division by a zero curvature)."""
    stream = torch.Generator().manual_seed(4)
    inputs = torch.randn(3, 8, generator=stream, dtype=torch.float64)
    targets = torch.randn(3, 2, generator=stream, dtype=torch.float64)
    gram, cross = inputs.T @ inputs, targets.T @ inputs
    node = ArockNode(0, gram, cross, [1, 2], Ball(0.05), NODES, ArockRule(GAMMA, 0.5, cap=10))
    node.drop(1)
    node.drop(2)
    node.update()
    expected = _ball_solution(gram + 1e-12 * torch.eye(8, dtype=torch.float64), 2.0 * cross, 0.05)
    assert bool(torch.isfinite(node.solution).all())
    torch.testing.assert_close(node.solution, expected, rtol=0, atol=1e-8)
    assert float(node.solution.norm()) == pytest.approx(0.05, rel=1e-9)
