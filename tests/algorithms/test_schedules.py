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


def test_milestones_decay_the_step_as_torchs_multistep_schedule():
    import torch

    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([parameter], lr=0.4)
    torch_schedule = torch.optim.lr_scheduler.MultiStepLR(optimizer, [5, 12, 13], gamma=0.1)
    ours = Decaying(0.4, 0.0, 0.0, milestones=(5, 12, 13), decay=0.1)
    for iteration in range(20):
        assert ours(iteration) == pytest.approx(optimizer.param_groups[0]["lr"], rel=1e-12)
        optimizer.step()
        torch_schedule.step()
    assert ours(4) == 0.4 and ours(13) == pytest.approx(0.4e-3)


def test_the_warm_up_and_milestones_multiply():
    schedule = Decaying(1.0, 0.0, 0.0, warmup=4, milestones=(2,), decay=0.5)
    assert [schedule(k) for k in range(5)] == [0.25, 0.5, 0.375, 0.5, 0.5]
