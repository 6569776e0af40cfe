"""The random numbers of compressed messages, computed from keys instead of drawn.

A message's draws are a pure function of (run seed, agent, iteration, part of the
message): each agent has a 32-bit key (:func:`murmur.seeding.agent_keys`), hashed
with the iteration into the message's key, and with a label into the key of each
part (a segment, a weight matrix). Entry ``j`` of a part's stream is
``mix32(mix32(j * phi + key) ^ key)`` (``phi`` the 32-bit golden ratio), so that

- every agent's numbers come at once, as tensor operations on the agents' device,
  with no generator per agent and no Python loop over agents;
- they do not depend on how many agents are held together: the simulator and a
  rank of the distributed runtime holding one agent compute the same numbers;
- a run's compression needs no state: a checkpoint keeps nothing of it.

An algorithm makes at most one compressed message per iteration; its parts are
told apart by their labels (:meth:`Draws.child`).
"""

from __future__ import annotations

import math

import torch

from murmur.seeding import LOW32, agent_keys, mix32

_PHI = 0x9E3779B9
"""The 32-bit golden ratio: consecutive counters land far apart before hashing."""

_CHUNK = 1 << 22
"""Entries hashed at once (agents x entries), so that the int64 temporaries stay small."""


class Draws:
    """The keys of one message of a block of agents, (agents,) int64 in [0, 2**32)."""

    def __init__(self, keys: torch.Tensor) -> None:
        self.keys = keys

    def child(self, label: int) -> Draws:
        """The draws of part ``label`` of the message (a segment, a tensor)."""
        return Draws(mix32(self.keys ^ mix32(torch.full_like(self.keys, label & LOW32))))

    def __len__(self) -> int:
        return int(self.keys.shape[0])

    def bits(self, n: int) -> torch.Tensor:
        """(agents, n) int64 in [0, 2**32): entry j of each agent's stream."""
        counters = torch.arange(n, dtype=torch.int64, device=self.keys.device)
        keys = self.keys.unsqueeze(1)
        return mix32(mix32((counters * _PHI + keys) & LOW32) ^ keys)

    def seeds(self) -> torch.Tensor:
        """(agents,) int64 in [0, 2**31): a seed per agent that fits in an int32."""
        return mix32(self.keys ^ 0x5EED5EED) & 0x7FFFFFFF

    def uniform(self, n: int, dtype: torch.dtype) -> torch.Tensor:
        """(agents, n) uniform in [0, 1) of ``dtype``: 24 random bits for float32 and
        lower, 53 (two entries of the stream) for float64."""
        if dtype == torch.float64:
            words = self.bits(2 * n).view(-1, n, 2)
            high, low = words[..., 0] >> 5, words[..., 1] >> 6
            return (high * (1 << 26) + low).to(torch.float64) * 2.0**-53
        return ((self.bits(n) >> 8).to(torch.float64) * 2.0**-24).to(dtype)

    def normal(self, n: int, dtype: torch.dtype) -> torch.Tensor:
        """(agents, n) standard normal of ``dtype`` (Box and Muller, from float64 uniforms)."""
        pairs = (n + 1) // 2
        u = self.uniform(2 * pairs, torch.float64).view(-1, pairs, 2)
        radius = torch.sqrt(-2.0 * torch.log1p(-u[..., 0]))  # 1 - u in (0, 1]
        angle = 2.0 * math.pi * u[..., 1]
        both = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=2)
        return both.reshape(-1, 2 * pairs)[:, :n].to(dtype)


def distinct_indices(seeds: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """(len(seeds), k) int64: for each seed, k distinct indices of [0, n) chosen at random
    (those of the k smallest hashes of the seed with 0..n-1), in increasing order. The
    receiver of a seed finds the sender's indices again."""
    rows = max(1, _CHUNK // max(n, 1))
    chosen = []
    for start in range(0, seeds.shape[0], rows):
        draws = Draws(seeds[start : start + rows] & LOW32)
        counters = torch.arange(n, dtype=torch.int64, device=seeds.device)
        ranked = (draws.bits(n) << 31) | counters  # distinct: ties go to the lower index
        smallest = torch.topk(ranked, k, dim=1, largest=False, sorted=False).indices
        chosen.append(smallest.sort(dim=1).values)
    if not chosen:
        return torch.empty(0, k, dtype=torch.int64, device=seeds.device)
    return torch.cat(chosen)
