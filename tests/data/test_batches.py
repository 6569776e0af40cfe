"""Per-agent batches: epochs over the agent's own shard, reproducible per agent."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from murmur.data.batches import BatchSampler, permute


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


def test_every_epoch_of_every_agent_is_a_permutation_of_its_shard():
    sizes = [1, 2, 3, 4, 5, 7, 8, 9, 31, 33, 100, 1000, 4097]
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    shards = [torch.arange(start, start + size) for start, size in zip(starts, sizes, strict=True)]
    sampler = BatchSampler(shards, batch_size=5, seed=11)
    for agent, shard in enumerate(shards):
        epochs = 4
        positions = torch.arange(epochs * shard.numel())
        drawn = sampler._at(torch.full_like(positions, agent), positions)
        orders = drawn.reshape(epochs, shard.numel())
        for order in orders:
            assert torch.equal(order.sort().values, shard)
        if shard.numel() >= 8:  # epochs come in different orders
            assert not torch.equal(orders[0], orders[1])


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=6),
    batch_size=st.integers(1, 50),
    steps=st.integers(1, 6),
)
def test_the_batched_draw_and_the_one_agent_draw_give_the_same_stream(sizes, batch_size, steps):
    shards = [torch.arange(size) + 100 * agent for agent, size in enumerate(sizes)]
    together = BatchSampler(shards, batch_size, seed=5)
    one_by_one = BatchSampler(shards, batch_size, seed=5)
    for _ in range(steps):
        batch = together.next()
        assert batch.shape == (len(sizes), batch_size)
        for agent in range(len(sizes)):
            assert torch.equal(batch[agent], one_by_one.next_for(agent))


def test_an_agents_stream_is_the_same_among_eight_agents_or_ten_thousand():
    few = BatchSampler([torch.arange(agent, agent + 3) for agent in range(8)], 4, seed=2)
    many = BatchSampler([torch.arange(agent, agent + 3) for agent in range(10_000)], 4, seed=2)
    for _ in range(3):
        assert torch.equal(few.next(), many.next()[:8])


def test_a_resumed_sampler_continues_every_stream():
    shards = [torch.arange(5), torch.arange(5, 17)]
    straight = BatchSampler(shards, 3, seed=1)
    for _ in range(4):
        straight.next()
    saved = straight.state_dict()
    resumed = BatchSampler(shards, 3, seed=1)
    resumed.load_state_dict(saved)
    for _ in range(5):
        assert torch.equal(straight.next(), resumed.next())


def test_an_old_sampler_state_is_refused_with_a_reason():
    sampler = BatchSampler([torch.arange(4)], 2, seed=0)
    with pytest.raises(ValueError, match="older murmur"):
        sampler.load_state_dict({"generators": [], "queues": []})


def test_seeds_give_different_orders_and_the_first_sample_is_spread_evenly():
    shards = [torch.arange(4)] * 2000
    firsts = BatchSampler(shards, 1, seed=0).next()[:, 0]
    counts = torch.bincount(firsts, minlength=4)
    assert int(counts.min()) > 400 and int(counts.max()) < 600  # 500 each expected
    other = BatchSampler(shards, 1, seed=1).next()[:, 0]
    assert not torch.equal(firsts, other)


def test_a_fixed_number_of_walks_gives_the_permutation_that_reading_gives():
    """The GPU's path sends every value through again a fixed number of times instead of
    reading which are still outside the shard; once all are inside, the same map."""
    sizes = torch.tensor([1, 2, 3, 5, 17, 100, 1000, 65537]).repeat_interleave(40)
    offsets = torch.cat([torch.arange(40) % size for size in sizes[::40].tolist()])
    agents = torch.arange(sizes.numel()) % 7
    epochs = torch.arange(sizes.numel()) % 3
    key = torch.tensor(123456789)
    read = permute(offsets, sizes, key, agents, epochs)
    walked = permute(offsets, sizes, key, agents, epochs, walks=48)
    assert torch.equal(read, walked)
    assert bool((walked < sizes).all())
