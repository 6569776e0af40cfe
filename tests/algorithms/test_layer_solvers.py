"""What each layer solver computes in one step and the work it reports to its network.

A recording network stands in for the simulator: it gossips in memory and keeps
every work report, so the flop counts, message sizes and rounds are checked
against hand formulas (n = width, Q = classes).
"""

from __future__ import annotations

import pytest
import torch

from murmur.algorithms.arock import AsyncSolver, DssfnAsyncConfig, relax
from murmur.algorithms.dssfn import DssfnConfig, SyncSolver
from murmur.algorithms.protocols import AsyncWork, Ball, LayerProblem, Ridge, RoundsWork
from murmur.algorithms.ssfn import CentralSolver, SsfnConfig
from murmur.metrics.counters import MessageCounters
from murmur.sim.transport import InMemoryTransport
from murmur.topology import Graph, complete, ring

F64 = torch.float64
CLASSES, WIDTH = 2, 3


class _Recorder:
    """A LayerNetwork that records the work instead of timing it."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.counters = MessageCounters(graph.agents)
        self.alone: list[tuple[int, float]] = []
        self.rounds: list[RoundsWork] = []
        self.asynchronous: list[AsyncWork] = []

    @property
    def local_nodes(self) -> list[int]:
        return list(range(self.graph.agents))

    def live_neighbours(self, node: int) -> list[int]:
        return self.graph.neighbors(node)

    def transport_for(self, width: int, dtype: torch.dtype) -> InMemoryTransport:
        zeros = torch.zeros(self.graph.agents, width, dtype=dtype)
        return InMemoryTransport(self.graph, zeros, counters=self.counters)

    def total(self, values: torch.Tensor) -> torch.Tensor:
        return values.sum(dim=0)

    def work_alone(self, node: int, flops: float) -> None:
        self.alone.append((node, flops))

    def work_in_rounds(self, work: RoundsWork) -> None:
        self.rounds.append(work)

    def run_async(self, nodes, work: AsyncWork) -> None:
        self.asynchronous.append(work)


def _layer_data(nodes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Well-conditioned G_m (n, n) and C_m (Q, n) per node, float64."""
    stream = torch.Generator().manual_seed(5)
    features = torch.rand(nodes, 6, WIDTH, generator=stream, dtype=F64)
    grams = features.transpose(1, 2) @ features + torch.eye(WIDTH, dtype=F64)
    crosses = torch.rand(nodes, CLASSES, WIDTH, generator=stream, dtype=F64) - 0.5
    return grams, crosses


def _first_outputs(grams: torch.Tensor, crosses: torch.Tensor, mu: float) -> torch.Tensor:
    """O_m = C_m (G_m + I / mu)^-1, the first ADMM output from zero consensus and dual."""
    eye = torch.eye(WIDTH, dtype=F64)
    pairs = zip(grams, crosses, strict=True)
    return torch.stack([torch.linalg.solve(g + eye / mu, c.T).T for g, c in pairs])


def test_one_dssfn_iteration_with_exact_gossip_is_the_shrunk_mean_of_the_local_solutions():
    """Complete graph, one round: every node gets mean_m O_m / (1 + lam mu / M), in float64."""
    grams, crosses = _layer_data(3)
    config = DssfnConfig(mu=3.0, admm_iterations=1, gossip_rounds=1)
    network = _Recorder(complete(3))
    consensus = (
        SyncSolver(config, network.graph)
        .solve(LayerProblem(grams, crosses, Ridge(lam=0.5), [5.0, 6.0, 7.0]), network)
        .outputs
    )
    mean = _first_outputs(grams, crosses, 3.0).mean(dim=0)
    expected = (mean / (1.0 + 0.5 * 3.0 / 3)).expand(3, -1, -1)
    torch.testing.assert_close(consensus, expected, rtol=1e-13, atol=0.0)
    n, q = WIDTH, CLASSES
    assert network.rounds == [
        RoundsWork(
            setup_flops=[5.0 + n**3, 6.0 + n**3, 7.0 + n**3],
            update_flops=2.0 * q * n * n,
            mix_flops=[2.0 * (2 + 1) * q * n] * 3,
            message_bytes=q * n * 8,
            rounds=1,
            iterations=1,
        )
    ]
    assert network.counters.events_per_agent.tolist() == [1, 1, 1]


def test_dssfn_gossips_on_two_nodes_but_a_single_node_reports_no_rounds():
    """rounds = gossip_rounds x iterations from two nodes up; one node has nobody to
    gossip with."""
    config = DssfnConfig(mu=3.0, admm_iterations=2, gossip_rounds=4, tolerance=0.0)
    for nodes, rounds in ((2, 8), (1, 0)):
        grams, crosses = _layer_data(nodes)
        network = _Recorder(complete(nodes))
        SyncSolver(config, network.graph).solve(
            LayerProblem(grams, crosses, Ball(radius=10.0), [0.0] * nodes), network
        )
        assert [work.rounds for work in network.rounds] == [rounds]
        assert network.counters.events == nodes * rounds


def test_a_single_dssfn_node_keeps_its_own_solution_after_the_ridge_shrinkage():
    """One node, one iteration: C (G + I/mu)^-1 / (1 + lam mu), exactly in float64."""
    grams, crosses = _layer_data(1)
    config = DssfnConfig(mu=3.0, admm_iterations=1)
    network = _Recorder(complete(1))
    consensus = (
        SyncSolver(config, network.graph)
        .solve(LayerProblem(grams, crosses, Ridge(lam=0.5), [0.0]), network)
        .outputs
    )
    expected = _first_outputs(grams, crosses, 3.0) / (1.0 + 0.5 * 3.0)
    torch.testing.assert_close(consensus, expected, rtol=1e-13, atol=0.0)


def test_arock_reports_an_eigendecomposition_per_node_and_two_products_per_update():
    """setup + 4 n^3 per node, 2 x (2 Q n^2) per update, Q n values of the data's dtype."""
    grams, crosses = _layer_data(3)
    network = _Recorder(complete(3))
    AsyncSolver(DssfnAsyncConfig(mu=3.0), network.graph).solve(
        LayerProblem(grams, crosses, Ball(radius=1.0), [1.0, 2.0, 3.0]), network
    )
    n, q = WIDTH, CLASSES
    assert network.asynchronous == [
        AsyncWork(
            setup_flops=[1.0 + 4 * n**3, 2.0 + 4 * n**3, 3.0 + 4 * n**3],
            update_flops=2 * 2.0 * q * n * n,
            values=q * n,
            dtype=F64,
            relax=relax,
        )
    ]


def test_arock_charges_dense_products_even_on_the_range_of_a_low_rank_gram():
    """G_m of one sample has rank 1, but an update is charged 2 x (2 Q n^2), as the
    synchronous form's is: the two forms' clocks compare like for like."""
    stream = torch.Generator().manual_seed(6)
    features = torch.rand(2, 1, WIDTH, generator=stream, dtype=F64)
    grams = features.transpose(1, 2) @ features
    crosses = torch.rand(2, CLASSES, WIDTH, generator=stream, dtype=F64)
    network = _Recorder(complete(2))
    AsyncSolver(DssfnAsyncConfig(mu=3.0, admm_iterations=2), network.graph).solve(
        LayerProblem(grams, crosses, Ball(radius=1.0), [0.0, 0.0]), network
    )
    assert network.asynchronous[0].update_flops == 2 * 2.0 * CLASSES * WIDTH * WIDTH


def test_central_ssfn_reports_a_solve_for_the_ridge_and_admm_products_for_the_ball():
    """Ridge: n^3 / 3 + 2 Q n^2; ball: n^3 + iterations x 2 Q n^2, plus the setup."""
    grams, crosses = _layer_data(1)
    n, q = WIDTH, CLASSES
    network = _Recorder(complete(1))
    solver = CentralSolver(SsfnConfig(mu=3.0, admm_iterations=4, tolerance=0.0))
    solver.solve(LayerProblem(grams, crosses, Ridge(lam=0.5), [5.0]), network)
    solver.solve(LayerProblem(grams, crosses, Ball(radius=1.0), [7.0]), network)
    assert network.alone == [
        (0, pytest.approx(5.0 + n**3 / 3 + 2.0 * q * n * n)),
        (0, pytest.approx(7.0 + n**3 + 4 * 2.0 * q * n * n)),
    ]


def test_central_ssfn_refuses_layer_data_of_different_node_counts():
    """Grams and crosses must come one pair per node."""
    grams, crosses = _layer_data(2)
    with pytest.raises(ValueError):
        CentralSolver(SsfnConfig()).solve(
            LayerProblem(grams, crosses[:1], Ridge(lam=0.5), [0.0, 0.0]), _Recorder(complete(2))
        )


def _shrunk_mean(grams, crosses, mu: float, lam: float) -> torch.Tensor:
    """One ADMM iteration with exact averaging: mean_m O_m / (1 + lam mu / M)."""
    nodes = grams.shape[0]
    return _first_outputs(grams, crosses, mu).mean(dim=0) / (1.0 + lam * mu / nodes)


@pytest.mark.parametrize("tolerance", [1e-3, 1e-6])
def test_auto_gossip_agrees_within_its_consensus_tolerance(tolerance):
    """Ring of 8, one ADMM iteration: every node's consensus is the exact shrunk mean to
    within the tolerance (the stopping bound ||HE - E|| / (1 - lambda_2) guarantees it)."""
    grams, crosses = _layer_data(8)
    config = DssfnConfig(
        mu=3.0, admm_iterations=1, gossip_rounds="auto", consensus_tolerance=tolerance
    )
    network = _Recorder(ring(8))
    solution = SyncSolver(config, network.graph).solve(
        LayerProblem(grams, crosses, Ridge(lam=0.5), [0.0] * 8), network
    )
    expected = _shrunk_mean(grams, crosses, 3.0, 0.5)
    # The bound is on the whole stack of estimates; one node's share is at most all of it.
    stack = torch.linalg.vector_norm(solution.outputs - expected)
    assert stack <= tolerance * torch.linalg.vector_norm(expected.expand(8, -1, -1))
    assert solution.rounds[0] == network.rounds[0].rounds > 1


def test_auto_gossip_takes_more_rounds_on_a_larger_ring():
    """Mixing on a ring slows as it grows (1 - lambda_2 ~ 1/N^2): more rounds to agree."""
    used = []
    for nodes in (4, 16):
        grams, crosses = _layer_data(nodes)
        config = DssfnConfig(mu=3.0, admm_iterations=1, gossip_rounds="auto")
        network = _Recorder(ring(nodes))
        used.append(
            SyncSolver(config, network.graph)
            .solve(LayerProblem(grams, crosses, Ridge(lam=0.5), [0.0] * nodes), network)
            .rounds[0]
        )
    assert used[1] > 4 * used[0]


def test_warm_started_gossip_reaches_the_same_layer_with_fewer_rounds():
    """ADMM to 1e-8 on a ring of 6: starting each phase from the last estimates gives the
    optimum of the cold start to 1e-6, with fewer gossip rounds in all."""
    grams, crosses = _layer_data(6)
    found = {}
    for warm in (False, True):
        config = DssfnConfig(
            mu=3.0,
            admm_iterations=2000,
            tolerance=1e-8,
            gossip_rounds="auto",
            consensus_tolerance=1e-10,
            warm_start=warm,
        )
        network = _Recorder(ring(6))
        found[warm] = SyncSolver(config, network.graph).solve(
            LayerProblem(grams, crosses, Ball(radius=0.3), [0.0] * 6), network
        )
        assert all(found[warm].converged)
    cold, warm = found[False], found[True]
    error = torch.linalg.vector_norm(warm.outputs - cold.outputs)
    assert error <= 1e-6 * torch.linalg.vector_norm(cold.outputs)
    assert warm.rounds[0] < cold.rounds[0]


def test_the_ridge_layer_takes_mu0_and_the_ball_layers_mu():
    """One node, one iteration: C (G + I/mu0)^-1 / (1 + lam mu0) for the ridge with
    mu0 = 0.5; the ball layer still uses mu = 3 (its first output is C (G + I/3)^-1)."""
    grams, crosses = _layer_data(1)
    config = DssfnConfig(mu=3.0, mu0=0.5, admm_iterations=1, tolerance=0.0)
    network = _Recorder(complete(1))
    ridge = SyncSolver(config, network.graph).solve(
        LayerProblem(grams, crosses, Ridge(lam=0.5), [0.0]), network
    )
    expected = _first_outputs(grams, crosses, 0.5) / (1.0 + 0.5 * 0.5)
    torch.testing.assert_close(ridge.outputs, expected, rtol=1e-13, atol=0.0)
    ball = SyncSolver(config, network.graph).solve(
        LayerProblem(grams, crosses, Ball(radius=100.0), [0.0]), network
    )
    first = _first_outputs(grams, crosses, 3.0)
    torch.testing.assert_close(ball.outputs, first, rtol=1e-12, atol=0.0)
