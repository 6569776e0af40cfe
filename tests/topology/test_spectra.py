"""Laplacian spectra: closed forms and the sparse solver against the dense eigensolver."""

from __future__ import annotations

import pytest
import torch

from murmur.config import build_config
from murmur.errors import UsageError
from murmur.topology import (
    as_sparse,
    circular,
    complete,
    erdos_renyi,
    exponential,
    fastest_consensus_step,
    laplacian_extremes,
    mixing_matrix,
    mixing_operator,
    one_peer_exponential,
    random_matching,
    ring,
    star,
    torus,
)
from murmur.topology.graphs import Graph
from murmur.topology.spectra import closed_form_eigenvalues, sparse_extremes, sparse_laplacian

STRUCTURED = [
    ring(2),
    ring(3),
    ring(10),
    circular(11, 4),
    circular(10, 4),
    complete(7),
    star(2),
    star(3),
    star(9),
    torus(12),
    torus(8, rows=2),
    torus(6, rows=1),
    exponential(2),
    exponential(6),
    exponential(8),
    exponential(13),
    exponential(16),
    one_peer_exponential(exponential(12), 3),
    random_matching(complete(9), torch.Generator().manual_seed(0)),
]


@pytest.mark.parametrize("graph", STRUCTURED, ids=lambda graph: f"{graph.name}-{graph.agents}")
def test_the_closed_form_spectrum_is_the_dense_laplacians(graph):
    assert graph.structure is not None
    dense = torch.linalg.eigvalsh(graph.laplacian())
    closed = closed_form_eigenvalues(graph.agents, graph.structure)
    torch.testing.assert_close(closed, dense, rtol=0, atol=1e-10)


def test_the_sparse_solver_finds_the_dense_extremes_of_a_random_graph():
    graph = erdos_renyi(300, 0.03, seed=4)
    values = torch.linalg.eigvalsh(graph.laplacian())
    second, largest = sparse_extremes(sparse_laplacian(graph.agents, graph.edges), 1)
    assert second == pytest.approx(float(values[1]), rel=1e-7)
    assert largest == pytest.approx(float(values[-1]), rel=1e-7)


def test_a_large_graph_without_a_closed_form_uses_the_sparse_solver_not_a_dense_matrix(
    monkeypatch,
):
    graph = erdos_renyi(300, 0.03, seed=4)
    plain = Graph(graph.agents, graph.edges, "plain")  # no structure
    expected = laplacian_extremes(plain)
    monkeypatch.setattr("murmur.topology.weights.DENSE_LIMIT", 100)
    monkeypatch.setattr(Graph, "laplacian", lambda self: pytest.fail("dense Laplacian"))
    again = Graph(graph.agents, graph.edges, "plain again")
    assert laplacian_extremes(again) == pytest.approx(expected, rel=1e-7)


def test_ten_thousand_agents_on_an_exponential_graph_get_their_step_in_closed_form():
    graph = exponential(10_000)
    assert graph.num_edges == 10_000 * 14 and bool((graph.degrees() == 28).all())
    second, largest = laplacian_extremes(graph)
    assert 0 < second < largest
    assert fastest_consensus_step(graph) == pytest.approx(2 / (second + largest))
    assert fastest_consensus_step(one_peer_exponential(graph, 5)) == 0.5


@pytest.mark.parametrize("kind", ["laplacian", "metropolis", "uniform"])
@pytest.mark.parametrize("graph", [ring(7), exponential(16), torus(12)], ids=lambda g: g.name)
def test_the_sparse_operator_is_the_dense_matrix_doubly_stochastic(kind, graph):
    beta = fastest_consensus_step(graph) if kind == "laplacian" else None
    operator = mixing_operator(graph, kind, beta, dtype=torch.float64)
    dense = mixing_matrix(graph, kind, beta)
    assert torch.equal(operator.to_dense(), dense)
    torch.testing.assert_close(dense.sum(dim=0), torch.ones(graph.agents, dtype=torch.float64))
    torch.testing.assert_close(dense, dense.T)
    assert torch.equal(as_sparse(dense).to_dense(), mixing_operator(graph, kind, beta).to_dense())


def test_one_peer_needs_the_exponential_graph():
    raw = {"algorithm": {"name": "dsgd"}, "topology": {"graph": "ring", "varying": "one_peer"}}
    with pytest.raises(UsageError, match='topology.graph = "exponential"'):
        build_config(raw)


def test_a_large_erdos_renyi_graph_is_drawn_by_its_edges_with_the_expected_degree():
    from murmur.topology.graphs import ERDOS_RENYI_FLIPS_UP_TO

    agents = 3 * ERDOS_RENYI_FLIPS_UP_TO
    degrees = []
    for seed in range(3):
        graph = erdos_renyi(agents, 12 / (agents - 1), seed=seed)
        assert graph.is_connected()
        degrees.append(float(graph.degrees().double().mean()))
        again = erdos_renyi(agents, 12 / (agents - 1), seed=seed)
        assert torch.equal(graph.edges, again.edges)  # a pure function of the seed
    # The mean degree of G(N, p) has sd sqrt(2 p (1 - p) / N) * (N - 1) ~ 0.06 here.
    assert all(abs(degree - 12) < 0.3 for degree in degrees)
    assert len(set(degrees)) == 3


def test_expected_degree_sets_the_erdos_renyi_probability():
    raw = {
        "algorithm": {"name": "dsgd"},
        "topology": {"graph": "erdos_renyi", "agents": 101, "expected_degree": 5},
    }
    assert build_config(raw).topology.edge_probability == 0.05
    raw["topology"]["expected_degree"] = 101
    with pytest.raises(UsageError, match="topology.expected_degree must be from 0 to"):
        build_config(raw)


def test_the_random_matching_keeps_the_edges_of_the_one_by_one_greedy_pass():
    def greedy(graph, stream):
        matched, kept = set(), []
        for edge in torch.randperm(graph.num_edges, generator=stream).tolist():
            i, j = graph.edges[edge].tolist()
            if i not in matched and j not in matched:
                matched |= {i, j}
                kept.append(edge)
        return graph.edges[sorted(kept)]

    for graph in (complete(9), exponential(64), torus(12), erdos_renyi(80, 0.1, seed=3)):
        for seed in range(5):
            drawn = random_matching(graph, torch.Generator().manual_seed(seed))
            assert torch.equal(drawn.edges, greedy(graph, torch.Generator().manual_seed(seed)))
