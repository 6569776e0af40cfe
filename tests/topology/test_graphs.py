"""Graph families, canonical edges, connectivity and the edge-file reader."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from murmur.errors import UsageError
from murmur.topology import (
    GRAPHS,
    Graph,
    build_graph,
    circular,
    complete,
    erdos_renyi,
    from_edge_file,
    random_edge,
    random_matching,
    ring,
    star,
    torus,
)


def assert_canonical(graph: Graph) -> None:
    """Edges are int64 (E, 2), i < j, unique, rows sorted; adjacency is symmetric 0/1."""
    edges = graph.edges
    assert edges.dtype == torch.int64
    assert edges.shape == (graph.num_edges, 2)
    assert bool((edges[:, 0] < edges[:, 1]).all())
    keys = (edges[:, 0] * graph.agents + edges[:, 1]).tolist()
    assert keys == sorted(set(keys))
    adjacency = graph.adjacency()
    assert adjacency.dtype == torch.float64
    assert torch.equal(adjacency, adjacency.T)
    assert torch.equal(adjacency.diagonal(), torch.zeros(graph.agents, dtype=torch.float64))
    assert adjacency.sum().item() == 2 * graph.num_edges
    assert torch.equal(graph.degrees(), adjacency.sum(dim=1).to(torch.int64))


@pytest.mark.parametrize("agents", [3, 4, 7, 16])
def test_ring_has_n_edges_and_degree_two(agents: int) -> None:
    graph = ring(agents)
    assert_canonical(graph)
    assert graph.num_edges == agents
    assert graph.degrees().tolist() == [2] * agents
    assert graph.neighbors(0) == [1, agents - 1]
    assert graph.is_connected()


def test_ring_of_one_and_two_agents() -> None:
    assert ring(1).num_edges == 0
    assert ring(1).is_connected()
    assert ring(2).edges.tolist() == [[0, 1]]


@pytest.mark.parametrize(("agents", "degree"), [(5, 2), (8, 4), (9, 6), (10, 6), (11, 10)])
def test_circular_is_regular_with_n_d_over_2_edges(agents: int, degree: int) -> None:
    graph = circular(agents, degree)
    assert_canonical(graph)
    assert graph.num_edges == agents * degree // 2
    assert graph.degrees().tolist() == [degree] * agents
    half = degree // 2
    expected = sorted({(3 + k) % agents for k in range(-half, half + 1)} - {3})
    assert graph.neighbors(3) == expected
    assert graph.name == f"circular({degree})"


def test_circular_of_full_degree_is_complete() -> None:
    assert torch.equal(circular(7, 6).edges, complete(7).edges)


@pytest.mark.parametrize(
    ("agents", "degree", "message"),
    [(8, 3, "must be an even integer"), (8, 8, "2 <= degree <= 7"), (8, 0, "2 <= degree <= 7")],
)
def test_circular_refuses_bad_degree(agents: int, degree: int, message: str) -> None:
    with pytest.raises(UsageError, match="topology.degree") as caught:
        circular(agents, degree)
    assert message in str(caught.value)


@pytest.mark.parametrize("agents", [1, 2, 5, 12])
def test_complete_has_all_pairs(agents: int) -> None:
    graph = complete(agents)
    assert_canonical(graph)
    assert graph.num_edges == agents * (agents - 1) // 2
    assert graph.degrees().tolist() == [agents - 1] * agents


@pytest.mark.parametrize("agents", [2, 5, 9])
def test_star_hub_is_agent_zero(agents: int) -> None:
    graph = star(agents)
    assert_canonical(graph)
    assert graph.num_edges == agents - 1
    assert graph.degrees().tolist() == [agents - 1] + [1] * (agents - 1)
    assert graph.neighbors(0) == list(range(1, agents))
    assert graph.neighbors(agents - 1) == [0]


@pytest.mark.parametrize(("agents", "rows"), [(9, 3), (12, 3), (20, 4), (15, 5)])
def test_torus_with_sides_of_three_or_more_has_2n_edges(agents: int, rows: int) -> None:
    graph = torus(agents, rows)
    assert_canonical(graph)
    assert graph.num_edges == 2 * agents
    assert graph.degrees().tolist() == [4] * agents
    cols = agents // rows
    # Agent (1, 0) links to (0, 0), (2 % rows, 0), (1, 1) and wraps to (1, cols - 1).
    expected = {0, (2 % rows) * cols, cols + 1, cols + cols - 1}
    assert graph.neighbors(cols) == sorted(expected)


@pytest.mark.parametrize(
    ("agents", "rows", "edges", "degree"),
    [
        (4, 2, 4, 2),  # 2 x 2: a 4-cycle, each wrap-around repeats an edge
        (6, 2, 9, 3),  # 2 x 3: rings of 3 joined by 3 vertical edges
        (8, 2, 12, 3),  # 2 x 4
        (5, 1, 5, 2),  # 1 x 5: a ring, no self loops
        (2, 1, 1, 1),  # 1 x 2: one edge
        (1, 1, 0, 0),  # 1 x 1: one agent
    ],
)
def test_torus_small_sides_have_no_duplicates_or_self_loops(
    agents: int, rows: int, edges: int, degree: int
) -> None:
    graph = torus(agents, rows)
    assert_canonical(graph)
    assert graph.num_edges == edges
    assert graph.degrees().tolist() == [degree] * agents
    assert graph.is_connected()


def test_torus_default_rows_is_squarest_grid() -> None:
    assert torus(12).name == "torus(3x4)"
    assert torus(16).name == "torus(4x4)"
    assert torus(7).name == "torus(1x7)"


def test_torus_refuses_rows_that_do_not_divide() -> None:
    with pytest.raises(UsageError, match=r"topology.rows=4 must divide topology.agents=10"):
        torus(10, 4)


def test_erdos_renyi_is_a_function_of_its_seed() -> None:
    first = erdos_renyi(30, 0.2, seed=7)
    again = erdos_renyi(30, 0.2, seed=7)
    other = erdos_renyi(30, 0.2, seed=8)
    assert first == again
    assert not torch.equal(first.edges, other.edges)
    assert_canonical(first)
    assert first.is_connected() and other.is_connected()
    assert first.name == "erdos_renyi(0.2)"


def test_erdos_renyi_edge_density_matches_probability() -> None:
    graph = erdos_renyi(200, 0.1, seed=0)
    pairs = 200 * 199 // 2
    expected, spread = 0.1 * pairs, math.sqrt(0.1 * 0.9 * pairs)
    assert abs(graph.num_edges - expected) < 5 * spread


def test_erdos_renyi_with_probability_one_is_complete() -> None:
    assert torch.equal(erdos_renyi(6, 1.0, seed=3).edges, complete(6).edges)


def test_erdos_renyi_takes_the_first_connected_draw_of_one_generator() -> None:
    # Near the threshold ln(N)/N most single draws are disconnected.
    agents, probability = 40, 0.08
    pairs = torch.triu_indices(agents, agents, offset=1).T
    draws_needed = []
    for seed in range(5):
        generator = torch.Generator().manual_seed(seed)
        draws = 0
        while True:
            draws += 1
            linked = torch.rand(pairs.shape[0], generator=generator, dtype=torch.float64)
            candidate = Graph(agents, pairs[linked < probability], "candidate")
            if candidate.is_connected():
                break
        draws_needed.append(draws)
        assert torch.equal(erdos_renyi(agents, probability, seed=seed).edges, candidate.edges)
    assert max(draws_needed) > 1


def test_erdos_renyi_gives_up_with_advice() -> None:
    with pytest.raises(UsageError, match="raise topology.probability"):
        erdos_renyi(60, 0.005, seed=0)


@pytest.mark.parametrize("probability", [0.0, -0.1, 1.5])
def test_erdos_renyi_refuses_bad_probability(probability: float) -> None:
    with pytest.raises(UsageError, match="topology.probability"):
        erdos_renyi(10, probability, seed=0)


def test_graph_canonicalizes_given_edges() -> None:
    graph = Graph(4, torch.tensor([[3, 2], [1, 0], [0, 1], [2, 1]]), "hand")
    assert graph.edges.tolist() == [[0, 1], [1, 2], [2, 3]]


@pytest.mark.parametrize("edges", [[[0, 0]], [[0, 4]], [[-1, 2]]])
def test_graph_refuses_self_loops_and_out_of_range(edges: list[list[int]]) -> None:
    with pytest.raises(ValueError):
        Graph(4, torch.tensor(edges), "bad")


def test_laplacian_rows_sum_to_zero() -> None:
    laplacian = star(5).laplacian()
    assert torch.equal(laplacian.diagonal(), torch.tensor([4.0, 1, 1, 1, 1], dtype=torch.float64))
    assert torch.equal(laplacian.sum(dim=1), torch.zeros(5, dtype=torch.float64))


def test_is_connected_finds_two_components() -> None:
    two_triangles = Graph(6, torch.tensor([[0, 1], [1, 2], [0, 2], [3, 4], [4, 5], [3, 5]]), "x")
    assert not two_triangles.is_connected()
    isolated = Graph(3, torch.tensor([[0, 1]]), "x")
    assert not isolated.is_connected()
    # A long path whose indices are out of order still counts as connected.
    order = torch.randperm(50, generator=torch.Generator().manual_seed(0))
    path = Graph(50, torch.stack([order[:-1], order[1:]], dim=1), "path")
    assert path.is_connected()


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_edge_file_reads_comments_blanks_and_duplicates(tmp_path: Path) -> None:
    path = write(tmp_path / "g.txt", "# a square\n0 1\n\n2 1  # middle\n2 3\n3 0\n1 0\n")
    graph = from_edge_file(path)
    assert graph.agents == 4
    assert graph.edges.tolist() == [[0, 1], [0, 3], [1, 2], [2, 3]]
    assert graph.name == "edges(g.txt)"
    assert from_edge_file(path, agents=6).agents == 6


def test_build_graph_refuses_disconnected_edge_file(tmp_path: Path) -> None:
    path = write(tmp_path / "split.txt", "0 1\n1 2\n3 4\n4 5\n")
    assert not from_edge_file(path).is_connected()
    with pytest.raises(UsageError, match=r"disconnected \(2 components; agent 3") as caught:
        build_graph("edges", None, edges_file=path)
    assert "topology.edges_file" in str(caught.value)


def test_build_graph_refuses_isolated_agents(tmp_path: Path) -> None:
    path = write(tmp_path / "g.txt", "0 1\n1 2\n")
    with pytest.raises(UsageError, match="disconnected"):
        build_graph("edges", 4, edges_file=path)


def test_edge_file_missing(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="topology.edges_file=.*is not an existing file"):
        from_edge_file(tmp_path / "absent.txt")


@pytest.mark.parametrize("bad_line", ["0 x", "1", "0 1 2", "-1 2", "0.5 1"])
def test_edge_file_malformed_line_names_its_number(tmp_path: Path, bad_line: str) -> None:
    path = write(tmp_path / "g.txt", f"# header\n0 1\n\n{bad_line}\n")
    with pytest.raises(UsageError, match="line 4: expected two agent indices"):
        from_edge_file(path)


def test_edge_file_index_out_of_range(tmp_path: Path) -> None:
    path = write(tmp_path / "g.txt", "0 1\n1 5\n")
    with pytest.raises(UsageError, match="line 2: agent 5 is out of range for topology.agents=4"):
        from_edge_file(path, agents=4)


def test_edge_file_self_loop(tmp_path: Path) -> None:
    path = write(tmp_path / "g.txt", "0 1\n2 2\n")
    with pytest.raises(UsageError, match="line 2: self loop 2 2"):
        from_edge_file(path)


def test_edge_file_without_edges(tmp_path: Path) -> None:
    path = write(tmp_path / "g.txt", "# nothing\n")
    with pytest.raises(UsageError, match="has no edges"):
        from_edge_file(path)


@pytest.mark.parametrize(
    ("kind", "options", "edges"),
    [
        ("ring", {}, 8),
        ("circular", {"degree": 4}, 16),
        ("complete", {}, 28),
        ("star", {}, 7),
        ("torus", {"rows": 2}, 12),
        ("erdos_renyi", {"probability": 1.0}, 28),
    ],
)
def test_build_graph_dispatches_by_name(kind: str, options: dict, edges: int) -> None:
    graph = build_graph(kind, 8, **options)
    assert graph.agents == 8
    assert graph.num_edges == edges
    assert graph.name.startswith(kind)


def test_build_graph_passes_seed_to_erdos_renyi() -> None:
    built = build_graph("erdos_renyi", 20, probability=0.3, seed=5)
    assert built == erdos_renyi(20, 0.3, seed=5)


def test_build_graph_unknown_name_lists_choices() -> None:
    with pytest.raises(UsageError, match="topology.graph='grid' is unknown") as caught:
        build_graph("grid", 4)
    assert ", ".join(GRAPHS) in str(caught.value)


@pytest.mark.parametrize("agents", [0, -3])
def test_build_graph_refuses_no_agents(agents: int) -> None:
    with pytest.raises(UsageError, match=f"topology.agents={agents} must be an integer >= 1"):
        build_graph("ring", agents)


@pytest.mark.parametrize(
    ("kind", "field"),
    [("circular", "degree"), ("erdos_renyi", "probability"), ("edges", "edges_file")],
)
def test_build_graph_names_a_missing_parameter(kind: str, field: str) -> None:
    with pytest.raises(UsageError, match=f"needs topology.{field}"):
        build_graph(kind, 6)


@pytest.mark.parametrize("index", ["²", "١", "１", "⑦", "1²"])
def test_edge_file_refuses_digits_other_than_0_to_9(tmp_path: Path, index: str) -> None:
    path = write(tmp_path / "g.txt", f"0 1\n{index} 0\n")
    with pytest.raises(UsageError, match="line 2: expected two agent indices 'i j' in digits 0-9"):
        from_edge_file(path)


def test_edge_file_accepts_leading_zeros(tmp_path: Path) -> None:
    path = write(tmp_path / "g.txt", "00 001\n" + "0" * 5000 + "1 2\n")
    assert from_edge_file(path).edges.tolist() == [[0, 1], [1, 2]]


def test_edge_file_that_is_not_utf8_names_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "g.txt"
    path.write_bytes(b"0 1\n1 2 # caf\xe9\n")
    with pytest.raises(UsageError, match=r"topology.edges_file=.* is not UTF-8 text \(byte 13\)"):
        from_edge_file(path)


@pytest.mark.parametrize("index", [str(2**63), "9" * 5000])
@pytest.mark.parametrize("agents", [None, 4])
def test_edge_file_index_beyond_int64(tmp_path: Path, index: str, agents: int | None) -> None:
    path = write(tmp_path / "g.txt", f"0 1\n1 {index}\n")
    with pytest.raises(UsageError, match="line 2: an agent index is larger than 922337"):
        from_edge_file(path, agents=agents)


@pytest.mark.parametrize("index", [str(10**15), str(2**63 - 1), "6"])
def test_edge_file_index_far_beyond_its_edges_is_refused(tmp_path: Path, index: str) -> None:
    path = write(tmp_path / "g.txt", f"0 1\n1 2\n{index} 2\n")
    with pytest.raises(UsageError) as caught:
        from_edge_file(path)
    assert f"line 3: agent {index} would make {int(index) + 1} agents" in str(caught.value)
    assert "3 distinct edges reach at most 6" in str(caught.value)


def test_edge_file_index_within_reach_of_its_edges_is_kept(tmp_path: Path) -> None:
    path = write(tmp_path / "g.txt", "0 1\n1 0\n2 5\n1 2\n")
    assert from_edge_file(path).agents == 6


def test_a_random_matching_of_a_complete_graph_pairs_every_agent_once():
    stream = torch.Generator().manual_seed(0)
    drawn = [random_matching(complete(8), stream) for _ in range(20)]
    for graph in drawn:
        assert graph.num_edges == 4 and graph.degrees().tolist() == [1] * 8
        assert graph.name == "matching(complete)"
    assert len({tuple(graph.edges.flatten().tolist()) for graph in drawn}) > 10


def test_a_random_matching_of_a_ring_is_maximal_and_uses_the_rings_edges():
    stream = torch.Generator().manual_seed(1)
    edges = {tuple(edge) for edge in ring(7).edges.tolist()}
    for _ in range(20):
        matching = random_matching(ring(7), stream)
        assert {tuple(edge) for edge in matching.edges.tolist()} <= edges
        matched = set(matching.edges.flatten().tolist())
        assert len(matched) == 2 * matching.num_edges
        assert all(i in matched or j in matched for i, j in edges)  # maximal


def test_one_random_edge_is_an_edge_of_the_graph_and_an_edgeless_graph_gives_itself():
    stream = torch.Generator().manual_seed(2)
    edges = {tuple(edge) for edge in star(6).edges.tolist()}
    picked = {tuple(random_edge(star(6), stream).edges[0].tolist()) for _ in range(40)}
    assert picked == edges
    assert random_edge(ring(1), stream) == ring(1)


def test_components_counts_agents_without_edges_as_their_own():
    assert ring(5).components() == 1
    assert Graph(5, torch.tensor([[0, 1], [2, 3]]), "pairs").components() == 3
