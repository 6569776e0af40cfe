"""Compression draws computed from keys: one agent's numbers do not depend on the block
it is held in, and they have the distributions they claim."""

from __future__ import annotations

import math

import pytest
import torch

from murmur.algorithms.draws import Draws, distinct_indices
from murmur.algorithms.estimates import message_draws

CPU = torch.device("cpu")


def test_an_agent_draws_the_same_numbers_alone_in_a_block_or_among_many():
    everyone = message_draws(7, list(range(10)), 5, CPU).child(2)
    alone = message_draws(7, [3], 5, CPU).child(2)
    pair = message_draws(7, [8, 3], 5, CPU).child(2)
    assert torch.equal(alone.bits(40)[0], everyone.bits(40)[3])
    assert torch.equal(pair.uniform(40, torch.float32)[1], everyone.uniform(40, torch.float32)[3])
    assert torch.equal(pair.seeds(), everyone.seeds()[[8, 3]])


def test_seeds_iterations_and_parts_each_give_other_numbers():
    base = message_draws(1, [0, 1], 0, CPU)
    others = [
        message_draws(2, [0, 1], 0, CPU),
        message_draws(1, [0, 1], 1, CPU),
        base.child(1),
    ]
    for other in others:
        assert not torch.equal(other.bits(16), base.bits(16))
    rows = base.bits(16)
    assert not torch.equal(rows[0], rows[1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_uniforms_lie_in_the_unit_interval_with_equal_mass_in_every_bin(dtype):
    u = message_draws(0, list(range(50)), 3, CPU).uniform(2000, dtype)
    assert u.dtype == dtype and u.shape == (50, 2000)
    assert float(u.min()) >= 0.0 and float(u.max()) < 1.0
    counts = torch.histc(u.double(), bins=20, min=0.0, max=1.0)
    expected = u.numel() / 20
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 45.3  # the 0.999 quantile of chi-square with 19 degrees of freedom
    # neighbouring entries are uncorrelated
    flat = u.double().reshape(-1)
    correlation = torch.corrcoef(torch.stack([flat[:-1], flat[1:]]))[0, 1]
    assert abs(float(correlation)) < 0.01


def test_normals_have_zero_mean_and_unit_variance():
    z = message_draws(4, list(range(20)), 0, CPU).normal(5001, torch.float64)
    assert z.shape == (20, 5001)
    n = z.numel()
    assert abs(float(z.mean())) < 4 / math.sqrt(n)
    assert abs(float(z.var()) - 1.0) < 6 * math.sqrt(2 / n)
    assert abs(float((z**4).mean()) - 3.0) < 0.1  # Gaussian tails, not uniform ones


def test_distinct_indices_are_distinct_sorted_in_range_and_cover_every_entry_evenly():
    seeds = Draws(torch.arange(4000, dtype=torch.int64)).seeds()
    chosen = distinct_indices(seeds, 30, 6)
    assert chosen.shape == (4000, 6)
    assert bool((chosen[:, 1:] > chosen[:, :-1]).all())  # sorted, so distinct
    assert int(chosen.min()) >= 0 and int(chosen.max()) < 30
    counts = torch.bincount(chosen.reshape(-1), minlength=30).double()
    expected = 4000 * 6 / 30
    assert float(((counts - expected) ** 2 / expected).sum()) < 58.3  # chi2(29), 0.999
    assert torch.equal(distinct_indices(seeds[7:9], 30, 6), chosen[7:9])  # from the seed alone
    assert distinct_indices(seeds[:0], 30, 6).shape == (0, 6)


def test_the_hash_is_a_bijection_and_its_python_twin_agrees():
    from murmur.algorithms.draws import _salt
    from murmur.seeding import hash32

    values = torch.arange(1 << 16, dtype=torch.int64) * 65537 + 12345
    hashed = hash32(values & 0xFFFFFFFF)
    assert hashed.unique().numel() == values.numel()
    assert int(hashed.max()) < 2**32 and int(hashed.min()) >= 0
    for x in (0, 1, 7, 2**31, 2**32 - 1, 123456789):
        assert _salt(x) == int(hash32(torch.tensor(x)))
