"""The in-memory transport delivers the latest broadcast and counts every message."""

from __future__ import annotations

import torch

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
    # Only agent 1 has published; agents 0 and 2 are still at their initial zeros.
    published = torch.tensor([[0.0, 0.0], [2.0, 2.0], [0.0, 0.0]])
    expected = 1.0 + 2.0 * graph.laplacian().float() @ published
    torch.testing.assert_close(mixed, expected)
