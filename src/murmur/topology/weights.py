"""Mixing weights: how much each agent trusts each neighbour's value.

Every mixing matrix W here is symmetric and doubly stochastic (rows and columns
sum to 1) with W_ij = 0 unless i = j or (i, j) is an edge, so one gossip round
X <- W X keeps the network average and, on a connected graph with the step
conditions checked here, drives all agents to it. Algorithms read these
matrices; they never compute weights themselves.

- ``laplacian``:  W = I - beta L, the consensus step of DETSGRAD / DSGD
  (docs/methods/detsgrad.md); needs 0 < beta * lambda_max(L) < 2.
- ``metropolis``: Metropolis-Hastings, W_ij = 1 / (1 + max(d_i, d_j)) on edges;
  works on any graph with no step to tune.
- ``uniform``:    W_ij = 1 / (d + 1) on edges and the diagonal, the matrix H of
  dSSFN on a circular graph of degree d (section 3); regular graphs only.
"""

from __future__ import annotations

import math
import warnings
from collections import OrderedDict
from collections.abc import Callable
from functools import lru_cache
from typing import Generic, TypeVar

import torch

from murmur.errors import UsageError
from murmur.topology.graphs import Graph, sparse_csr
from murmur.topology.spectra import (
    DENSE_LIMIT,
    Structure,
    closed_form_eigenvalues,
    sparse_extremes,
    sparse_laplacian,
)

_T = TypeVar("_T")

WEIGHTS: tuple[str, ...] = ("laplacian", "metropolis", "uniform")
"""Mixing-weight names accepted by :func:`mixing_matrix`."""

_STEP_TOLERANCE = 1e-9
"""Relative slack so that beta = 2 / lambda_max is refused despite rounding in eigvalsh."""


def laplacian_extremes(graph: Graph) -> tuple[float, float]:
    """(lambda_2, lambda_max) of the Laplacian L, where lambda_2 is the smallest eigenvalue
    that is not one of the components' zeros; a closed form where the graph has one,
    else a dense or sparse eigensolver (:mod:`murmur.topology.spectra`)."""
    if graph.num_edges == 0:
        return 0.0, 0.0
    return _extremes(graph)


@lru_cache(maxsize=128)
def _extremes(graph: Graph) -> tuple[float, float]:
    components = graph.components()
    structure = graph.structure
    if structure is None and int(graph.degrees().max()) <= 1:  # a matching, however made
        structure = Structure("matching", pairs=graph.num_edges)
    if structure is not None:
        values = closed_form_eigenvalues(graph.agents, structure)
    elif graph.agents <= DENSE_LIMIT:
        values = torch.linalg.eigvalsh(graph.laplacian())
    else:
        laplacian = sparse_laplacian(graph.agents, graph.edges)
        return sparse_extremes(laplacian, components)
    return float(values[components]), float(values[-1])


def lambda_max(graph: Graph) -> float:
    """Largest eigenvalue of the Laplacian L (0 for a graph without edges)."""
    return laplacian_extremes(graph)[1]


def fastest_consensus_step(graph: Graph) -> float:
    """The step b for which gossip with W = I - b L converges fastest, 2 / (lambda_2 + lambda_max).

    Every eigenvalue 1 - b lambda_i of W then lies in [-(lambda_max - lambda_2) /
    (lambda_max + lambda_2), 1], so it is stable on every connected graph;
    what ``algorithm.b = "auto"`` chooses. On a disconnected graph (one graph of
    a time-varying topology) lambda_2 is the smallest nonzero eigenvalue, so that
    every component mixes: on a matching, b = 1/2 and each pair averages.
    """
    if graph.num_edges == 0:
        return 1.0
    second, largest = laplacian_extremes(graph)
    return 2.0 / (second + largest)


def consensus_step(graph: Graph, b: float | str, key: str = "algorithm.b") -> float:
    """The consensus step a config asks for: ``"auto"`` is :func:`fastest_consensus_step`,
    a number is checked by :func:`check_consensus_step`."""
    if b == "auto":
        return fastest_consensus_step(graph)
    if isinstance(b, str):
        raise UsageError(f"{key} must be a number or 'auto', not {b!r}")
    check_consensus_step(graph, b, key=key, auto=True)
    return b


def check_consensus_step(
    graph: Graph, beta: float, key: str = "algorithm.b", auto: bool = False
) -> None:
    """Refuse a consensus step unless 0 < beta and beta * lambda_max(L) < 2.

    Then every eigenvalue 1 - beta * lambda_i of W = I - beta L lies in (-1, 1],
    so gossip with W converges on a connected graph. ``key`` names the config
    field in the error message; ``auto``: it also accepts "auto", which the
    message suggests.
    """
    short = key.rsplit(".", 1)[-1]
    largest = lambda_max(graph)
    where = f"{graph.name} with {graph.agents} agents"
    number = isinstance(beta, int | float) and not isinstance(beta, bool)
    if not number or not math.isfinite(beta) or beta <= 0:
        hint = f"e.g. {short} = {1 / largest:.4g}" if largest > 0 else f"e.g. {short} = 0.1"
        raise UsageError(f"{key}={beta!r} must be a finite number > 0 for {where}; use {hint}")
    if beta * largest >= 2.0 * (1.0 - _STEP_TOLERANCE):
        raise UsageError(
            f"{key}={beta:g} is too large for {where}: {short} * lambda_max(L) = "
            f"{beta * largest:.4g} must be < 2; use {short} < {2.0 / largest:.4g}"
            + (f' or {short} = "auto"' if auto else "")
        )


def laplacian_weights(graph: Graph, beta: float) -> torch.Tensor:
    """W = I - beta L (dense float64), after :func:`check_consensus_step`."""
    return mixing_matrix(graph, "laplacian", beta)


def metropolis_weights(graph: Graph) -> torch.Tensor:
    """Metropolis-Hastings weights (dense float64).

    W_ij = 1 / (1 + max(d_i, d_j)) for each edge (i, j), W_ii = 1 - sum_j W_ij.
    """
    return mixing_matrix(graph, "metropolis")


def uniform_weights(graph: Graph) -> torch.Tensor:
    """W_ij = 1 / (d + 1) on edges and the diagonal (dense float64); regular graphs only."""
    return mixing_matrix(graph, "uniform")


def mixing_matrix(graph: Graph, kind: str, beta: float | None = None) -> torch.Tensor:
    """Dense float64 mixing matrix of the given kind (one of :data:`WEIGHTS`), for the
    small graphs where an agents x agents matrix is wanted (see :func:`mixing_operator`).

    ``beta`` (config ``algorithm.b``) is the consensus step, required for
    ``laplacian`` and ignored by the others.
    """
    return mixing_operator(graph, kind, beta, dtype=torch.float64).to_dense()


def mixing_operator(
    graph: Graph,
    kind: str,
    beta: float | None = None,
    dtype: torch.dtype = torch.float32,
    minus_identity: bool = False,
) -> torch.Tensor:
    """The mixing matrix of the given kind as a sparse CSR tensor of ``dtype``, built from
    the edge list in time and memory proportional to the edges (weights in float64, then
    rounded once to ``dtype``); ``minus_identity``: W - I instead (its diagonal
    W_ii - 1 taken in float64 too)."""
    rows, cols, edge_weight, diagonal = _weights(graph, kind, beta)
    if minus_identity:
        diagonal = diagonal - 1.0
    nodes = torch.arange(graph.agents)
    values = torch.cat([edge_weight, edge_weight, diagonal]).to(dtype)
    return sparse_csr(
        torch.cat([rows, cols, nodes]), torch.cat([cols, rows, nodes]), values, graph.agents
    )


def _weights(
    graph: Graph, kind: str, beta: float | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each edge (i, j), its weight W_ij (float64), and the diagonal W_ii."""
    i, j = graph.edges[:, 0], graph.edges[:, 1]
    degrees = graph.degrees().to(torch.float64)
    if kind == "laplacian":
        if beta is None:
            raise UsageError(
                "laplacian weights need the consensus step algorithm.b; set it, e.g. "
                f"algorithm.b = {_suggested_step(graph):.4g}"
            )
        check_consensus_step(graph, beta)
        return (
            i,
            j,
            torch.full((graph.num_edges,), 0.0 + beta, dtype=torch.float64),
            1.0 - beta * degrees,
        )
    if kind == "metropolis":
        edge_weight = 1.0 / (1.0 + torch.maximum(degrees[i], degrees[j]))
        given = torch.zeros(graph.agents, dtype=torch.float64)
        given.index_add_(0, i, edge_weight).index_add_(0, j, edge_weight)
        return i, j, edge_weight, 1.0 - given
    if kind == "uniform":
        _check_regular(graph, degrees)
        share = 1.0 / (float(degrees[0]) + 1.0) if graph.agents > 0 else 1.0
        return (
            i,
            j,
            torch.full((graph.num_edges,), share, dtype=torch.float64),
            torch.full((graph.agents,), share, dtype=torch.float64),
        )
    raise UsageError(f"mixing weights {kind!r} are unknown; choose one of {', '.join(WEIGHTS)}")


def _check_regular(graph: Graph, degrees: torch.Tensor) -> None:
    if not bool((degrees == degrees[0]).all()):
        raise UsageError(
            f"uniform weights need a regular graph (every agent with the same degree), but "
            f"{graph.name} with {graph.agents} agents has degrees "
            f"{int(degrees.min())}..{int(degrees.max())}; "
            "use metropolis weights (algorithm.weights=metropolis)"
        )


def _suggested_step(graph: Graph) -> float:
    """A safe consensus step, 1 / lambda_max(L) (half the stability limit)."""
    largest = lambda_max(graph)
    return 1.0 / largest if largest > 0 else 0.1


def as_sparse(matrix: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Dense 2-D matrix -> sparse CSR of ``dtype`` with zeros dropped.

    For a mixing matrix W and stacked parameters X of shape (agents, P),
    ``as_sparse(W) @ X`` costs O(E P) instead of O(N^2 P).
    """
    if matrix.dim() != 2:
        raise ValueError(f"as_sparse needs a 2-D matrix, got shape {tuple(matrix.shape)}")
    if matrix.is_sparse or matrix.layout != torch.strided:
        raise ValueError(f"as_sparse needs a dense matrix, got layout {matrix.layout}")
    with warnings.catch_warnings():
        # torch labels all sparse CSR support "beta"; the matmul used here is stable.
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return matrix.to(dtype).to_sparse_csr()


class PerGraph(Generic[_T]):
    """What an algorithm derives from a graph (its mixing operator, its consensus
    step), made once per distinct graph.

    The run's graph keeps its value for good; the graphs of a time-varying
    topology (:mod:`murmur.sim.faults`) share a cache of the ``size`` most recent,
    since a random matching seldom comes back.
    """

    def __init__(self, derive: Callable[[Graph], _T], graph: Graph, size: int = 64) -> None:
        self.derive = derive
        self.graph = graph
        self.value = derive(graph)
        """The value for the run's graph."""
        self._recent: OrderedDict[Graph, _T] = OrderedDict()
        self._size = size

    def __call__(self, graph: Graph) -> _T:
        if graph is self.graph or graph == self.graph:
            return self.value
        known = self._recent.get(graph)
        if known is None:
            known = self.derive(graph)
            self._recent[graph] = known
            if len(self._recent) > self._size:
                self._recent.popitem(last=False)
        else:
            self._recent.move_to_end(graph)
        return known
