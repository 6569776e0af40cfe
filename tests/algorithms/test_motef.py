"""MoTEF: lambda = 1 is BEER step for step (to rounding); without compression it is momentum
tracking written by hand; with any compressor the trackers follow the momenta's sum;
it reaches the known optimum of the synthetic least-squares problem."""

from __future__ import annotations

import pytest
import torch
from small_runs import fixed_gradient_steps, least_squares_error

from murmur.algorithms.beer import Beer, BeerConfig
from murmur.algorithms.estimates import Segments
from murmur.algorithms.motef import Motef, MotefConfig
from murmur.algorithms.protocols import BuildContext
from murmur.errors import UsageError
from murmur.topology import metropolis_weights, ring

AGENTS, P, STEPS = 6, 40, 30
CONTEXT = BuildContext(seed=0, segments=Segments((24, 16)))


def _steps(algorithm: Beer, steps: int = STEPS):
    """The model and tracker after each of ``steps`` steps of fixed gradients, the gradients
    and the transport."""
    return fixed_gradient_steps(algorithm, AGENTS, P, steps, lambda state: (state.x, state.tracker))


def test_motef_with_lambda_one_is_beer_step_for_step():
    settings = {"a": 0.1, "compress": "topk", "fraction": 0.25, "gamma": 0.4}
    beer, _, beer_sent = _steps(Beer(BeerConfig(**settings), ring(AGENTS), CONTEXT))
    motef, _, motef_sent = _steps(Motef(MotefConfig(**settings, lam=1.0), ring(AGENTS), CONTEXT))
    for (x, v), (y, w) in zip(beer, motef, strict=True):
        torch.testing.assert_close(y, x, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(w, v, rtol=1e-5, atol=1e-5)
    assert motef_sent.counters.bytes == beer_sent.counters.bytes


def test_motef_without_compression_is_momentum_tracking_by_hand():
    """m_0 = g_0, m_k = (1 - l) m_(k-1) + l g_k; v_k = W v_(k-1) + m_k - m_(k-1)
    (v_0 = m_0); x_(k+1) = W x_k - a v_k."""
    a, lam = 0.1, 0.3
    config = MotefConfig(a=a, eps=0.0, compress="none", gamma=1.0, lam=lam)
    states, grads, _ = _steps(Motef(config, ring(AGENTS), CONTEXT))
    mixing = metropolis_weights(ring(AGENTS)).to(torch.float32)
    x = torch.randn(P, generator=torch.Generator().manual_seed(0)).expand(AGENTS, P)
    v, m = torch.zeros(AGENTS, P), torch.zeros(AGENTS, P)
    for step in range(STEPS):
        weight = 1.0 if step == 0 else lam
        m_new = (1 - weight) * m + weight * grads[step]
        v, m = mixing @ v + m_new - m, m_new
        x = mixing @ x - a * v
        torch.testing.assert_close(states[step][0], x, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(states[step][1], v, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("compress", ["topk", "randk", "qsgd", "sign"])
def test_the_trackers_sum_is_the_momenta_sum_whatever_the_compressor_drops(compress):
    lam = 0.2
    motef = Motef(
        MotefConfig(a=0.1, compress=compress, fraction=0.25, gamma=0.4, lam=lam),
        ring(AGENTS),
        CONTEXT,
    )
    states, grads, _ = _steps(motef)
    momentum = grads[0].sum(0)
    for step, (_, v) in enumerate(states):
        if step:
            momentum = (1 - lam) * momentum + lam * grads[step].sum(0)
        torch.testing.assert_close(v.sum(0), momentum, rtol=0, atol=1e-4)


def test_every_step_sends_the_model_and_the_tracker_as_two_messages():
    motef = Motef(
        MotefConfig(a=0.1, compress="topk", fraction=0.25, gamma=0.4), ring(AGENTS), CONTEXT
    )
    _, _, transport = _steps(motef)
    assert transport.counters.messages == 2 * 2 * AGENTS * STEPS
    assert transport.counters.bytes == 2 * AGENTS * STEPS * 2 * 10 * 8


@pytest.mark.parametrize("lam", [0.0, -0.1, 1.5])
def test_a_momentum_weight_outside_zero_to_one_is_refused(lam):
    with pytest.raises(UsageError, match="algorithm.lam must be in"):
        MotefConfig(lam=lam)


@pytest.mark.parametrize(
    "compressor",
    [
        # lambda = 1 is BEER, whose convergence with every compressor is tested
        pytest.param({"compress": "none"}, marks=pytest.mark.slow),
        {"compress": "topk", "fraction": 0.1},
        pytest.param({"compress": "qsgd", "levels": 4}, marks=pytest.mark.slow),
    ],
    ids=lambda c: c["compress"],
)
def test_motef_converges_to_the_least_squares_optimum(compressor):
    error, _ = least_squares_error({"name": "motef", "lam": 0.5, **compressor})
    assert error < 1e-2, error
