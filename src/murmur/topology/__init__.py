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
    from_edge_file,
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
    laplacian_weights,
    metropolis_weights,
    mixing_matrix,
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
    "from_edge_file",
    "lambda_max",
    "laplacian_weights",
    "metropolis_weights",
    "mixing_matrix",
    "random_edge",
    "random_matching",
    "ring",
    "star",
    "torus",
    "uniform_weights",
]
