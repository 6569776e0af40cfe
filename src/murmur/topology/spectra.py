"""Laplacian spectra without an agents x agents matrix where the graph allows.

Murmur uses two eigenvalues of a graph's Laplacian L: the largest, lambda_max (the
consensus step must keep b * lambda_max < 2), and the smallest nonzero one,
lambda_2 (``"auto"`` steps are 2 / (lambda_2 + lambda_max)). They come from, in
this order:

1. a closed form, for the graphs whose structure the builders record
   (:class:`Structure`): circulant graphs (ring, circular(d), complete, the
   exponential graph), the torus, the star, and matchings (a random matching, one
   edge, a step of the one-peer exponential topology). Every eigenvalue of a
   circulant graph with offsets D is sum over s in D of 1 - cos(2 pi j s / N),
   j = 0 .. N-1; a torus adds those of its two cycles; a star has 0, 1 (N-2 times)
   and N; a matching of m pairs has 0 (N - m times) and 2 (m times).
2. the dense Laplacian's ``eigvalsh`` up to :data:`DENSE_LIMIT` agents, exact to
   rounding;
3. above that, a sparse Lanczos solver (``scipy.sparse.linalg.eigsh``) on the
   sparse Laplacian, to a relative tolerance of :data:`SPARSE_TOLERANCE`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse
import scipy.sparse.linalg
import torch

from murmur.errors import UsageError

DENSE_LIMIT = 2048
"""Agents up to which a graph without a closed form gets a dense eigendecomposition
(32 MB of float64 and well under a second at 2,048)."""

SPARSE_TOLERANCE = 1e-9
"""Relative tolerance of the sparse eigensolver above :data:`DENSE_LIMIT` agents."""


@dataclass(frozen=True)
class Structure:
    """What a graph builder knows about its graph's shape, enough for its spectrum.

    ``kind`` is one of ``"circulant"`` (``offsets``: the set D of offsets s with
    i ~ i + s mod N, closed under s -> N - s), ``"torus"`` (``sides``: rows and
    columns), ``"star"`` and ``"matching"`` (``pairs``: how many disjoint edges).
    """

    kind: str
    offsets: tuple[int, ...] = ()
    sides: tuple[int, int] = (1, 1)
    pairs: int = 0


def circulant(agents: int, offsets: set[int]) -> Structure:
    """The structure of the circulant graph i ~ i +- s for ``s`` in ``offsets``."""
    closed = {s % agents for s in offsets} | {(-s) % agents for s in offsets}
    closed.discard(0)
    return Structure("circulant", offsets=tuple(sorted(closed)))


def closed_form_eigenvalues(agents: int, structure: Structure) -> torch.Tensor:
    """Every eigenvalue of the Laplacian of a graph of ``structure``, ascending, float64."""
    if structure.kind == "circulant":
        values = _circulant_values(agents, structure.offsets)
    elif structure.kind == "torus":
        rows, cols = structure.sides
        grid = _cycle_values(rows)[:, None] + _cycle_values(cols)[None, :]
        values = grid.reshape(-1)
    elif structure.kind == "star":
        values = np.concatenate([[0.0], np.ones(max(agents - 2, 0)), [float(agents)]])
        values = values[:agents] if agents > 1 else np.zeros(1)
    elif structure.kind == "matching":
        values = np.concatenate([np.zeros(agents - structure.pairs), np.full(structure.pairs, 2.0)])
    else:
        raise ValueError(f"no closed form for a graph of kind {structure.kind!r}")
    return torch.from_numpy(np.sort(values))


def _circulant_values(agents: int, offsets: tuple[int, ...]) -> np.ndarray:
    """sum over s in D of 1 - cos(2 pi j s / N), for j = 0 .. N-1."""
    values = np.zeros(agents)
    j = np.arange(agents, dtype=np.int64)
    for s in offsets:
        # (j * s) mod N first keeps the angle exact for large N.
        values += 1.0 - np.cos(2.0 * math.pi * ((j * s) % agents) / agents)
    return values


def _cycle_values(side: int) -> np.ndarray:
    """The eigenvalues of one side of a torus: a cycle, an edge (side 2) or a point."""
    if side == 1:
        return np.zeros(1)
    if side == 2:
        return np.array([0.0, 2.0])
    return _circulant_values(side, (1, side - 1))


def sparse_laplacian(agents: int, edges: torch.Tensor) -> scipy.sparse.csr_array:
    """L = D - A of an undirected edge list, as a scipy CSR array (float64)."""
    left, right = edges[:, 0].numpy(), edges[:, 1].numpy()
    rows = np.concatenate([left, right, np.arange(agents)])
    cols = np.concatenate([right, left, np.arange(agents)])
    degrees = np.bincount(edges.reshape(-1).numpy(), minlength=agents).astype(np.float64)
    values = np.concatenate([-np.ones(2 * len(left)), degrees])
    return scipy.sparse.csr_array((values, (rows, cols)), shape=(agents, agents))


def sparse_extremes(laplacian: scipy.sparse.csr_array, components: int) -> tuple[float, float]:
    """(lambda_{components+1}, lambda_max) of a large sparse Laplacian, by Lanczos.

    lambda_max directly; the smallest nonzero eigenvalue as lambda_max minus the
    (components+1)-th largest eigenvalue of lambda_max I - L, whose top ``components``
    are the zero eigenvalues' (one per component).
    """
    agents = laplacian.shape[0]
    try:
        largest = float(_eigsh(laplacian, 1)[-1])
        shifted = scipy.sparse.identity(agents, format="csr") * largest - laplacian
        top = _eigsh(shifted, components + 1)
    except scipy.sparse.linalg.ArpackNoConvergence as error:
        raise UsageError(
            f"the eigenvalues of this {agents}-agent graph did not converge "
            f"({error}); give algorithm.b as a number instead of 'auto'"
        ) from None
    return largest - float(np.sort(top)[0]), largest


def largest_eigenvalue(matrix: scipy.sparse.csr_array) -> float:
    """The largest eigenvalue of a large symmetric sparse matrix, by Lanczos."""
    try:
        return float(_eigsh(matrix, 1)[-1])
    except scipy.sparse.linalg.ArpackNoConvergence as error:
        raise UsageError(
            f"the largest eigenvalue of this {matrix.shape[0]}-agent graph's matrix did not "
            f"converge ({error}); give the step as a number instead of 'auto'"
        ) from None


def _eigsh(matrix: scipy.sparse.csr_array, count: int) -> np.ndarray:
    """The ``count`` largest eigenvalues of a symmetric sparse matrix, from a fixed start."""
    start = np.random.default_rng(0).standard_normal(matrix.shape[0])
    return scipy.sparse.linalg.eigsh(
        matrix, k=count, which="LA", tol=SPARSE_TOLERANCE, v0=start, return_eigenvectors=False
    )
