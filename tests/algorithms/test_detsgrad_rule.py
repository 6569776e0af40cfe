"""DETSGRAD's step written out by hand: the event trigger and the consensus term.

Every number below is exactly representable in float32 (alpha = 0.5, beta = 0.25,
integer gradients), so the models and the decisions to send are compared exactly.
"""

from __future__ import annotations

import torch

from murmur.algorithms.detsgrad import Detsgrad, DetsgradConfig
from murmur.sim.transport import InMemoryTransport
from murmur.topology import complete, ring

ALPHA = 0.5
BETA = 0.25


def _detsgrad(graph, v0: float) -> Detsgrad:
    """Constant steps alpha = 0.5 and beta = 0.25 (d2 = d1 = 0)."""
    return Detsgrad(DetsgradConfig(a=ALPHA, d2=0.0, b=BETA, d1=0.0, v0=v0), graph)


def test_zero_threshold_sends_every_step_even_without_drift():
    """v0 = 0: every agent broadcasts every step, also when its model has not moved."""
    agents, steps = 5, 4
    graph = ring(agents)
    initial = torch.ones(agents, 3)
    algorithm = _detsgrad(graph, v0=0.0)
    transport = InMemoryTransport(graph, initial)
    state = algorithm.init(initial)
    for step in range(steps):
        state = algorithm.step(state, torch.zeros(agents, 3), step, transport)
    assert torch.equal(state.x, initial)
    assert transport.counters.events_per_agent.tolist() == [steps] * agents
    assert transport.counters.messages == 2 * agents * steps


def test_a_drift_equal_to_the_threshold_sends_and_one_just_below_does_not():
    """The trigger is drift >= v0 alpha: equal sends, a hair below stays silent."""
    graph = complete(3)
    initial = torch.zeros(3, 2)
    below = torch.nextafter(torch.tensor(4.0), torch.tensor(0.0)).item()
    grads = torch.tensor([[3.0, 4.0], [0.0, below], [6.0, 8.0]])
    algorithm = _detsgrad(graph, v0=5.0)  # threshold v0 alpha = 2.5
    transport = InMemoryTransport(graph, initial)
    state = algorithm.step(algorithm.init(initial), grads.clone(), 0, transport)
    drift = torch.linalg.vector_norm(state.x, dim=1)
    assert drift[0].item() == 2.5 and drift[1].item() < 2.5 < drift[2].item()
    assert transport.counters.events_per_agent.tolist() == [1, 0, 1]
    assert torch.equal(transport.last_sent, torch.stack([state.x[0], initial[1], state.x[2]]))


def test_the_consensus_term_mixes_the_last_broadcasts_not_the_models():
    """X(k+1) = X(k) - beta L X^(k) - alpha G(k) with X^ the last broadcasts."""
    graph = complete(3)  # L = 3 I - J
    laplacian = graph.laplacian().to(torch.float32)
    initial = torch.zeros(3, 2)
    algorithm = _detsgrad(graph, v0=4.0)  # threshold 2
    transport = InMemoryTransport(graph, initial)
    state = algorithm.init(initial)
    # Step 0: drifts 1, 4, 4; agent 0 stays silent.
    first = torch.tensor([[2.0, 0.0], [8.0, 0.0], [0.0, 8.0]])
    state = algorithm.step(state, first, 0, transport)
    x1 = torch.tensor([[-1.0, 0.0], [-4.0, 0.0], [0.0, -4.0]])
    published = torch.tensor([[0.0, 0.0], [-4.0, 0.0], [0.0, -4.0]])
    assert torch.equal(state.x, x1)
    assert torch.equal(transport.last_sent, published)
    # Step 1, by hand: L X^ = [[4, 4], [-8, 4], [4, -8]].
    second = torch.tensor([[2.0, 0.0], [0.0, 2.0], [0.0, 0.0]])
    expected = torch.tensor([[-3.0, -1.0], [-2.0, -2.0], [-1.0, -2.0]])
    assert torch.equal(x1 - BETA * laplacian @ published - ALPHA * second, expected)
    with_models = x1 - BETA * laplacian @ x1 - ALPHA * second
    assert not torch.equal(with_models, expected)
    state = algorithm.step(state, second.clone(), 1, transport)
    assert torch.equal(state.x, expected)
