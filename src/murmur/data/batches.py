"""Mini-batches for every agent: epochs of its own shard, one seeded stream each."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from murmur.seeding import generator


class BatchSampler:
    """Draws ``batch_size`` indices per agent per step, without replacement within an epoch.

    Agent ``i`` walks through random permutations of its shard with its own
    generator, so its batches do not depend on how many other agents there are
    or on which process draws them.
    """

    def __init__(self, shards: list[torch.Tensor], batch_size: int, seed: int) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.shards = shards
        self.batch_size = batch_size
        self._generators = [generator(seed, "batches", i) for i in range(len(shards))]
        self._queues = [shard[:0] for shard in shards]

    def next(self) -> torch.Tensor:
        """Indices into the training set, (agents, batch_size)."""
        return torch.stack([self._take(agent) for agent in range(len(self.shards))])

    def next_for(self, agent: int) -> torch.Tensor:
        """The next ``batch_size`` indices of one agent's stream alone."""
        return self._take(agent)

    def state_dict(self) -> dict[str, Any]:
        """Where each agent's stream stands: its generator and the rest of its epoch."""
        return {
            "generators": [stream.get_state() for stream in self._generators],
            "queues": list(self._queues),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue every agent's stream from :meth:`state_dict`."""
        if len(state["queues"]) != len(self.shards):
            raise ValueError(
                f"a sampler state of {len(state['queues'])} agents for {len(self.shards)}"
            )
        for stream, saved in zip(self._generators, state["generators"], strict=True):
            stream.set_state(saved)
        self._queues = [queue.clone() for queue in state["queues"]]

    def _take(self, agent: int) -> torch.Tensor:
        queue = self._queues[agent]
        shard = self.shards[agent]
        while queue.numel() < self.batch_size:
            order = torch.randperm(shard.numel(), generator=self._generators[agent])
            queue = torch.cat([queue, shard[order]])
        self._queues[agent] = queue[self.batch_size :]
        return queue[: self.batch_size]
