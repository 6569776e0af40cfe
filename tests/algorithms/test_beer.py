"""BEER: without compression it is gradient tracking written by hand; with any
compressor the trackers follow the gradients' sum, every step sends the model's
and the tracker's halves as two messages, and it reaches the known optimum of
the synthetic least-squares problem."""

from __future__ import annotations

import pytest
import torch
from small_runs import least_squares_error

from murmur.algorithms.beer import Beer, BeerConfig
from murmur.algorithms.estimates import Segments
from murmur.algorithms.protocols import BuildContext
from murmur.sim.transport import InMemoryTransport
from murmur.topology import metropolis_weights, ring

AGENTS, P, STEPS = 6, 40, 30
CONTEXT = BuildContext(seed=0, segments=Segments((24, 16)))


def _steps(algorithm: Beer, steps: int = STEPS):
    """Run ``algorithm`` on fixed gradients from a common initial model; the state after
    each step (copied), the gradients and the transport."""
    initial = torch.randn(P, generator=torch.Generator().manual_seed(0)).expand(AGENTS, P)
    grads = torch.randn(steps, AGENTS, P, generator=torch.Generator().manual_seed(1))
    transport = InMemoryTransport(ring(AGENTS), algorithm.initial_sent(initial.clone()))
    state = algorithm.init(initial.clone())
    states = []
    for step in range(steps):
        state = algorithm.step(state, grads[step].clone(), step, transport)
        states.append((state.x.clone(), state.tracker.clone()))
    return states, grads, initial, transport


def test_beer_without_compression_and_gamma_one_is_gradient_tracking_by_hand():
    """v_k = W v_(k-1) + g_k - g_(k-1) (v_0 = g_0), x_(k+1) = W x_k - a v_k."""
    a = 0.1
    beer = Beer(BeerConfig(a=a, eps=0.0, compress="none", gamma=1.0), ring(AGENTS), CONTEXT)
    states, grads, initial, _ = _steps(beer)
    mixing = metropolis_weights(ring(AGENTS)).to(torch.float32)
    x, v, last = initial.clone(), torch.zeros(AGENTS, P), torch.zeros(AGENTS, P)
    for step in range(STEPS):
        v = mixing @ v + grads[step] - last
        last = grads[step]
        x = mixing @ x - a * v
        torch.testing.assert_close(states[step][0], x, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(states[step][1], v, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("compress", ["topk", "randk", "qsgd", "sign"])
def test_the_trackers_sum_is_the_gradients_sum_whatever_the_compressor_drops(compress):
    config = BeerConfig(a=0.1, compress=compress, fraction=0.25, gamma=0.4)
    beer = Beer(config, ring(AGENTS), CONTEXT)
    states, grads, _, _ = _steps(beer)
    for step, (_, v) in enumerate(states):
        torch.testing.assert_close(v.sum(0), grads[step].sum(0), rtol=0, atol=1e-4)


def test_every_step_sends_the_model_and_the_tracker_as_two_messages():
    config = BeerConfig(a=0.1, compress="topk", fraction=0.25, gamma=0.4)
    beer = Beer(config, ring(AGENTS), CONTEXT)
    _, _, _, transport = _steps(beer)
    assert transport.counters.events == 2 * AGENTS * STEPS
    assert transport.counters.messages == 2 * 2 * AGENTS * STEPS
    # each half: ceil(0.25 * 40) = 10 float32 values and 10 int32 indices, to 2 neighbours
    assert transport.counters.bytes == 2 * AGENTS * STEPS * 2 * 10 * 8


@pytest.mark.parametrize(
    "compressor",
    [
        {"compress": "none"},
        {"compress": "topk", "fraction": 0.1},
        # the probe shrinks randk's gamma many times; test_compressed_gossip covers randk
        pytest.param({"compress": "randk", "fraction": 0.3}, marks=pytest.mark.slow),
        {"compress": "qsgd", "levels": 4},
        {"compress": "sign"},
    ],
    ids=lambda c: c["compress"],
)
def test_beer_converges_to_the_least_squares_optimum_with_every_compressor(compressor):
    error, _ = least_squares_error({"name": "beer", **compressor})
    assert error < 1e-2, error


def test_event_triggered_beer_talks_less_and_its_trackers_still_sum_to_the_gradients():
    beer = Beer(
        BeerConfig(a=0.1, compress="topk", fraction=0.25, gamma=0.4, v0=8.0, vy=3.0),
        ring(AGENTS),
        CONTEXT,
    )
    states, grads, _, transport = _steps(beer)
    for step, (_, v) in enumerate(states):
        torch.testing.assert_close(v.sum(0), grads[step].sum(0), rtol=0, atol=1e-4)
    assert 0 < transport.counters.events < 2 * AGENTS * STEPS, "some halves stay unsent"
