"""Per-agent batches: epochs over the agent's own shard, reproducible per agent."""

from __future__ import annotations

import torch

from murmur.data.batches import BatchSampler


def test_each_agent_walks_its_own_shard_in_epochs():
    shards = [torch.arange(0, 10), torch.arange(10, 16)]
    sampler = BatchSampler(shards, batch_size=2, seed=3)
    first_epoch = torch.cat([sampler.next() for _ in range(5)], dim=1)
    assert sorted(first_epoch[0].tolist()) == list(range(10))
    assert set(first_epoch[1].tolist()) <= set(range(10, 16))
    assert sorted(first_epoch[1, :6].tolist()) == list(range(10, 16))


def test_an_agents_batches_do_not_depend_on_the_other_agents():
    alone = BatchSampler([torch.arange(8)], batch_size=3, seed=7)
    together = BatchSampler([torch.arange(8), torch.arange(8, 20)], batch_size=3, seed=7)
    for _ in range(6):
        assert torch.equal(alone.next()[0], together.next()[0])


def test_a_shard_smaller_than_the_batch_is_repeated_by_epochs():
    sampler = BatchSampler([torch.tensor([4, 5])], batch_size=5, seed=0)
    batch = sampler.next()[0].tolist()
    assert len(batch) == 5 and set(batch) == {4, 5}
