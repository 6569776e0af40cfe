"""What each layer solver computes in one step and the work it reports to its network.

A recording network stands in for the simulator: it gossips in memory and keeps
every work report, so the flop counts, message sizes and rounds are checked
against hand formulas (n = width, Q = classes).
"""

from __future__ import annotations

import pytest
import torch

from murmur.algorithms.arock import AsyncSolver, DssfnAsyncConfig
from murmur.algorithms.dssfn import DssfnConfig, SyncSolver
from murmur.algorithms.protocols import AsyncWork, Ball, Ridge, RoundsWork
from murmur.algorithms.ssfn import CentralSolver, SsfnConfig
from murmur.metrics.counters import MessageCounters
from murmur.sim.transport import InMemoryTransport
from murmur.topology import Graph, complete

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
    consensus = SyncSolver(config, network.graph).solve(
        grams, crosses, Ridge(lam=0.5), [5.0, 6.0, 7.0], network
    ).outputs
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
            grams, crosses, Ball(radius=10.0), [0.0] * nodes, network
        )
        assert [work.rounds for work in network.rounds] == [rounds]
        assert network.counters.events == nodes * rounds


def test_a_single_dssfn_node_keeps_its_own_solution_after_the_ridge_shrinkage():
    """One node, one iteration: C (G + I/mu)^-1 / (1 + lam mu), exactly in float64."""
    grams, crosses = _layer_data(1)
    config = DssfnConfig(mu=3.0, admm_iterations=1)
    network = _Recorder(complete(1))
    consensus = SyncSolver(config, network.graph).solve(
        grams, crosses, Ridge(lam=0.5), [0.0], network
    ).outputs
    expected = _first_outputs(grams, crosses, 3.0) / (1.0 + 0.5 * 3.0)
    torch.testing.assert_close(consensus, expected, rtol=1e-13, atol=0.0)


def test_arock_reports_an_eigendecomposition_per_node_and_two_products_per_update():
    """setup + 4 n^3 per node, 2 x (2 Q n^2) per update, Q n values of the data's dtype."""
    grams, crosses = _layer_data(3)
    network = _Recorder(complete(3))
    AsyncSolver(DssfnAsyncConfig(mu=3.0), network.graph).solve(
        grams, crosses, Ball(radius=1.0), [1.0, 2.0, 3.0], network
    )
    n, q = WIDTH, CLASSES
    assert network.asynchronous == [
        AsyncWork(
            setup_flops=[1.0 + 4 * n**3, 2.0 + 4 * n**3, 3.0 + 4 * n**3],
            update_flops=2 * 2.0 * q * n * n,
            values=q * n,
            dtype=F64,
        )
    ]


def test_central_ssfn_reports_a_solve_for_the_ridge_and_admm_products_for_the_ball():
    """Ridge: n^3 / 3 + 2 Q n^2; ball: n^3 + iterations x 2 Q n^2, plus the setup."""
    grams, crosses = _layer_data(1)
    n, q = WIDTH, CLASSES
    network = _Recorder(complete(1))
    solver = CentralSolver(SsfnConfig(mu=3.0, admm_iterations=4, tolerance=0.0))
    solver.solve(grams, crosses, Ridge(lam=0.5), [5.0], network)
    solver.solve(grams, crosses, Ball(radius=1.0), [7.0], network)
    assert network.alone == [
        (0, pytest.approx(5.0 + n**3 / 3 + 2.0 * q * n * n)),
        (0, pytest.approx(7.0 + n**3 + 4 * 2.0 * q * n * n)),
    ]


def test_central_ssfn_refuses_layer_data_of_different_node_counts():
    """Grams and crosses must come one pair per node."""
    grams, crosses = _layer_data(2)
    with pytest.raises(ValueError):
        CentralSolver(SsfnConfig()).solve(
            grams, crosses[:1], Ridge(lam=0.5), [0.0, 0.0], _Recorder(complete(2))
        )
