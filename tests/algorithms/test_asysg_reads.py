"""AsySG-incon's mixed read against the draws of its generator."""

from __future__ import annotations

import torch

from murmur.algorithms.asysg import inconsistent_read

VERSIONS = [torch.zeros(64), torch.ones(64), torch.full((64,), 2.0)]


def test_each_read_draws_one_version_index_per_coordinate():
    """Two reads in a row take the first and the next 64 uniform indices of the stream."""
    reads = torch.Generator().manual_seed(4)
    first, second = (inconsistent_read(VERSIONS, reads) for _ in range(2))
    draws = torch.Generator().manual_seed(4)
    for read in (first, second):
        index = torch.randint(0, 3, (64,), generator=draws)
        assert torch.equal(read, index.float())


def test_two_versions_are_mixed_and_a_single_version_is_copied_without_a_draw():
    """With two versions both appear; with one the copy leaves the generator untouched."""
    reads = torch.Generator().manual_seed(1)
    assert set(inconsistent_read(VERSIONS[:2], reads).tolist()) == {0.0, 1.0}
    state = reads.get_state()
    only = inconsistent_read(VERSIONS[2:], reads)
    assert torch.equal(only, VERSIONS[2]) and only is not VERSIONS[2]
    assert torch.equal(reads.get_state(), state)
