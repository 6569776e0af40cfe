"""Decaying schedules: the closed form, and exponents too large for a float power."""

from __future__ import annotations

import pytest

from murmur.algorithms.schedules import Decaying


@pytest.mark.parametrize("iteration", [0, 1, 10, 10_000])
def test_decaying_is_scale_over_a_power(iteration):
    schedule = Decaying(scale=0.5, exponent=0.7, eps=1e-3)
    assert schedule(iteration) == 0.5 / (1e-3 * iteration + 1.0) ** 0.7


def test_a_huge_exponent_decays_to_zero_instead_of_overflowing():
    schedule = Decaying(scale=0.1, exponent=1e30, eps=1e-5)
    assert schedule(0) == 0.1
    assert schedule(1_000_000) == 0.0
