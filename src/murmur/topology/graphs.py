"""Communication graphs: who may talk to whom.

A :class:`Graph` is plain data: a number of agents and an undirected edge list.
Builders make the families used in the experiments (ring, circular(d),
complete, star, torus, Erdos-Renyi, a list read from a file); :func:`build_graph`
picks one by its config name and refuses a disconnected result, because no
decentralized algorithm can reach consensus across components.

Notation follows docs/methods/detsgrad.md: adjacency A, degrees D, Laplacian L = D - A.
Mixing weights derived from a graph live in :mod:`murmur.topology.weights`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn, TypeVar

import torch

from murmur.errors import UsageError
from murmur.origins import check_entry, current
from murmur.textfiles import read_utf8
from murmur.topology.spectra import Structure, circulant

ERDOS_RENYI_MAX_DRAWS = 1000
"""How many Erdos-Renyi draws :func:`erdos_renyi` tries before giving up."""

_MAX_INDEX = 2**63 - 1
"""The largest agent index an edge file may hold: edges become int64 tensors."""

_T = TypeVar("_T")


@dataclass(frozen=True)
class Graph:
    """An undirected simple graph over agents ``0 .. agents-1``.

    ``edges`` may be given in any order and orientation; it is stored in
    canonical form: an (E, 2) int64 tensor, each edge once as ``(i, j)`` with
    ``i < j``, rows sorted. Self loops and indices out of range are refused.
    Two graphs are equal when they have the same agents, edges and name.
    """

    agents: int
    """Number of nodes."""
    edges: torch.Tensor
    """(E, 2) int64, each undirected edge once as (i, j) with i < j, rows sorted."""
    name: str
    """Human-readable description, e.g. ``"ring"`` or ``"circular(4)"``."""
    structure: Structure | None = field(default=None, compare=False)
    """What the builder knows of the graph's shape, from which its spectrum has a closed
    form (:mod:`murmur.topology.spectra`); None for a graph of any shape."""

    def __post_init__(self) -> None:
        if not isinstance(self.agents, int) or self.agents < 1:
            raise ValueError(f"Graph.agents must be a positive int, got {self.agents!r}")
        object.__setattr__(self, "edges", _canonical_edges(self.edges, self.agents))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Graph):
            return NotImplemented
        return (
            self.agents == other.agents
            and self.name == other.name
            and torch.equal(self.edges, other.edges)
        )

    def __hash__(self) -> int:
        return hash((self.agents, self.name, tuple(self.edges.flatten().tolist())))

    @property
    def num_edges(self) -> int:
        """Number of undirected edges E."""
        return int(self.edges.shape[0])

    def degrees(self) -> torch.Tensor:
        """Degree d_i of every agent, shape (agents,), int64."""
        return torch.bincount(self.edges.flatten(), minlength=self.agents)

    def adjacency(self) -> torch.Tensor:
        """Dense symmetric 0/1 adjacency matrix A, shape (agents, agents), float64."""
        adjacency = torch.zeros(self.agents, self.agents, dtype=torch.float64)
        i, j = self.edges[:, 0], self.edges[:, 1]
        adjacency[i, j] = 1.0
        adjacency[j, i] = 1.0
        return adjacency

    def laplacian(self) -> torch.Tensor:
        """Dense graph Laplacian L = D - A, shape (agents, agents), float64."""
        adjacency = self.adjacency()
        return torch.diag(adjacency.sum(dim=1)) - adjacency

    def sparse_laplacian(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """L = D - A as a sparse CSR tensor of ``dtype``, built from the edges in O(E)."""
        i, j = self.edges[:, 0], self.edges[:, 1]
        nodes = torch.arange(self.agents)
        rows = torch.cat([i, j, nodes])
        cols = torch.cat([j, i, nodes])
        values = torch.cat(
            [-torch.ones(2 * self.num_edges, dtype=torch.float64), self.degrees().double()]
        )
        return sparse_csr(rows, cols, values.to(dtype), self.agents)

    def neighbors(self, i: int) -> list[int]:
        """Sorted neighbours N_i of agent ``i``."""
        if not 0 <= i < self.agents:
            raise IndexError(f"agent {i} is out of range for a graph of {self.agents} agents")
        left, right = self.edges[:, 0], self.edges[:, 1]
        found = torch.cat([right[left == i], left[right == i]])
        return sorted(found.tolist())

    def is_connected(self) -> bool:
        """Whether every agent can reach every other one along edges."""
        return bool((_component_roots(self) == 0).all())

    def components(self) -> int:
        """Number of connected components (an agent without edges is one)."""
        return int(torch.unique(_component_roots(self)).numel())


def sparse_csr(
    rows: torch.Tensor, cols: torch.Tensor, values: torch.Tensor, size: int
) -> torch.Tensor:
    """The (size, size) sparse CSR tensor with ``values`` at (``rows``, ``cols``): entries
    at one place are summed, zeros dropped, columns sorted within each row."""
    keep = values != 0
    matrix = torch.sparse_coo_tensor(
        torch.stack([rows[keep], cols[keep]]), values[keep], (size, size), check_invariants=False
    ).coalesce()
    with warnings.catch_warnings():
        # torch labels all sparse CSR support "beta"; the matmul used here is stable.
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return matrix.to_sparse_csr()


def _canonical_edges(edges: torch.Tensor, agents: int) -> torch.Tensor:
    """Sort each edge as (low, high), drop duplicates, sort rows; refuse bad edges."""
    edges = torch.as_tensor(edges)
    if edges.numel() == 0:
        return torch.zeros(0, 2, dtype=torch.int64)
    if edges.dim() != 2 or edges.shape[1] != 2:
        raise ValueError(f"Graph.edges must have shape (E, 2), got {tuple(edges.shape)}")
    if edges.dtype.is_floating_point or edges.dtype.is_complex or edges.dtype == torch.bool:
        raise ValueError(f"Graph.edges must hold integer agent indices, got {edges.dtype}")
    edges = edges.to(torch.int64)
    if bool((edges < 0).any()) or bool((edges >= agents).any()):
        raise ValueError(f"Graph.edges has an agent index outside 0..{agents - 1}")
    low = torch.minimum(edges[:, 0], edges[:, 1])
    high = torch.maximum(edges[:, 0], edges[:, 1])
    if bool((low == high).any()):
        raise ValueError("Graph.edges has a self loop")
    # Encoding (low, high) as one integer makes unique() also sort the rows.
    keys = torch.unique(low * agents + high)
    return torch.stack([keys // agents, keys % agents], dim=1)


def _component_roots(graph: Graph) -> torch.Tensor:
    """Smallest agent index in each agent's connected component, shape (agents,).

    Vectorized union-find: every round hooks the larger root of each edge under
    the smaller one, then compresses paths by pointer jumping until every agent
    points straight at its root. It stops when no edge joins two roots.
    """
    parent = torch.arange(graph.agents)
    left, right = graph.edges[:, 0], graph.edges[:, 1]
    while True:
        root_left, root_right = parent[left], parent[right]
        hooked = parent.scatter_reduce(
            0,
            torch.maximum(root_left, root_right),
            torch.minimum(root_left, root_right),
            reduce="amin",
        )
        while not torch.equal(hooked[hooked], hooked):
            hooked = hooked[hooked]
        if torch.equal(hooked, parent):
            return parent
        parent = hooked


def _pairs(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """Stack two index vectors into an (E, 2) edge tensor."""
    return torch.stack([left, right], dim=1)


def _check_agents(agents: object) -> int:
    """``agents`` itself, once checked to be an integer >= 1 (not a bool)."""
    if isinstance(agents, bool) or not isinstance(agents, int) or agents < 1:
        raise UsageError(f"topology.agents={agents!r} must be an integer >= 1")
    return agents


def ring(agents: int) -> Graph:
    """Cycle 0-1-...-(N-1)-0: N edges for N >= 3, one edge for N = 2, none for N = 1."""
    _check_agents(agents)
    nodes = torch.arange(agents)
    if agents == 1:
        return Graph(1, torch.zeros(0, 2, dtype=torch.int64), "ring")
    structure = circulant(agents, {1}) if agents >= 3 else Structure("matching", pairs=1)
    return Graph(agents, _pairs(nodes, (nodes + 1) % agents), "ring", structure)


def circular(agents: int, degree: int) -> Graph:
    """Circulant graph: each agent linked to the degree/2 nearest agents on each side.

    ``degree`` must be even with ``2 <= degree <= agents - 1``; degree 2 is the
    ring, and degree ``agents - 1`` (odd ``agents``) is the complete graph.
    """
    _check_agents(agents)
    if isinstance(degree, bool) or not isinstance(degree, int) or degree % 2 != 0:
        raise UsageError(
            f"topology.degree={degree!r} must be an even integer for circular "
            "(each agent links degree/2 neighbours on each side); use e.g. 2 or 4"
        )
    if agents < 3:
        raise UsageError(
            f"circular needs topology.agents >= 3, got {agents}; use ring or complete instead"
        )
    if not 2 <= degree <= agents - 1:
        raise UsageError(
            f"topology.degree={degree} is out of range for circular with {agents} agents: "
            f"use an even degree with 2 <= degree <= {agents - 1}"
        )
    nodes = torch.arange(agents)
    offsets = range(1, degree // 2 + 1)
    edges = torch.cat([_pairs(nodes, (nodes + k) % agents) for k in offsets])
    return Graph(agents, edges, f"circular({degree})", circulant(agents, set(offsets)))


def complete(agents: int) -> Graph:
    """Every pair of agents linked: N(N-1)/2 edges."""
    _check_agents(agents)
    structure = circulant(agents, set(range(1, agents)))
    return Graph(agents, torch.triu_indices(agents, agents, offset=1).T, "complete", structure)


def star(agents: int) -> Graph:
    """Agent 0 is the hub, linked to every other agent: N-1 edges."""
    _check_agents(agents)
    leaves = torch.arange(1, agents)
    return Graph(agents, _pairs(torch.zeros_like(leaves), leaves), "star", Structure("star"))


def torus(agents: int, rows: int | None = None) -> Graph:
    """2-D grid with wrap-around, ``rows x cols = agents``; agent r*cols + c sits at (r, c).

    ``rows`` defaults to the largest divisor of ``agents`` not above sqrt(agents),
    so the grid is as square as possible (a prime ``agents`` gives a ring). Every
    agent links to its right and lower neighbour with wrap-around; on a side of
    length 1 or 2 the wrap-around would repeat an edge or make a self loop, and
    those are left out. Sides >= 3 give 2N edges.
    """
    _check_agents(agents)
    if rows is None:
        rows = max(r for r in range(1, math.isqrt(agents) + 1) if agents % r == 0)
    elif isinstance(rows, bool) or not isinstance(rows, int) or rows < 1 or agents % rows:
        divisors = ", ".join(str(r) for r in range(1, agents + 1) if agents % r == 0)
        raise UsageError(
            f"topology.rows={rows!r} must divide topology.agents={agents} for torus; "
            f"use one of {divisors}"
        )
    cols = agents // rows
    row, col = torch.arange(agents) // cols, torch.arange(agents) % cols
    right = row * cols + (col + 1) % cols
    down = ((row + 1) % rows) * cols + col
    nodes = torch.arange(agents)
    edges = torch.cat([_pairs(nodes, right), _pairs(nodes, down)])
    edges = edges[edges[:, 0] != edges[:, 1]]
    structure = Structure("torus", sides=(rows, cols))
    return Graph(agents, edges, f"torus({rows}x{cols})", structure)


def exponential_offsets(agents: int) -> list[int]:
    """The distances 1, 2, 4, ... below ``agents`` that the exponential graph links."""
    return [1 << k for k in range(max(agents - 1, 1).bit_length()) if (1 << k) < agents]


def exponential(agents: int) -> Graph:
    """The static exponential graph in its symmetric form: agent i linked to the agents
    1, 2, 4, ..., 2^k places ahead and behind it (mod N), for every 2^k < N.

    Every agent has the same degree (about 2 log2 N, less where i + 2^k and i - 2^m
    coincide), so uniform weights 1 / (degree + 1) apply; its Laplacian's spectrum
    has a closed form (a circulant graph).
    """
    _check_agents(agents)
    nodes = torch.arange(agents)
    offsets = exponential_offsets(agents)
    if not offsets:
        return Graph(1, torch.zeros(0, 2, dtype=torch.int64), "exponential")
    edges = torch.cat([_pairs(nodes, (nodes + s) % agents) for s in offsets])
    edges = edges[edges[:, 0] != edges[:, 1]]
    return Graph(agents, edges, "exponential", circulant(agents, set(offsets)))


def one_peer_exponential(graph: Graph, step: int) -> Graph:
    """Step ``step`` of the one-peer exponential topology on ``graph`` (an exponential
    graph of N agents): agent i exchanges with agent i XOR 2^k, k = step mod
    ceil(log2 N), when that agent exists; a matching, so every agent talks to one peer.

    For N a power of two, averaging each pair (weights 1/2) for k = 0, 1, ..., log2 N - 1
    gives every agent the exact network average, from any start (the hypercube's
    dimensions one after the other).
    """
    rounds = max((graph.agents - 1).bit_length(), 1)
    distance = 1 << (step % rounds)
    nodes = torch.arange(graph.agents)
    peers = nodes ^ distance
    keep = (peers > nodes) & (peers < graph.agents)
    edges = _pairs(nodes[keep], peers[keep])
    name = f"one_peer({distance})"
    return Graph(graph.agents, edges, name, Structure("matching", pairs=int(edges.shape[0])))


def erdos_renyi(agents: int, probability: float, seed: int) -> Graph:
    """Random graph G(N, p): each pair linked independently with probability p.

    Draws come from one ``torch.Generator`` seeded with ``seed``; a disconnected
    draw is replaced by the generator's next draw, up to
    :data:`ERDOS_RENYI_MAX_DRAWS` times, so the result is connected and a pure
    function of (agents, probability, seed).
    """
    _check_agents(agents)
    if not isinstance(probability, int | float) or not 0.0 < probability <= 1.0:
        raise UsageError(
            f"topology.probability={probability!r} must be a number with 0 < p <= 1 for erdos_renyi"
        )
    name = f"erdos_renyi({probability:g})"
    generator = torch.Generator().manual_seed(seed)
    for _ in range(ERDOS_RENYI_MAX_DRAWS):
        graph = Graph(agents, _erdos_renyi_edges(agents, probability, generator), name)
        if graph.is_connected():
            return graph
    threshold = math.log(agents) / agents
    raise UsageError(
        f"erdos_renyi with {agents} agents and topology.probability={probability:g} gave no "
        f"connected graph in {ERDOS_RENYI_MAX_DRAWS} draws; raise topology.probability "
        f"(graphs are usually connected above ln(N)/N = {threshold:.3g})"
    )


ERDOS_RENYI_FLIPS_UP_TO = 2048
"""Agents up to which :func:`erdos_renyi` flips a coin per pair; above, it draws the
number of edges and then the pairs, in memory proportional to the edges."""


def _erdos_renyi_edges(agents: int, probability: float, stream: torch.Generator) -> torch.Tensor:
    """The edges of one draw of G(N, p). Up to :data:`ERDOS_RENYI_FLIPS_UP_TO` agents a
    coin per pair; above, the same distribution without N^2 work: the number of edges
    M ~ Binomial(N(N-1)/2, p), then M distinct pairs uniformly at random (pairs drawn
    with repetition until M distinct ones are found, and M of those taken at random)."""
    if agents <= ERDOS_RENYI_FLIPS_UP_TO:
        pairs = torch.triu_indices(agents, agents, offset=1).T
        linked = torch.rand(pairs.shape[0], generator=stream, dtype=torch.float64)
        return pairs[linked < probability]
    total = agents * (agents - 1) // 2
    count = torch.tensor([float(total)], dtype=torch.float64)
    chance = torch.tensor([probability], dtype=torch.float64)
    wanted = int(torch.binomial(count, chance, generator=stream))
    keys = torch.zeros(0, dtype=torch.int64)
    while keys.numel() < wanted:
        draws = int(1.1 * (wanted - keys.numel())) + 16
        left = torch.randint(agents, (draws,), generator=stream)
        right = torch.randint(agents, (draws,), generator=stream)
        apart = left != right
        low = torch.minimum(left, right)[apart]
        high = torch.maximum(left, right)[apart]
        keys = torch.unique(torch.cat([keys, low * agents + high]))
    keys = keys[torch.randperm(keys.numel(), generator=stream)[:wanted]]
    return torch.stack([keys // agents, keys % agents], dim=1)


def from_edge_file(path: str | Path, agents: int | None = None) -> Graph:
    """Read a graph from a UTF-8 text file with one edge ``i j`` per line (0-based indices).

    Indices are written in the digits 0-9. Text after ``#`` and blank lines are
    ignored; a repeated edge (in either orientation) counts once. ``agents``
    defaults to the largest index + 1; an index of twice the number of distinct
    edges or more is then refused, since some agent would have no edge.
    """
    path = Path(path)
    key = f"topology.edges_file={str(path)!r}"
    if agents is not None:
        _check_agents(agents)
    edges = _read_edges(path, key, agents)
    if agents is None:
        agents = _inferred_agents(edges, key)
    return Graph(agents, torch.tensor(list(edges), dtype=torch.int64), f"edges({path.name})")


def _read_edges(path: Path, key: str, agents: int | None) -> dict[tuple[int, int], int]:
    """Each distinct edge ``(low, high)`` of the file and the line it first appears on."""
    edges: dict[tuple[int, int], int] = {}
    for number, line in enumerate(_edge_text(path, key).splitlines(), start=1):
        content = line.split("#", 1)[0].strip()
        if not content:
            continue
        pair = _parse_edge(content)
        if pair is None:
            raise UsageError(
                f"{key} line {number}: expected two agent indices 'i j' in digits 0-9, "
                f"got {content!r}"
            )
        low, high = sorted(pair)
        if high > _MAX_INDEX:
            raise UsageError(
                f"{key} line {number}: an agent index is larger than {_MAX_INDEX}, the "
                "largest a 64-bit integer holds; indices are 0-based (0..agents-1)"
            )
        if low == high:
            raise UsageError(f"{key} line {number}: self loop {low} {high}; remove that line")
        if agents is not None and high >= agents:
            raise UsageError(
                f"{key} line {number}: agent {high} is out of range for "
                f"topology.agents={agents}; indices are 0-based (0..{agents - 1}), "
                "so fix the file or raise topology.agents"
            )
        edges.setdefault((low, high), number)
    return edges


def _edge_text(path: Path, key: str) -> str:
    """The edge file's text, decoded as UTF-8."""
    if not path.is_file():
        raise UsageError(
            f"{key} is not an existing file; give the path of a text file "
            "with one edge 'i j' per line"
        )
    return read_utf8(path, key)


def _parse_edge(content: str) -> tuple[int, int] | None:
    """Two non-negative integers in the digits 0-9 separated by whitespace, or None."""
    fields = content.split()
    if len(fields) != 2 or not all(field.isascii() and field.isdigit() for field in fields):
        return None
    return _parse_index(fields[0]), _parse_index(fields[1])


def _parse_index(digits: str) -> int:
    """The value of a string of digits 0-9, or ``_MAX_INDEX + 1`` for any larger one.

    Longer strings are never converted: ``int()`` refuses more than 4300 digits.
    """
    significant = digits.lstrip("0") or "0"
    return int(significant) if len(significant) <= len(str(_MAX_INDEX)) else _MAX_INDEX + 1


def _inferred_agents(edges: dict[tuple[int, int], int], key: str) -> int:
    """The largest index + 1; refused when the edges cannot reach that many agents."""
    if not edges:
        raise UsageError(f"{key} has no edges; list at least one edge 'i j'")
    (_, largest), number = max(edges.items(), key=lambda item: item[0][1])
    reach = 2 * len(edges)
    if largest >= reach:
        raise UsageError(
            f"{key} line {number}: agent {largest} would make {largest + 1} agents, but "
            f"the file's {len(edges)} distinct edges reach at most {reach}, so some agents "
            "would have no edge; number the agents 0, 1, 2, ... without gaps"
        )
    return largest + 1


def random_matching(graph: Graph, stream: torch.Generator) -> Graph:
    """A random maximal matching of ``graph``'s edges: the edges taken in a random order
    drawn from ``stream``, each kept unless one of its agents is already matched.

    On a complete graph of an even number of agents every agent is matched; each
    agent then talks to one other, as in randomized gossip. Worked out in rounds
    over every edge at once, not edge by edge: each round keeps the edges that come
    first in the order among the remaining edges at both their agents, then drops
    the edges those touch; this keeps exactly the edges of the one-by-one pass
    (Blelloch, Fineman and Shun, SPAA 2012), in a few rounds for a random order.
    """
    edges = graph.num_edges
    order = torch.randperm(edges, generator=stream)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(edges)
    remaining = torch.arange(edges)  # the edges still undecided, shrinking each round
    kept = []
    none = torch.full((graph.agents,), edges, dtype=torch.int64)
    matched = torch.zeros(graph.agents, dtype=torch.bool)
    while remaining.numel() > 0:
        left, right = graph.edges[remaining, 0], graph.edges[remaining, 1]
        ranks = rank[remaining]
        first = none.scatter_reduce(0, left, ranks, reduce="amin")
        first = first.scatter_reduce(0, right, ranks, reduce="amin")
        chosen = (first[left] == ranks) & (first[right] == ranks)
        kept.append(remaining[chosen])
        matched[left[chosen]] = True
        matched[right[chosen]] = True
        remaining = remaining[~(matched[left] | matched[right])]
    chosen_edges = torch.cat(kept).sort().values if kept else torch.zeros(0, dtype=torch.int64)
    return _subgraph(graph, chosen_edges.tolist(), f"matching({graph.name})")


def random_edge(graph: Graph, stream: torch.Generator) -> Graph:
    """One edge of ``graph``, drawn uniformly from ``stream``: the only pair that talks
    (a graph without edges gives itself)."""
    if graph.num_edges == 0:
        return graph
    edge = int(torch.randint(graph.num_edges, (1,), generator=stream))
    return _subgraph(graph, [edge], f"edge({graph.name})")


def _subgraph(graph: Graph, kept: list[int], name: str) -> Graph:
    """The graph of ``graph``'s edges at the sorted row indices ``kept``: its rows are
    canonical already, so they are not checked and sorted again (a varying topology
    draws one such graph per iteration)."""
    made = object.__new__(Graph)
    object.__setattr__(made, "agents", graph.agents)
    object.__setattr__(made, "edges", graph.edges[kept])
    object.__setattr__(made, "name", name)
    object.__setattr__(made, "structure", Structure("matching", pairs=len(kept)))
    return made


@dataclass(frozen=True)
class GraphOptions:
    """What ``[topology]`` says of a graph besides its name and agents; a family reads
    the fields it needs."""

    degree: int | None = None
    probability: float | None = None
    rows: int | None = None
    edges_file: str | Path | None = None


GraphBuild = Callable[[int | None, int, GraphOptions], "Graph | torch.Tensor"]
"""What makes a graph: from the agents (None only for ``edges``, which reads them from
its file), a seed for a random graph, and the options, a :class:`Graph` or an (E, 2)
tensor of its edges."""


@dataclass(frozen=True)
class GraphEntry:
    """One graph family by name: how it is made, one line for listings, whose it is."""

    build: GraphBuild
    summary: str
    origin: str


GRAPHS: dict[str, GraphEntry] = {}
"""Every graph ``topology.graph`` may name, built-in ones first."""


def register_graph(name: str, build: GraphBuild, summary: str) -> None:
    """Make ``topology.graph = name`` mean the graph ``build(agents, seed, options)``
    makes: a :class:`Graph`, or an (E, 2) tensor of edges between agents 0 .. agents-1.
    RegistrationError for a malformed or taken name."""
    taken = GRAPHS[name].origin if isinstance(name, str) and name in GRAPHS else None
    check_entry("graph", name, build, taken)
    GRAPHS[name] = GraphEntry(build, summary, current())


def build_graph(
    kind: str,
    agents: int | None,
    *,
    degree: int | None = None,
    probability: float | None = None,
    rows: int | None = None,
    edges_file: str | Path | None = None,
    seed: int = 0,
) -> Graph:
    """Build the graph named ``kind`` (one of :data:`GRAPHS`) and check it is connected.

    Parameters a family does not use are ignored. ``agents`` may be None only
    for ``"edges"``, where it is inferred from the file.
    """
    entry = GRAPHS.get(kind)
    if entry is None:
        raise UsageError(f"topology.graph={kind!r} is unknown; choose one of {', '.join(GRAPHS)}")
    count = None if kind == "edges" and agents is None else _check_agents(agents)
    made = entry.build(count, seed, GraphOptions(degree, probability, rows, edges_file))
    graph = _as_graph(kind, entry, made, count)
    if not graph.is_connected():
        _refuse_disconnected(graph, kind)
    return graph


def _as_graph(kind: str, entry: GraphEntry, made: object, agents: int | None) -> Graph:
    """What a graph family made, as a :class:`Graph`; UsageError naming the family for
    anything else, or for a graph of other agents."""
    where = f"graph '{kind}' ({entry.origin})"
    if isinstance(made, torch.Tensor) and agents is not None:
        if made.dim() != 2 or made.shape[1] != 2 or made.dtype.is_floating_point:
            raise UsageError(f"{where}: its edges must be an (E, 2) integer tensor")
        try:
            return Graph(agents, made.long(), kind)
        except ValueError as error:
            raise UsageError(f"{where}: {error}") from None
    if not isinstance(made, Graph):
        raise UsageError(
            f"{where} made an object of type {type(made).__name__}, not a Graph or an "
            "(E, 2) edge tensor"
        )
    if agents is not None and made.agents != agents:
        raise UsageError(f"{where} made a graph of {made.agents} agents, not {agents}")
    return made


def _needs(agents: int | None) -> int:
    """The agents of a family that does not read them from a file."""
    assert agents is not None
    return agents


def _edges_graph(agents: int | None, seed: int, options: GraphOptions) -> Graph:
    if options.edges_file is None:
        _missing("edges_file", "edges", "a path")
    return from_edge_file(options.edges_file, agents)


def _required(value: _T | None, field: str, kind: str, example: str) -> _T:
    if value is None:
        _missing(field, kind, example)
    return value


def _missing(field: str, kind: str, example: str) -> NoReturn:
    raise UsageError(f"topology.graph={kind!r} needs topology.{field} ({example})")


def _refuse_disconnected(graph: Graph, kind: str) -> None:
    roots = _component_roots(graph)
    components = int(torch.unique(roots).numel())
    stranded = int(torch.nonzero(roots != 0)[0, 0])
    if kind == "edges":
        fix = "add edges to topology.edges_file or lower topology.agents"
    else:
        fix = "choose another topology.graph"
    raise UsageError(
        f"{graph.name} with {graph.agents} agents is disconnected ({components} components; "
        f"agent {stranded} cannot reach agent 0); {fix} so every agent is reachable"
    )


register_graph("ring", lambda agents, seed, options: ring(_needs(agents)), "a cycle")
register_graph(
    "circular",
    lambda agents, seed, options: circular(
        _needs(agents), _required(options.degree, "degree", "circular", "an even number, e.g. 4")
    ),
    "each agent linked to the topology.degree / 2 nearest on each side",
)
register_graph("complete", lambda agents, seed, options: complete(_needs(agents)), "every pair")
register_graph("star", lambda agents, seed, options: star(_needs(agents)), "agent 0 in the middle")
register_graph(
    "torus",
    lambda agents, seed, options: torus(_needs(agents), options.rows),
    "a grid of topology.rows rows, wrapped around",
)
register_graph(
    "exponential",
    lambda agents, seed, options: exponential(_needs(agents)),
    "agent i linked to those 1, 2, 4, ... places ahead and behind",
)
register_graph(
    "erdos_renyi",
    lambda agents, seed, options: erdos_renyi(
        _needs(agents),
        _required(options.probability, "probability", "erdos_renyi", "a number in (0, 1]"),
        seed,
    ),
    "each pair linked with topology.probability, drawn until connected",
)
register_graph("edges", _edges_graph, "the edges of topology.edges_file")
