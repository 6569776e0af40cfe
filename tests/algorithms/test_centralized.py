"""Centralized SGD's step on its own."""

from __future__ import annotations

import torch

from murmur.algorithms.centralized import Centralized, CentralizedConfig
from murmur.sim.transport import InMemoryTransport
from murmur.topology import complete


def test_a_step_subtracts_alpha_times_the_gradient_and_sends_nothing():
    """x <- x - alpha_k g with alpha_k = a / (eps k + 1)^d2 (0.5 / 2 at k = 1), no message."""
    rule = Centralized(CentralizedConfig(a=0.5, eps=1.0, d2=1.0))
    state = rule.init(torch.tensor([[1.0, 2.0]]))
    transport = InMemoryTransport(complete(1), torch.zeros(1, 2))
    state = rule.step(state, torch.tensor([[4.0, -2.0]]), 1, transport)
    assert torch.equal(rule.params(state), torch.tensor([[0.0, 2.5]]))
    assert transport.counters.events == 0
