"""A small world (after Watts and Strogatz): a ring, and from every agent one more link
to an agent drawn at random from the run's seed.

    murmur run dsgd --plugin examples/graphs.py --set topology.graph=small-world
"""

import torch

import murmur.extend as mm


def small_world(agents: int | None, seed: int, options: mm.GraphOptions) -> torch.Tensor:
    if agents is None or agents < 3:
        raise mm.UsageError(f"topology.graph=small-world needs 3 agents or more, not {agents}")
    nodes = torch.arange(agents)
    ring = torch.stack([nodes, (nodes + 1) % agents], dim=1)
    far = torch.randint(0, agents, (agents,), generator=torch.Generator().manual_seed(seed))
    chords = torch.stack([nodes, far], dim=1)[far != nodes]
    return torch.cat([ring, chords])  # the graph keeps each link once


mm.register_graph("small-world", small_world, "a ring and one random link from every agent")
