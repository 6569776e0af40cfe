"""One ARock node's update written out by hand: the closed-form x_i and the relaxed blocks.

With the norm bound inactive,

    x_i = (2 C - sum_j z_{e,i}) (2 G + (gamma d_i + 2 lam / N) I)^-1
    T(z)_{e,j} = (z_{e,j} - z_{e,i}) / 2 - gamma x_i
    z_{e,j} <- z_{e,j} - eta (z_{e,j} - T(z)_{e,j})
"""

from __future__ import annotations

import torch

from murmur.algorithms.arock import ArockNode
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
    node = ArockNode(0, GRAM, CROSS, [1, 2], regularizer, NODES, GAMMA, eta, quota=10)
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
