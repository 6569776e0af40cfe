"""Communication graphs and the mixing weights derived from them.

``graphs`` builds and validates who may talk to whom; ``weights`` turns a graph
into a doubly stochastic mixing matrix. Algorithms read both and compute
neither.
"""

from murmur.topology.graphs import (
    GRAPHS,
    Graph,
    build_graph,
    circular,
    complete,
    erdos_renyi,
    exponential,
    from_edge_file,
    one_peer_exponential,
    random_edge,
    random_matching,
    ring,
    star,
    torus,
)
from murmur.topology.weights import (
    WEIGHTS,
    PerGraph,
    as_sparse,
    check_consensus_step,
    consensus_step,
    fastest_consensus_step,
    lambda_max,
    laplacian_extremes,
    laplacian_weights,
    metropolis_weights,
    mixing_matrix,
    mixing_operator,
    uniform_weights,
)

__all__ = [
    "GRAPHS",
    "WEIGHTS",
    "Graph",
    "PerGraph",
    "as_sparse",
    "build_graph",
    "check_consensus_step",
    "consensus_step",
    "fastest_consensus_step",
    "circular",
    "complete",
    "erdos_renyi",
    "exponential",
    "from_edge_file",
    "lambda_max",
    "laplacian_weights",
    "metropolis_weights",
    "laplacian_extremes",
    "mixing_matrix",
    "mixing_operator",
    "random_edge",
    "one_peer_exponential",
    "random_matching",
    "ring",
    "star",
    "torus",
    "uniform_weights",
]
