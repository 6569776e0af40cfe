"""LEAD: without compression it is exact diffusion (NIDS) written by hand; with any
compressor its duals sum to zero, so the average model follows the average gradient;
it sends one message a step; it reaches the known optimum of the synthetic
least-squares problem on data that differ between agents."""

from __future__ import annotations

import pytest
import torch
from small_runs import fixed_gradient_steps, least_squares_error

from murmur.algorithms.estimates import Segments
from murmur.algorithms.lead import Lead, LeadConfig
from murmur.algorithms.protocols import BuildContext
from murmur.errors import UsageError
from murmur.topology import metropolis_weights, ring

AGENTS, P, STEPS = 6, 40, 30
CONTEXT = BuildContext(seed=0, segments=Segments((24, 16)))


def _steps(algorithm: Lead, steps: int = STEPS):
    """The models and duals after each of ``steps`` steps of fixed gradients, the gradients
    and the transport."""
    return fixed_gradient_steps(algorithm, AGENTS, P, steps, lambda state: (state.x, state.dual))


def test_lead_without_compression_is_exact_diffusion_by_hand():
    """x_1 = W~ (x_0 - a g_0), then x_(k+1) = W~ (2 x_k - x_(k-1) - a (g_k - g_(k-1))),
    W~ = (I + W) / 2: NIDS with a constant step."""
    a = 0.1
    config = LeadConfig(a=a, eps=0.0, compress="none", gamma=1.0)
    states, grads, _ = _steps(Lead(config, ring(AGENTS), CONTEXT))
    half = (torch.eye(AGENTS) + metropolis_weights(ring(AGENTS)).to(torch.float32)) / 2
    before = torch.randn(P, generator=torch.Generator().manual_seed(0)).expand(AGENTS, P)
    x = half @ (before - a * grads[0])
    torch.testing.assert_close(states[0][0], x, rtol=1e-5, atol=1e-5)
    for step in range(1, STEPS):
        x, before = half @ (2 * x - before - a * (grads[step] - grads[step - 1])), x
        torch.testing.assert_close(states[step][0], x, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("compress", ["topk", "randk", "qsgd", "sign"])
def test_the_duals_sum_to_zero_and_the_average_follows_the_gradients(compress):
    a = 0.1
    config = LeadConfig(a=a, eps=0.0, compress=compress, fraction=0.25, gamma=0.4)
    states, grads, _ = _steps(Lead(config, ring(AGENTS), CONTEXT))
    average = torch.randn(P, generator=torch.Generator().manual_seed(0))
    for step, (x, dual) in enumerate(states):
        average = average - a * grads[step].mean(0)
        torch.testing.assert_close(dual.sum(0), torch.zeros(P), rtol=0, atol=1e-3)
        torch.testing.assert_close(x.mean(0), average, rtol=0, atol=1e-4)


def test_every_step_sends_one_message():
    config = LeadConfig(a=0.1, compress="topk", fraction=0.25, gamma=0.4)
    _, _, transport = _steps(Lead(config, ring(AGENTS), CONTEXT))
    assert transport.counters.messages == 2 * AGENTS * STEPS  # to two neighbours each
    assert transport.counters.bytes == 2 * AGENTS * STEPS * 10 * 8  # 10 entries of 40


def test_lead_has_no_automatic_gamma():
    with pytest.raises(UsageError, match="LEAD has no automatic gamma"):
        LeadConfig(gamma="auto")
    assert LeadConfig().gamma == 0.5


@pytest.mark.parametrize(
    "compressor",
    [
        {"compress": "none"},
        # top-k's biased residual needs a small gamma here (0.1 diverges, 0.05 converges)
        {"compress": "topk", "fraction": 0.1, "gamma": 0.05},
        {"compress": "qsgd", "levels": 4},
    ],
    ids=lambda c: c["compress"],
)
def test_lead_converges_to_the_least_squares_optimum_on_split_data(compressor):
    """Each agent holds other rows (a Dirichlet split of the targets' bins): DSGD at a
    constant step stops short of the optimum, LEAD's dual corrects it."""
    error, _ = least_squares_error({"name": "lead", **compressor})
    assert error < 1e-2, error
