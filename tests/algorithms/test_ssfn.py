"""SSFN, dSSFN and asynchronous dSSFN against independent direct solutions (docs/methods/ssfn.md).

The reference solver below is written from the problem statement alone:
min ||T - Y O^T||_F^2 s.t. ||O||_F <= r has the solution O(nu) = C (G + nu I)^-1
with the multiplier nu >= 0 found by bisection on ||O(nu)|| = r.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch

from murmur.algorithms.arock import AsyncSolver, DssfnAsyncConfig, ball_constrained_solve
from murmur.algorithms.dssfn import DssfnConfig, SyncSolver
from murmur.algorithms.ssfn import (
    CentralSolver,
    SsfnConfig,
    admm_single,
    next_features,
    nme_db,
    one_hot,
    project_ball,
    random_weights,
    ridge_solution,
)
from murmur.config import TimingConfig
from murmur.metrics.counters import MessageCounters
from murmur.sim.events import ComputeTimes, EventLoop, LinkDelays
from murmur.sim.layer_network import SimulatedNetwork as Network
from murmur.topology import complete, ring
from murmur.training.layer_loop import LayerData, LayerHooks, train_layerwise

F64 = torch.float64


def direct_ball(gram: torch.Tensor, cross: torch.Tensor, radius: float | None) -> torch.Tensor:
    """argmin ||T - Y O^T||^2 s.t. ||O||_F <= radius, from G = Y^T Y (positive definite), C = T^T Y.

    Eigendecomposition G = U diag(s) U^T, O(nu) = C U diag(1 / (s + nu)) U^T, and
    bisection on the decreasing function ||O(nu)|| for the multiplier nu >= 0.
    """
    values, basis = torch.linalg.eigh(gram)
    rotated = cross @ basis

    def solution(nu: float) -> torch.Tensor:
        return (rotated / (values + nu)) @ basis.T

    def norm(nu: float) -> float:
        return float(torch.linalg.matrix_norm(solution(nu)))

    if radius is None or norm(0.0) <= radius:
        return solution(0.0)
    low, high = 0.0, 1.0
    while norm(high) > radius:
        low, high = high, 2.0 * high
    for _ in range(200):
        middle = 0.5 * (low + high)
        if norm(middle) > radius:
            low = middle
        else:
            high = middle
    return solution(high)


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return float(torch.linalg.matrix_norm(actual - expected) / torch.linalg.matrix_norm(expected))


def frobenius(matrix: torch.Tensor) -> float:
    return float(torch.linalg.matrix_norm(matrix))


def random_problem(seed: int, samples: int = 60, width: int = 6, classes: int = 3):
    """G = Y^T Y and C = T^T Y of a random least-squares problem with one-hot T."""
    stream = torch.Generator().manual_seed(seed)
    inputs = torch.randn(samples, width, generator=stream, dtype=F64)
    labels = torch.randint(0, classes, (samples,), generator=stream)
    targets = one_hot(labels, classes)
    return inputs, targets, inputs.T @ inputs, targets.T @ inputs


# ------------------------------------------------------------------ single-node solvers


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_admm_single_matches_direct_solution_with_active_constraint(seed):
    _, _, gram, cross = random_problem(seed)
    free = frobenius(direct_ball(gram, cross, None))
    radius = 0.4 * free
    assert free > radius  # the constraint binds
    result = admm_single(gram, cross, radius, mu=1.0 / 60.0, iterations=400).output
    assert relative_error(result, direct_ball(gram, cross, radius)) <= 1e-6
    assert frobenius(result) == pytest.approx(radius, rel=1e-6)


@pytest.mark.parametrize("seed", [3, 4])
def test_admm_single_with_inactive_constraint_is_least_squares(seed):
    inputs, targets, gram, cross = random_problem(seed)
    least_squares = torch.linalg.lstsq(inputs, targets).solution.T
    radius = 2.0 * frobenius(least_squares)
    result = admm_single(gram, cross, radius, mu=1.0 / 60.0, iterations=400).output
    assert relative_error(result, least_squares) <= 1e-6
    assert relative_error(result, direct_ball(gram, cross, radius)) <= 1e-6


def _ball_problem(seed: int, shift: float = 0.7):
    """ball_constrained_solve's inputs and the equivalent (G', C') of the plain problem.

    It returns W diag(1 / (a + 2 nu)) U^T with W = (2C - S) U and a = 2s + c, the
    stationary point of ||T - Y X^T||^2 + (c / 2)||X||^2 + <S, X> + nu ||X||^2:
    the plain problem with G' = G + (c / 2) I and C' = C - S / 2.
    """
    _, _, gram, cross = random_problem(seed, samples=40, width=7, classes=4)
    stream = torch.Generator().manual_seed(100 + seed)
    pushed = torch.randn(cross.shape, generator=stream, dtype=F64) * 5.0
    values, basis = torch.linalg.eigh(gram)
    rotated = (2.0 * cross - pushed) @ basis
    curvature = 2.0 * values + shift
    identity = torch.eye(gram.shape[0], dtype=F64)
    return (rotated, curvature, basis), (gram + 0.5 * shift * identity, cross - 0.5 * pushed)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("fraction", [0.5, 1e-3])
def test_ball_constrained_solve_matches_direct_solution_when_active(seed, fraction):
    arguments, (gram, cross) = _ball_problem(seed)
    radius = fraction * frobenius(direct_ball(gram, cross, None))
    result, shift = ball_constrained_solve(*arguments, radius)
    assert relative_error(result, direct_ball(gram, cross, radius)) <= 1e-9
    assert frobenius(result) == pytest.approx(radius, rel=1e-9)
    # a warm start on either side of the multiplier lands on the same one
    for start in (0.5 * shift, 2.0 * shift, 100.0 * shift):
        again, same = ball_constrained_solve(*arguments, radius, start)
        assert same == pytest.approx(shift, rel=1e-9)
        assert relative_error(again, result) <= 1e-9


@pytest.mark.parametrize("seed", [0, 1])
def test_ball_constrained_solve_inactive_or_unbounded_is_the_free_minimizer(seed):
    arguments, (gram, cross) = _ball_problem(seed)
    free = torch.linalg.solve(gram, cross.T).T
    loose = ball_constrained_solve(*arguments, 3.0 * frobenius(free))[0]
    unbounded = ball_constrained_solve(*arguments, None)[0]
    assert relative_error(loose, free) <= 1e-10
    assert relative_error(unbounded, free) <= 1e-10


def test_ridge_solution_equals_least_squares_on_the_stacked_system():
    inputs, targets, gram, cross = random_problem(5, samples=30, width=8)
    lam = 3.0
    stacked = torch.cat([inputs, math.sqrt(lam) * torch.eye(8, dtype=F64)])
    stacked_targets = torch.cat([targets, torch.zeros(8, 3, dtype=F64)])
    expected = torch.linalg.lstsq(stacked, stacked_targets).solution.T
    torch.testing.assert_close(ridge_solution(gram, cross, lam), expected, rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------ layer maps


def test_project_ball_scales_only_matrices_outside_the_ball_in_place():
    radius = 2.0
    stream = torch.Generator().manual_seed(0)
    directions = torch.randn(3, 2, 4, generator=stream, dtype=F64)
    directions /= torch.linalg.vector_norm(directions.flatten(1), dim=1).view(-1, 1, 1)
    stack = directions * torch.tensor([0.5, 3.0, 1.0], dtype=F64).view(-1, 1, 1) * radius
    before = stack.clone()
    returned = project_ball(stack, radius)
    assert returned.data_ptr() == stack.data_ptr()
    torch.testing.assert_close(stack[0], before[0], rtol=0, atol=0)
    torch.testing.assert_close(stack[1], radius * directions[1], rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(stack[2], before[2], rtol=1e-15, atol=1e-15)
    assert frobenius(stack[1]) == pytest.approx(radius, rel=1e-14)


def test_next_features_shape_sign_and_lossless_estimate():
    stream = torch.Generator().manual_seed(1)
    inputs = torch.randn(7, 4, generator=stream, dtype=F64)
    output = torch.randn(3, 4, generator=stream, dtype=F64)
    weights = random_weights(11, 1, 5, 4)
    features = next_features(inputs, output, weights)
    assert features.shape == (7, 2 * 3 + 5)
    assert bool((features >= 0).all())
    # [I, -I] ReLU([z, -z]) = z exactly: the layer loses nothing of the previous estimate.
    assert torch.equal(features[:, :3] - features[:, 3:6], inputs @ output.T)
    # The random part: each sample's row of Y R^T scaled to unit norm, then ReLU.
    random = inputs @ weights.T
    expected = (random / torch.linalg.vector_norm(random, dim=1, keepdim=True)).clamp(min=0)
    torch.testing.assert_close(features[:, 6:], expected, rtol=1e-14, atol=1e-15)


def test_next_features_random_rows_have_unit_norm_when_relu_keeps_them():
    stream = torch.Generator().manual_seed(2)
    inputs = torch.rand(9, 4, generator=stream, dtype=F64) + 0.1  # positive
    weights = torch.rand(6, 4, generator=stream, dtype=F64) + 0.1  # positive: no ReLU clipping
    features = next_features(inputs, torch.zeros(2, 4, dtype=F64), weights)
    norms = torch.linalg.vector_norm(features[:, 4:], dim=1)
    torch.testing.assert_close(norms, torch.ones(9, dtype=F64), rtol=1e-14, atol=0)
    # Rows (samples), not columns: the columns of this 9 x 6 block are not unit vectors.
    assert not torch.allclose(
        torch.linalg.vector_norm(features[:, 4:], dim=0), torch.ones(6, dtype=F64)
    )


def test_random_weights_prefix_range_and_seeding():
    many = random_weights(3, 2, 100, 50)
    assert many.dtype == F64 and many.shape == (100, 50)
    assert torch.equal(many[:4], random_weights(3, 2, 4, 50))
    assert float(many.abs().max()) < 1.0
    assert float(many.min()) < -0.99 and float(many.max()) > 0.99  # (-1, 1), not (0, 1)
    assert abs(float(many.mean())) < 0.03
    assert torch.equal(many, random_weights(3, 2, 100, 50))
    assert not torch.allclose(many, random_weights(3, 3, 100, 50))
    assert not torch.allclose(many, random_weights(4, 2, 100, 50))


def test_nme_db_is_twenty_log10_of_the_norm_ratio():
    assert nme_db(1.0, 100.0) == pytest.approx(-20.0, abs=1e-12)
    assert nme_db(4.0, 1.0) == pytest.approx(20.0 * math.log10(2.0), abs=1e-12)
    assert nme_db(2.5, 2.5) == pytest.approx(0.0, abs=1e-12)
    assert math.isfinite(nme_db(0.0, 1.0)) and nme_db(0.0, 1.0) < -1000


# ------------------------------------------------------------------ layer-wise training

CLASSES, FEATURES, SAMPLES, NODES = 3, 8, 200, 4
LAYERS, RANDOM_NODES, LAM, ALPHA, SEED = 2, 6, 1.0, 0.5, 7
MU = 0.1
"""With alpha = 0.5 the norm bound binds at layers 1 and 2 (multiplier ~ 20), which
conditions those layers' problems well enough for one mu to converge at every layer."""
RADIUS = ALPHA * math.sqrt(2 * CLASSES)
LAYER_ARGS = {
    "lam": LAM,
    "alpha": ALPHA,
    "layers": LAYERS,
    "nodes": RANDOM_NODES,
    "mu": MU,
    "tolerance": 0.0,
}
"""Fixed iteration counts (no early stop), so that messages can be counted exactly."""


def _classification(seed: int):
    stream = torch.Generator().manual_seed(seed)
    means = 1.5 * torch.randn(CLASSES, FEATURES, generator=stream, dtype=F64)
    labels = torch.arange(SAMPLES) % CLASSES
    inputs = 0.3 * (means[labels] + torch.randn(SAMPLES, FEATURES, generator=stream, dtype=F64))
    return inputs, labels


@functools.cache
def _data():
    x_train, y_train = _classification(0)
    x_test, y_test = _classification(1)
    shards = list(torch.randperm(SAMPLES, generator=torch.Generator().manual_seed(2)).chunk(NODES))
    return x_train, y_train, x_test, y_test, shards


@functools.cache
def _reference() -> tuple[torch.Tensor, ...]:
    """The centralized chain on pooled data: ridge at layer 0, direct ball solves after."""
    x_train, y_train, *_ = _data()
    targets, features = one_hot(y_train, CLASSES), x_train
    identity = torch.eye(FEATURES, dtype=F64)
    system = features.T @ features + LAM * identity
    output = torch.linalg.solve(system, (targets.T @ features).T).T
    outputs = [output]
    for layer in range(1, LAYERS + 1):
        weights = random_weights(SEED, layer, RANDOM_NODES, features.shape[1])
        features = next_features(features, output, weights)
        gram, cross = features.T @ features, targets.T @ features
        assert frobenius(direct_ball(gram, cross, None)) > RADIUS  # the bound binds
        output = direct_ball(gram, cross, RADIUS)
        outputs.append(output)
    return tuple(outputs)


def _network(graph, timing: TimingConfig) -> Network:
    return Network(
        graph=graph,
        counters=MessageCounters(graph.agents),
        clock=EventLoop(),
        compute=ComputeTimes(timing, graph.agents, seed=1),
        links=LinkDelays(timing),
    )


def _train(config, solver, graph, timing: TimingConfig | None = None, shards=None):
    x_train, y_train, x_test, y_test, node_shards = _data()
    network = _network(graph, timing or TimingConfig())
    records = []
    data = LayerData(
        x_train, y_train, x_test, y_test, node_shards if shards is None else shards, CLASSES
    )
    result = train_layerwise(
        config, solver, network, data, SEED, LayerHooks(on_record=records.append)
    )
    return result, network, records


SYNC_ITERATIONS, GOSSIP_ROUNDS, ASYNC_UPDATES = 100, 20, 200
LATENCY_BOUND = TimingConfig(latency=1e-2)


@functools.cache
def _sync_run(graph_name: str):
    graph = {"ring": ring, "complete": complete}[graph_name](NODES)
    config = DssfnConfig(admm_iterations=SYNC_ITERATIONS, gossip_rounds=GOSSIP_ROUNDS, **LAYER_ARGS)
    return _train(config, SyncSolver(config, graph), graph, LATENCY_BOUND)


@functools.cache
def _async_run(timing: TimingConfig, updates: int = ASYNC_UPDATES):
    config = DssfnAsyncConfig(admm_iterations=updates, **LAYER_ARGS)
    graph = ring(NODES)
    return _train(config, AsyncSolver(config, graph), graph, timing)


def _assert_every_node_matches_reference(history, tolerance):
    reference = _reference()
    assert len(history) == LAYERS + 1
    for layer, expected in enumerate(reference):
        assert history[layer].shape == (NODES, *expected.shape)
        for node in range(NODES):
            error = relative_error(history[layer][node], expected)
            assert error <= tolerance, (layer, node, error)


@pytest.mark.parametrize("graph_name", ["ring", "complete"])
def test_sync_dssfn_equals_centralized_ssfn_at_every_layer(graph_name):
    result, _, _ = _sync_run(graph_name)
    _assert_every_node_matches_reference(result.history, 1e-4)
    assert result.sizes == [2 * CLASSES + RANDOM_NODES] * LAYERS


@pytest.mark.parametrize("graph_name", ["ring", "complete"])
def test_sync_dssfn_counts_every_gossip_message_and_byte(graph_name):
    result, network, records = _sync_run(graph_name)
    degree_sum = int(network.graph.degrees().sum())
    assert degree_sum == {"ring": 2 * NODES, "complete": NODES * (NODES - 1)}[graph_name]
    per_layer = SYNC_ITERATIONS * GOSSIP_ROUNDS * degree_sum
    counters = network.counters
    assert counters.messages == per_layer * (LAYERS + 1)
    widths = [FEATURES] + [2 * CLASSES + RANDOM_NODES] * LAYERS
    assert counters.bytes == sum(per_layer * CLASSES * width * 8 for width in widths)
    assert (
        counters.events_per_agent.tolist()
        == [SYNC_ITERATIONS * GOSSIP_ROUNDS * (LAYERS + 1)] * NODES
    )
    assert [record["messages"] for record in records] == [
        per_layer * (layer + 1) for layer in range(LAYERS + 1)
    ]


def test_async_dssfn_converges_to_centralized_ssfn_at_every_layer():
    result, network, _ = _async_run(LATENCY_BOUND)
    _assert_every_node_matches_reference(result.history, 1e-4)
    counters = network.counters
    # Every node makes its quota; one that makes it early answers its neighbours until
    # they have made theirs, so a few make slightly more.
    assert min(counters.events_per_agent.tolist()) >= ASYNC_UPDATES * (LAYERS + 1)
    assert max(counters.events_per_agent.tolist()) <= 1.1 * ASYNC_UPDATES * (LAYERS + 1)
    assert counters.messages == 2 * counters.events  # ring: every update pushes to 2 neighbours


def test_async_dssfn_with_a_straggler_still_converges_at_every_layer():
    updates = 4 * ASYNC_UPDATES
    result, network, _ = _async_run(TimingConfig(stragglers=1, straggler_factor=4.0), updates)
    events = network.counters.events_per_agent.tolist()
    # The straggler (node 0) makes exactly its quota; its neighbours keep answering it.
    assert events[0] == updates * (LAYERS + 1)
    assert events[1] > 1.5 * events[0] and events[NODES - 1] > 1.5 * events[0]
    _assert_every_node_matches_reference(result.history, 1e-3)


def test_async_dssfn_takes_less_virtual_time_than_sync_when_latency_dominates():
    sync, sync_network, _ = _sync_run("ring")
    asynchronous, async_network, _ = _async_run(LATENCY_BOUND)
    assert sync_network.links.latency == async_network.links.latency == 1e-2
    assert 0 < asynchronous.virtual_seconds < sync.virtual_seconds
    # Each node's updates ride on one message latency at least once in a while;
    # sync pays GOSSIP_ROUNDS latencies per iteration.
    assert sync.virtual_seconds >= SYNC_ITERATIONS * GOSSIP_ROUNDS * (LAYERS + 1) * 1e-2


def test_central_solver_equals_direct_solutions_at_every_layer():
    config = SsfnConfig(admm_iterations=300, **LAYER_ARGS)
    graph = complete(1)
    result, network, _ = _train(
        config, CentralSolver(config), graph, shards=[torch.arange(SAMPLES)]
    )
    reference = _reference()
    assert len(result.history) == LAYERS + 1
    assert relative_error(result.history[0][0], reference[0]) <= 1e-10  # closed form
    for layer in range(1, LAYERS + 1):
        assert relative_error(result.history[layer][0], reference[layer]) <= 1e-6
        assert frobenius(result.history[layer][0]) == pytest.approx(RADIUS, rel=1e-6)
    assert result.virtual_seconds > 0
    assert network.counters.messages == 0


def _grow(**overrides):
    values = {
        **LAYER_ARGS,
        "alpha": 2.0,
        "layers": 3,
        "nodes": 20,
        "admm_iterations": 50,
        "grow": True,
        "node_step": 5,
        **overrides,
    }
    config = SsfnConfig(**values)
    result, _, records = _train(
        config, CentralSolver(config), complete(1), shards=[torch.arange(SAMPLES)]
    )
    assert len(result.history) == len(result.sizes) + 1 == len(records)
    return result


def test_growing_picks_widths_in_node_steps_within_the_limit():
    result = _grow(node_tolerance=0.0, layer_tolerance=0.0)
    assert 1 <= len(result.sizes) <= 3
    for width in result.sizes:
        added = width - 2 * CLASSES
        assert 5 <= added <= 20 and added % 5 == 0


def test_growing_stops_adding_nodes_when_no_step_improves_enough():
    result = _grow(node_tolerance=1e9, layer_tolerance=0.0)
    assert len(result.sizes) >= 1
    assert result.sizes == [2 * CLASSES] * len(result.sizes)  # growth starts at 0 random nodes


def test_growing_keeps_no_layer_when_no_layer_improves_enough():
    result = _grow(layer_tolerance=1e9)
    assert result.sizes == []
    assert len(result.history) == 1


@pytest.mark.parametrize("seed", [0, 1])
def test_admm_can_return_its_last_iterate_which_may_leave_the_ball(seed):
    """With the constraint active, the projected answer sits on the ball; the last
    iterate O, from which it was projected, lies outside and converges to it."""
    _, _, gram, cross = random_problem(seed)
    radius = 0.4 * frobenius(direct_ball(gram, cross, None))
    projected = admm_single(gram, cross, radius, mu=1.0 / 60.0, iterations=3).output
    iterate = admm_single(gram, cross, radius, mu=1.0 / 60.0, iterations=3, iterate=True).output
    assert frobenius(projected) == pytest.approx(radius, rel=1e-9)
    assert frobenius(iterate) > radius * 1.01
    converged = admm_single(gram, cross, radius, mu=1.0 / 60.0, iterations=400, iterate=True).output
    assert relative_error(converged, direct_ball(gram, cross, radius)) <= 1e-5


@pytest.mark.parametrize("seed", [0, 1])
def test_admm_stops_on_its_tolerance_near_the_optimum_and_says_how_long_it_took(seed):
    """Tolerance 1e-9: it stops well before the cap of 5000 with the residual met and the
    answer within 1e-6 of the direct solution; tolerance 0 runs every iteration."""
    _, _, gram, cross = random_problem(seed)
    radius = 0.4 * frobenius(direct_ball(gram, cross, None))
    found = admm_single(gram, cross, radius, mu=1.0 / 60.0, iterations=5000, tolerance=1e-9)
    assert found.iterations < 5000 and found.residual <= 1e-9
    assert relative_error(found.output, direct_ball(gram, cross, radius)) <= 1e-6
    capped = admm_single(gram, cross, radius, mu=1.0 / 60.0, iterations=7, tolerance=0.0)
    assert capped.iterations == 7 and capped.residual > 0
