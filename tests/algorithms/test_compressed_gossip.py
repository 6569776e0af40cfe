"""CHOCO-SGD, SPARQ-SGD and DETSGRAD's triggers and compression: equivalences
with the methods they reduce to, exact counts of what they send, and the known
optimum of the synthetic least-squares problem."""

from __future__ import annotations

import pytest
import torch
from small_runs import least_squares_error

from murmur.algorithms.choco import Choco, ChocoConfig, auto_gamma
from murmur.algorithms.compressors import TopK
from murmur.algorithms.detsgrad import Detsgrad, DetsgradConfig
from murmur.algorithms.detsgrad_gt import DetsgradGt, DetsgradGtConfig
from murmur.algorithms.dsgd import Dsgd, DsgdConfig
from murmur.algorithms.estimates import Segments
from murmur.algorithms.protocols import BuildContext
from murmur.algorithms.sparq import Sparq, SparqConfig
from murmur.sim.transport import InMemoryTransport
from murmur.topology import metropolis_weights, ring, torus

AGENTS, P, STEPS = 6, 40, 30
SEGMENTS = Segments((24, 4, 10, 2))
CONTEXT = BuildContext(seed=0, segments=SEGMENTS)


def _trajectory(algorithm, graph=None, steps: int = STEPS):
    """Run ``algorithm`` on fixed gradients; the final models and the transport."""
    graph = graph or ring(AGENTS)
    initial = torch.randn(graph.agents, P, generator=torch.Generator().manual_seed(0))
    grads = torch.randn(steps, graph.agents, P, generator=torch.Generator().manual_seed(1))
    transport = InMemoryTransport(graph, initial)
    state = algorithm.init(initial)
    for step in range(steps):
        state = algorithm.step(state, grads[step].clone(), step, transport)
    return algorithm.params(state), transport


def _choco(**fields) -> Choco:
    return Choco(ChocoConfig(a=0.1, **fields), ring(AGENTS), CONTEXT)


def test_choco_without_compression_is_dsgd_adapt_then_combine_with_the_same_weights():
    choco, choco_transport = _trajectory(_choco(compress="none", gamma=1.0))
    dsgd, dsgd_transport = _trajectory(
        Dsgd(DsgdConfig(a=0.1, weights="metropolis", order="atc"), ring(AGENTS))
    )
    torch.testing.assert_close(choco, dsgd, rtol=1e-5, atol=1e-5)
    assert choco_transport.counters.messages == dsgd_transport.counters.messages
    assert choco_transport.counters.bytes == dsgd_transport.counters.bytes


def test_topk_at_fraction_one_reproduces_the_uncompressed_trajectory_exactly():
    whole, _ = _trajectory(_choco(compress="topk", fraction=1.0, gamma=0.5))
    plain, _ = _trajectory(_choco(compress="none", gamma=0.5))
    assert torch.equal(whole, plain)


def test_qsgd_with_enough_levels_reproduces_the_uncompressed_trajectory():
    fine, _ = _trajectory(_choco(compress="qsgd", levels=2**24, gamma=0.5))
    plain, _ = _trajectory(_choco(compress="none", gamma=0.5))
    torch.testing.assert_close(fine, plain, rtol=1e-4, atol=1e-4)
    coarse, _ = _trajectory(_choco(compress="qsgd", levels=2, gamma=0.5))
    assert not torch.allclose(coarse, plain, rtol=1e-2, atol=1e-2)


def test_sparq_with_one_local_step_zero_threshold_and_no_compression_is_choco():
    sparq, sparq_transport = _trajectory(
        Sparq(
            SparqConfig(a=0.1, compress="none", gamma=0.7, local_steps=1, threshold=0.0),
            ring(AGENTS),
            CONTEXT,
        )
    )
    choco, choco_transport = _trajectory(_choco(compress="none", gamma=0.7))
    assert torch.equal(sparq, choco)
    assert sparq_transport.counters.events == choco_transport.counters.events == AGENTS * STEPS


def test_sparq_talks_only_at_synchronization_indices_and_when_triggered():
    sparq = Sparq(
        SparqConfig(a=0.1, compress="topk", fraction=0.25, local_steps=3, threshold=0.0),
        ring(AGENTS),
        CONTEXT,
    )
    _, transport = _trajectory(sparq)
    assert transport.counters.events_per_agent.tolist() == [STEPS // 3] * AGENTS
    # Each message: ceil(0.25 * 40) = 10 float32 values and 10 int32 indices, to 2 neighbours.
    assert transport.counters.bytes == AGENTS * (STEPS // 3) * 2 * 10 * 8
    quiet = Sparq(
        SparqConfig(a=0.1, compress="topk", fraction=0.25, local_steps=3, threshold=1e9),
        ring(AGENTS),
        CONTEXT,
    )
    _, silent = _trajectory(quiet)
    assert silent.counters.events == 0


def test_detsgrad_layer_trigger_sends_each_tensor_on_its_own():
    """v0 = 0: every tensor of every agent sends every step; one event and d_i messages each."""
    config = DetsgradConfig(a=0.1, b=0.2, v0=0.0, trigger="layer")
    layers, transport = _trajectory(Detsgrad(config, ring(AGENTS), CONTEXT))
    assert transport.counters.events == AGENTS * STEPS * len(SEGMENTS)
    assert transport.counters.messages == 2 * AGENTS * STEPS * len(SEGMENTS)
    assert transport.counters.bytes == 2 * AGENTS * STEPS * P * 4
    whole, _ = _trajectory(Detsgrad(DetsgradConfig(a=0.1, b=0.2, v0=0.0), ring(AGENTS)))
    torch.testing.assert_close(layers, whole, rtol=1e-5, atol=1e-5)


def test_detsgrad_layer_trigger_sends_only_the_tensors_that_drifted():
    """A gradient on the first tensor only: the others never reach their thresholds."""
    config = DetsgradConfig(a=0.1, b=0.2, v0=0.5, trigger="layer", d2=0.0, eps=0.0)
    algorithm = Detsgrad(config, ring(AGENTS), CONTEXT)
    initial = torch.zeros(AGENTS, P)
    transport = InMemoryTransport(ring(AGENTS), initial)
    state = algorithm.init(initial)
    grads = torch.zeros(AGENTS, P)
    grads[:, :24] = torch.arange(AGENTS, dtype=torch.float32).unsqueeze(1)
    for step in range(5):
        state = algorithm.step(state, grads.clone(), step, transport)
    sent = transport.counters.events_per_agent
    assert bool((sent[1:] >= 1).all()) and bool((sent <= 5).all())  # one tensor a step at most
    assert transport.counters.bytes == int(sent.sum()) * 2 * 24 * 4
    assert torch.equal(transport.sent[:, 24:], torch.zeros(AGENTS, 16))


def test_detsgrad_compression_keeps_what_it_leaves_out_for_later():
    """topk with error feedback: x - x^ carries what was not sent, so with the
    gradients stopped every estimate reaches its model."""
    config = DetsgradConfig(a=0.1, b=0.2, v0=0.0, compress="topk", fraction=0.25)
    algorithm = Detsgrad(config, ring(AGENTS), CONTEXT)
    initial = torch.zeros(AGENTS, P)
    transport = InMemoryTransport(ring(AGENTS), initial)
    state = algorithm.init(initial)
    push = torch.randn(AGENTS, P, generator=torch.Generator().manual_seed(2))
    state = algorithm.step(state, push.clone(), 0, transport)
    for step in range(1, 200):
        state = algorithm.step(state, torch.zeros(AGENTS, P), step, transport)
    torch.testing.assert_close(transport.sent, state.x, rtol=0, atol=1e-5)
    average = -0.1 * push.mean(0)
    torch.testing.assert_close(state.x, average.expand(AGENTS, P), rtol=0, atol=1e-4)


def test_auto_gamma_shrinks_with_compression_and_stays_in_the_stable_range():
    mixing = metropolis_weights(torus(4, 4))
    full = auto_gamma(mixing, TopK(1.0), 1000)
    assert 0 < auto_gamma(mixing, TopK(0.01), 1000) < full <= 1.0


@pytest.mark.parametrize(
    "algorithm",
    [
        {"name": "choco-sgd", "compress": "topk", "fraction": 0.1},
        {"name": "choco-sgd", "compress": "qsgd", "levels": 4},
        {"name": "sparq-sgd", "compress": "sign", "local_steps": 2, "threshold": 0.01},
        {"name": "detsgrad", "compress": "randk", "fraction": 0.3, "b": "auto", "v0": 0.5},
        {"name": "detsgrad", "trigger": "layer", "b": "auto", "v0": 0.5},
        {"name": "detsgrad-gt", "v0": 0.5, "vy": 0.05},
        {"name": "detsgrad-gt", "v0": 0.0, "vy": 0.0, "compress": "topk", "fraction": 0.1},
    ],
    ids=lambda a: "-".join(str(v) for v in a.values()),
)
def test_every_method_converges_to_the_least_squares_optimum(algorithm):
    """600 iterations leave each method within 1e-3 of the optimum."""
    error, result = least_squares_error(algorithm)
    assert error < 1e-2, error
    assert result.bytes < result.iterations * 5 * 2 * result.parameters.shape[1] * 4


def _gt(**fields) -> DetsgradGt:
    return DetsgradGt(DetsgradGtConfig(a=0.1, eps=0.0, **fields), ring(AGENTS))


def test_gradient_tracking_keeps_the_trackers_sum_equal_to_the_smoothed_gradients_sum():
    """sum_i y_i = sum_i m_i after every step, whichever agents sent."""
    algorithm = _gt(b=0.3, v0=60.0, vy=6.0, momentum=0.5)
    initial = torch.randn(AGENTS, P, generator=torch.Generator().manual_seed(0))
    grads = torch.randn(STEPS, AGENTS, P, generator=torch.Generator().manual_seed(1))
    transport = InMemoryTransport(ring(AGENTS), algorithm.initial_sent(initial))
    state = algorithm.init(initial)
    for step in range(STEPS):
        state = algorithm.step(state, grads[step].clone(), step, transport)
        torch.testing.assert_close(
            state.tracker.sum(0), state.grad_memory.sum(0), rtol=0, atol=1e-4
        )
    assert 0 < transport.counters.events < AGENTS * STEPS, "some agents stay silent"
    assert transport.counters.bytes == transport.counters.messages * 2 * P * 4


def test_gradient_tracking_without_thresholds_or_smoothing_is_the_textbook_rule():
    """v0 = vy = 0, mu = 0: y <- y - b L y + g_new - g_old, x <- x - b L x - a y, by hand."""
    b, a = 0.3, 0.1
    algorithm = _gt(b=b, v0=0.0, vy=0.0, momentum=0.0, d1=0.0, d2=0.0)
    initial = torch.randn(AGENTS, P, generator=torch.Generator().manual_seed(0))
    grads = torch.randn(STEPS, AGENTS, P, generator=torch.Generator().manual_seed(1))
    transport = InMemoryTransport(ring(AGENTS), algorithm.initial_sent(initial))
    state = algorithm.init(initial)
    laplacian = ring(AGENTS).laplacian().to(torch.float32)
    x, y, smoothed = initial.clone(), grads[0].clone(), grads[0]
    sent_x, sent_y = initial.clone(), torch.zeros(AGENTS, P)
    for step in range(STEPS):
        state = algorithm.step(state, grads[step].clone(), step, transport)
        if step > 0:
            y, smoothed = y + grads[step] - smoothed, grads[step]
        y = y - b * laplacian @ sent_y
        x = x - b * laplacian @ sent_x - a * y
        sent_x, sent_y = x.clone(), y.clone()
    torch.testing.assert_close(state.x, x, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(state.tracker, y, rtol=1e-4, atol=1e-4)


def test_compressed_gradient_tracking_sends_the_model_and_the_tracker_as_two_messages():
    """v0 = vy = 0: both halves go every step, each ceil(0.25 P) values and indices."""
    config = DetsgradGtConfig(a=0.1, b=0.2, v0=0.0, vy=0.0, compress="topk", fraction=0.25)
    algorithm = DetsgradGt(config, ring(AGENTS), CONTEXT)
    initial = torch.randn(AGENTS, P, generator=torch.Generator().manual_seed(0))
    grads = torch.randn(STEPS, AGENTS, P, generator=torch.Generator().manual_seed(1))
    transport = InMemoryTransport(ring(AGENTS), algorithm.initial_sent(initial))
    state = algorithm.init(initial)
    for step in range(STEPS):
        state = algorithm.step(state, grads[step].clone(), step, transport)
        torch.testing.assert_close(
            state.tracker.sum(0), state.grad_memory.sum(0), rtol=0, atol=1e-4
        )
    assert transport.counters.events == 2 * AGENTS * STEPS
    assert transport.counters.bytes == 2 * AGENTS * STEPS * 2 * 10 * 8
