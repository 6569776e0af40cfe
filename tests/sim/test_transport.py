"""The in-memory transport delivers the latest broadcast and counts every message."""

from __future__ import annotations

import pytest
import torch

from murmur.metrics.counters import MessageCounters
from murmur.sim.transport import InMemoryTransport
from murmur.topology import as_sparse, star


def test_broadcast_counts_events_messages_and_bytes_by_degree():
    graph = star(5)  # hub 0 has degree 4, leaves degree 1
    transport = InMemoryTransport(graph, torch.zeros(5, 3))
    transport.broadcast(torch.tensor([True, False, True, False, False]), torch.ones(5, 3))
    transport.broadcast(torch.tensor([True, True, True, True, True]), torch.ones(5, 3))
    counters = transport.counters
    assert counters.events_per_agent.tolist() == [2, 1, 2, 1, 1]
    assert counters.events == 7
    assert counters.messages == (4 + 1) + (4 + 1 + 1 + 1 + 1)
    assert counters.bytes == counters.messages * 3 * 4


def test_mix_sees_only_the_latest_broadcast_values():
    graph = star(3)
    transport = InMemoryTransport(graph, torch.zeros(3, 2))
    values = torch.tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    transport.broadcast(torch.tensor([False, True, False]), values)
    laplacian = as_sparse(graph.laplacian())
    mixed = torch.ones(3, 2)
    transport.mix(laplacian, out=mixed, scale=2.0)
    # Only agent 1 has sent; agents 0 and 2 are still at their initial zeros.
    published = torch.tensor([[0.0, 0.0], [2.0, 2.0], [0.0, 0.0]])
    expected = 1.0 + 2.0 * graph.laplacian().float() @ published
    torch.testing.assert_close(mixed, expected)


def test_initial_values_need_one_row_per_agent_and_given_counters_are_added_to():
    """A wrong row count is refused with both counts; shared counters keep counting."""
    graph = star(3)
    with pytest.raises(ValueError, match="^initial values have 2 rows for 3 agents$"):
        InMemoryTransport(graph, torch.zeros(2, 4))
    shared = MessageCounters(3)
    shared.record_event(0, 1, 1)
    transport = InMemoryTransport(graph, torch.zeros(3, 4), counters=shared)
    transport.broadcast(torch.tensor([False, True, False]), torch.ones(3, 4))
    assert transport.counters is shared
    assert shared.events_per_agent.tolist() == [1, 1, 0] and shared.bytes == 1 + 16


def test_broadcast_all_overwriting_sends_every_row_without_a_copy():
    graph = star(4)
    transport = InMemoryTransport(graph, torch.zeros(4, 3))
    values = torch.arange(12.0).view(4, 3)
    sent_memory = values.untyped_storage().data_ptr()
    transport.broadcast_all_overwriting(values)
    torch.testing.assert_close(transport.last_sent, torch.arange(12.0).view(4, 3))
    assert transport.last_sent.untyped_storage().data_ptr() == sent_memory
    assert values.shape == (4, 3)
    assert torch.equal(values, torch.zeros(4, 3))  # the transport's old memory
    counters = transport.counters
    assert counters.events_per_agent.tolist() == [1, 1, 1, 1]
    assert counters.messages == 3 + 1 + 1 + 1
    assert counters.bytes == counters.messages * 3 * 4
    with pytest.raises(ValueError, match=r"values \(4, 2\)"):
        transport.broadcast_all_overwriting(torch.zeros(4, 2))
