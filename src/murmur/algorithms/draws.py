"""The random numbers of compressed messages, computed from keys instead of drawn.

A message's draws are a pure function of (run seed, agent, iteration, part of the
message): each agent has a 32-bit key (:func:`murmur.seeding.agent_keys`), hashed
with the iteration into the message's key, and with a label into the key of each
part (a segment, a weight matrix). Entry ``j`` of a part's stream is
``hash32((j * phi mod 2**32) xor key)`` (``phi`` the 32-bit golden ratio, ``hash32``
the splitmix32 finalizer, a bijection of 32-bit values), so that

- every agent's numbers come at once, as tensor operations on the agents' device,
  with no generator per agent and no Python loop over agents;
- they do not depend on how many agents are held together: the simulator and a
  rank of the distributed runtime holding one agent compute the same numbers;
- a run's compression needs no state: a checkpoint keeps nothing of it.

An algorithm makes at most one compressed message per iteration; its parts are
told apart by their labels (:meth:`Draws.child`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch

from murmur.data.batches import permute
from murmur.seeding import LOW32, hash32

_PHI = 0x9E3779B9
"""The 32-bit golden ratio: consecutive counters land far apart before hashing."""

BLOCKS = {"cpu": 1 << 15}
"""Entries (agents x entries) worked out at once, by device type: on the CPU a block's
int64 temporaries stay in a core's cache, which makes the hashing about 3 times as
fast as one pass over every entry; other devices (a GPU) take 2**24 at once."""


class Draws:
    """The keys of one message of a block of agents, (agents,) int64 in [0, 2**32)."""

    def __init__(self, keys: torch.Tensor) -> None:
        self.keys = keys

    def child(self, label: int) -> Draws:
        """The draws of part ``label`` of the message (a segment, a tensor)."""
        return Draws(hash32(self.keys ^ _salt(label)))

    def __len__(self) -> int:
        return int(self.keys.shape[0])

    def bits(self, n: int) -> torch.Tensor:
        """(agents, n) int64 in [0, 2**32): entry j of each agent's stream."""
        return _by_blocks(self.keys, n, torch.int64, lambda bits: bits)

    def seeds(self) -> torch.Tensor:
        """(agents,) int64 in [0, 2**31): a seed per agent that fits in an int32."""
        return hash32(self.keys ^ 0x5EED5EED) & 0x7FFFFFFF

    def uniform(self, n: int, dtype: torch.dtype) -> torch.Tensor:
        """(agents, n) uniform in [0, 1) of ``dtype``: 24 random bits for float32 and
        lower, 53 (two entries of the stream) for float64."""
        if dtype == torch.float64:
            return _by_blocks(self.keys, 2 * n, torch.float64, _doubles, width=n)
        return _by_blocks(self.keys, n, dtype, _singles)

    def normal(self, n: int, dtype: torch.dtype) -> torch.Tensor:
        """(agents, n) standard normal of ``dtype`` (Box and Muller, from float64 uniforms)."""
        pairs = (n + 1) // 2
        u = self.uniform(2 * pairs, torch.float64).view(-1, pairs, 2)
        radius = torch.sqrt(-2.0 * torch.log1p(-u[..., 0]))  # 1 - u in (0, 1]
        angle = 2.0 * math.pi * u[..., 1]
        both = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=2)
        return both.reshape(-1, 2 * pairs)[:, :n].to(dtype)


def _by_blocks(
    keys: torch.Tensor,
    n: int,
    dtype: torch.dtype,
    finish: Callable[[torch.Tensor], torch.Tensor],
    width: int | None = None,
) -> torch.Tensor:
    """(agents, width) of ``dtype`` (width n unless given): ``finish`` of each block of
    rows' n hashed entries."""
    out = torch.empty(keys.shape[0], width or n, dtype=dtype, device=keys.device)
    rows = max(1, BLOCKS.get(keys.device.type, 1 << 24) // max(n, 1))
    spread = _spread(n, keys.device)
    for start in range(0, keys.shape[0], rows):
        block = hash32(spread ^ keys[start : start + rows].unsqueeze(1))
        out[start : start + rows] = finish(block)
    return out


def _singles(bits: torch.Tensor) -> torch.Tensor:
    """Uniforms in [0, 1) from 24 of each entry's bits: 24-bit integers and the power of
    two are exact in float32, so no rounding."""
    return (bits >> 8).to(torch.float32) * 2.0**-24


def _doubles(bits: torch.Tensor) -> torch.Tensor:
    """Uniforms in [0, 1) with 53 random bits, one from each pair of entries."""
    pairs = bits.view(bits.shape[0], -1, 2)
    value = ((pairs[..., 0] >> 5) * (1 << 26) + (pairs[..., 1] >> 6)).to(torch.float64)
    return value * 2.0**-53


def _salt(label: int) -> int:
    """:func:`~murmur.seeding.hash32` of ``label`` mod 2**32, on a Python integer."""
    x = label & LOW32
    x ^= x >> 16
    x = (x * 0x21F0AAAD) & LOW32
    x ^= x >> 15
    x = (x * 0x735A2D97) & LOW32
    return x ^ (x >> 15)


@functools.lru_cache(maxsize=8)
def _spread(n: int, device: torch.device) -> torch.Tensor:
    """(n,) int64: j * phi mod 2**32 for j = 0..n-1, every agent's counters (not to be
    written to)."""
    return (torch.arange(n, dtype=torch.int64, device=device) * _PHI) & LOW32


WALKS = 48
"""Cycle walks of :func:`distinct_indices` off the CPU, which reads nothing to stop
early: fewer than half of a Feistel domain lies outside [0, n), so an index is still
outside after 48 walks with probability below 2**-48."""


def distinct_indices(seeds: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """(len(seeds), k) int64: for each seed, k distinct indices of [0, n) chosen at random,
    in increasing order: where 0, ..., k - 1 go in the seed's pseudo-random permutation of
    [0, n) (a keyed Feistel network, :func:`murmur.data.batches.permute`), O(k) work per
    seed. The receiver of a seed finds the sender's indices again."""
    agents, device = seeds.shape[0], seeds.device
    shape = (agents, k)
    offsets = torch.arange(k, dtype=torch.int64, device=device).expand(shape)
    keys = (seeds & LOW32).unsqueeze(1).expand(shape).reshape(-1)
    sizes = torch.full(shape, n, dtype=torch.int64, device=device)
    zeros = torch.zeros(shape, dtype=torch.int64, device=device)
    walks = None if device.type == "cpu" else WALKS
    chosen = permute(offsets, sizes, keys, zeros, zeros, walks)
    return chosen.clamp_(max=n - 1).sort(dim=1).values
