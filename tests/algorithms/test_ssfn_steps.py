"""SSFN's closed-form pieces in float64: the ridge solve, one ADMM step and the NME floor."""

from __future__ import annotations

import math

import pytest
import torch

from murmur.algorithms.ssfn import admm_single, nme_db, one_hot, ridge_solution

F64 = torch.float64
GRAM = torch.tensor([[2.0, 0.5, 0.0], [0.5, 1.0, 0.25], [0.0, 0.25, 3.0]], dtype=F64)
CROSS = torch.tensor([[1.0, -2.0, 0.5], [0.25, 1.0, -1.0]], dtype=F64)


def test_the_ridge_solution_adds_lambda_in_full_precision():
    """O = C (G + lambda I)^-1 with lambda = 0.1 exactly as a float64, not rounded to float32."""
    expected = torch.linalg.solve(GRAM + 0.1 * torch.eye(3, dtype=F64), CROSS.T).T
    torch.testing.assert_close(ridge_solution(GRAM, CROSS, 0.1), expected, rtol=1e-14, atol=0.0)


def test_one_admm_step_with_a_loose_ball_is_c_times_the_regularized_inverse():
    """From zero split and dual: O = C (G + I / mu)^-1, 1/3 in float64; the ball is loose."""
    expected = torch.linalg.solve(GRAM + torch.eye(3, dtype=F64) / 3.0, CROSS.T).T
    result = admm_single(GRAM, CROSS, radius=100.0, mu=3.0, iterations=1).output
    torch.testing.assert_close(result, expected, rtol=1e-13, atol=0.0)


def test_the_nme_is_twenty_log_ten_of_the_norm_ratio_with_a_floor_on_both_norms():
    """-6.02 dB for half the target's norm; zero norms count as 1e-300, i.e. -/+3000 dB."""
    assert nme_db(1.0, 4.0) == pytest.approx(20.0 * math.log10(0.5))
    assert nme_db(0.0, 1.0) == pytest.approx(-3000.0)
    assert nme_db(1.0, 0.0) == pytest.approx(3000.0)


def test_one_hot_targets_have_every_class_even_one_absent_from_the_labels():
    """Labels 0 and 1 of three classes: (2, 3) float64 rows."""
    targets = one_hot(torch.tensor([0, 1]), 3)
    expected = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=F64)
    assert torch.equal(targets, expected)
