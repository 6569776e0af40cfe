"""Mixing weights: spectra, stability checks, double stochasticity, sparse products."""

from __future__ import annotations

import math

import pytest
import torch

from murmur.errors import UsageError
from murmur.topology import (
    WEIGHTS,
    Graph,
    PerGraph,
    as_sparse,
    check_consensus_step,
    circular,
    complete,
    consensus_step,
    erdos_renyi,
    fastest_consensus_step,
    lambda_max,
    laplacian_weights,
    metropolis_weights,
    mixing_matrix,
    ring,
    star,
    torus,
    uniform_weights,
)

REGULAR = [ring(2), ring(6), circular(9, 4), complete(5), torus(12)]
IRREGULAR = [
    star(6),
    erdos_renyi(15, 0.3, seed=1),
    Graph(3, torch.tensor([[0, 1], [1, 2]]), "path"),
]


def graph_id(graph: Graph) -> str:
    return f"{graph.name}-{graph.agents}"


def safe_step(graph: Graph) -> float:
    return 1.0 / lambda_max(graph)


def weights_of(graph: Graph, kind: str) -> torch.Tensor:
    beta = safe_step(graph) if kind == "laplacian" else None
    return mixing_matrix(graph, kind, beta)


@pytest.mark.parametrize("agents", [4, 6, 10, 32])
def test_lambda_max_of_even_ring_is_four(agents: int) -> None:
    assert lambda_max(ring(agents)) == pytest.approx(4.0, abs=1e-12)


@pytest.mark.parametrize("agents", [5, 7])
def test_lambda_max_of_odd_ring_is_two_minus_two_cos(agents: int) -> None:
    expected = 2.0 - 2.0 * math.cos(2.0 * math.pi * (agents // 2) / agents)
    assert lambda_max(ring(agents)) == pytest.approx(expected, abs=1e-12)
    assert expected < 4.0


@pytest.mark.parametrize("agents", [2, 5, 9])
def test_lambda_max_of_complete_and_star_is_n(agents: int) -> None:
    assert lambda_max(complete(agents)) == pytest.approx(agents, abs=1e-12)
    assert lambda_max(star(agents)) == pytest.approx(agents, abs=1e-12)


def test_lambda_max_of_one_agent_is_zero() -> None:
    assert lambda_max(ring(1)) == 0.0


def test_consensus_step_message_names_key_value_and_bound() -> None:
    with pytest.raises(UsageError) as caught:
        check_consensus_step(ring(10), 0.9)
    assert str(caught.value) == (
        "algorithm.b=0.9 is too large for ring with 10 agents: "
        "b * lambda_max(L) = 3.6 must be < 2; use b < 0.5"
    )


@pytest.mark.parametrize("graph", [ring(10), complete(6), star(5), torus(9)], ids=graph_id)
def test_laplacian_weights_refuse_the_stability_limit_and_accept_below(graph: Graph) -> None:
    limit = 2.0 / lambda_max(graph)
    for beta in (limit, 1.01 * limit):
        with pytest.raises(UsageError, match="must be < 2"):
            laplacian_weights(graph, beta)
    weights = laplacian_weights(graph, 0.999 * limit)
    eigenvalues = torch.linalg.eigvalsh(weights)
    assert eigenvalues.min() > -1.0
    assert eigenvalues.max() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("beta", [0.0, -0.1, float("nan"), float("inf")])
def test_consensus_step_must_be_positive_and_finite(beta: float) -> None:
    with pytest.raises(UsageError, match="must be a finite number > 0"):
        check_consensus_step(ring(6), beta)


def test_consensus_step_error_uses_the_given_key() -> None:
    with pytest.raises(UsageError, match=r"^admm.step=1 is too large .* use step < 0\.5$"):
        check_consensus_step(ring(4), 1.0, key="admm.step")


def test_one_agent_accepts_any_positive_step() -> None:
    check_consensus_step(ring(1), 100.0)
    assert torch.equal(laplacian_weights(ring(1), 100.0), torch.ones(1, 1, dtype=torch.float64))


def test_laplacian_weights_are_i_minus_beta_l() -> None:
    graph = star(4)
    expected = torch.eye(4, dtype=torch.float64) - 0.2 * graph.laplacian()
    assert torch.equal(laplacian_weights(graph, 0.2), expected)


def test_complete_graph_with_step_one_over_n_averages_exactly() -> None:
    agents = 6
    weights = laplacian_weights(complete(agents), 1.0 / agents)
    expected = torch.full((agents, agents), 1.0 / agents, dtype=torch.float64)
    assert torch.allclose(weights, expected, atol=1e-15)


@pytest.mark.parametrize("kind", WEIGHTS)
@pytest.mark.parametrize("graph", REGULAR, ids=graph_id)
def test_weights_on_regular_graphs_are_symmetric_doubly_stochastic(kind: str, graph: Graph) -> None:
    assert_valid_mixing(graph, weights_of(graph, kind))


@pytest.mark.parametrize("kind", ["laplacian", "metropolis"])
@pytest.mark.parametrize("graph", IRREGULAR, ids=graph_id)
def test_weights_on_irregular_graphs_are_symmetric_doubly_stochastic(
    kind: str, graph: Graph
) -> None:
    assert_valid_mixing(graph, weights_of(graph, kind))


def assert_valid_mixing(graph: Graph, weights: torch.Tensor) -> None:
    """Symmetric, rows and columns sum to 1, zero off the graph, gossip converges."""
    agents = graph.agents
    ones = torch.ones(agents, dtype=torch.float64)
    assert weights.dtype == torch.float64
    assert weights.shape == (agents, agents)
    assert torch.equal(weights, weights.T)
    assert torch.allclose(weights.sum(dim=0), ones, atol=1e-12)
    assert torch.allclose(weights.sum(dim=1), ones, atol=1e-12)
    allowed = graph.adjacency() + torch.eye(agents, dtype=torch.float64)
    assert bool((weights[allowed == 0] == 0).all())
    # Repeated gossip drives every row of X to the network average.
    values = torch.randn(agents, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    mixed = torch.linalg.matrix_power(weights, 500) @ values
    assert torch.allclose(mixed, values.mean(dim=0).expand(agents, 3), atol=1e-8)


def test_metropolis_on_star_matches_hand_computation() -> None:
    # Hub degree 3, leaves degree 1: every edge weighs 1 / (1 + 3).
    expected = torch.tensor(
        [
            [0.25, 0.25, 0.25, 0.25],
            [0.25, 0.75, 0.00, 0.00],
            [0.25, 0.00, 0.75, 0.00],
            [0.25, 0.00, 0.00, 0.75],
        ],
        dtype=torch.float64,
    )
    assert torch.allclose(metropolis_weights(star(4)), expected, atol=1e-15)


def test_metropolis_on_path_matches_hand_computation() -> None:
    path = Graph(4, torch.tensor([[0, 1], [1, 2], [2, 3]]), "path")
    third = 1.0 / 3.0
    expected = torch.tensor(
        [
            [1 - third, third, 0, 0],
            [third, third, third, 0],
            [0, third, third, third],
            [0, 0, third, 1 - third],
        ],
        dtype=torch.float64,
    )
    assert torch.allclose(metropolis_weights(path), expected, atol=1e-15)


def test_uniform_on_circular_is_one_over_d_plus_one() -> None:
    weights = uniform_weights(circular(8, 4))
    assert torch.allclose(
        weights[0], torch.tensor([1.0, 1, 1, 0, 0, 0, 1, 1], dtype=torch.float64) / 5, atol=1e-15
    )


def test_uniform_refuses_irregular_graph() -> None:
    with pytest.raises(UsageError, match=r"star with 5 agents has degrees 1\.\.4; use metropolis"):
        uniform_weights(star(5))


def test_mixing_matrix_dispatches_by_name() -> None:
    graph = circular(7, 4)
    assert torch.equal(mixing_matrix(graph, "metropolis"), metropolis_weights(graph))
    assert torch.equal(mixing_matrix(graph, "uniform"), uniform_weights(graph))
    assert torch.equal(mixing_matrix(graph, "laplacian", 0.1), laplacian_weights(graph, 0.1))


def test_mixing_matrix_unknown_kind_lists_choices() -> None:
    with pytest.raises(UsageError, match="'max_degree' are unknown; choose one of") as caught:
        mixing_matrix(ring(4), "max_degree")
    assert ", ".join(WEIGHTS) in str(caught.value)


def test_mixing_matrix_laplacian_needs_beta() -> None:
    with pytest.raises(UsageError, match="need the consensus step algorithm.b"):
        mixing_matrix(ring(4), "laplacian")


@pytest.mark.parametrize("graph", [ring(8), star(6), erdos_renyi(20, 0.2, seed=2)], ids=graph_id)
def test_as_sparse_product_equals_dense_product(graph: Graph) -> None:
    weights = metropolis_weights(graph)
    sparse = as_sparse(weights)
    assert sparse.layout == torch.sparse_csr
    assert sparse.dtype == torch.float32
    assert sparse._nnz() == graph.agents + 2 * graph.num_edges
    stacked = torch.randn(graph.agents, 17, generator=torch.Generator().manual_seed(1))
    assert torch.allclose(sparse @ stacked, weights.to(torch.float32) @ stacked, atol=1e-6)
    assert torch.equal(sparse.to_dense(), weights.to(torch.float32))


def test_as_sparse_keeps_requested_dtype() -> None:
    weights = laplacian_weights(ring(5), 0.3)
    sparse = as_sparse(weights, dtype=torch.float64)
    stacked = torch.randn(5, 4, dtype=torch.float64)
    assert torch.allclose(sparse @ stacked, weights @ stacked, atol=1e-14)


def test_the_automatic_consensus_step_is_the_fastest_one() -> None:
    """Ring of 4: L has eigenvalues 0, 2, 2, 4, so b = 2 / (2 + 4); a number is checked."""
    assert fastest_consensus_step(ring(4)) == pytest.approx(1 / 3)
    assert consensus_step(ring(4), "auto") == pytest.approx(1 / 3)
    assert consensus_step(ring(4), 0.2) == 0.2
    with pytest.raises(UsageError, match="too large"):
        consensus_step(ring(4), 0.5)


def test_the_fastest_step_on_a_matching_averages_each_pair():
    """On a disconnected graph lambda_2 is the smallest nonzero eigenvalue."""
    matching = Graph(6, torch.tensor([[0, 3], [1, 4]]), "matching")
    assert fastest_consensus_step(matching) == pytest.approx(0.5)
    weights = laplacian_weights(matching, fastest_consensus_step(matching))
    assert weights[0, 3] == weights[0, 0] == pytest.approx(0.5) and weights[2, 2] == 1.0
    assert fastest_consensus_step(ring(6)) == pytest.approx(2 / (1 + 4))


def test_a_value_per_graph_is_made_once_for_the_runs_graph_and_kept_for_recent_ones():
    made = []

    def degrees(graph):
        made.append(graph.name)
        return graph.degrees()

    per_graph = PerGraph(degrees, ring(4), size=2)
    assert per_graph(ring(4)) is per_graph.value and made == ["ring"]
    assert per_graph(star(4)).tolist() == [3, 1, 1, 1]
    assert per_graph(star(4)) is per_graph(star(4)) and made == ["ring", "star"]
    per_graph(complete(4))
    per_graph(circular(5, 2))
    per_graph(star(4))  # pushed out by the two newer ones: made again
    assert made == ["ring", "star", "complete", "circular(2)", "star"]
