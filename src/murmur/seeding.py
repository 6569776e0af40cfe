"""Independent, reproducible random streams: one per purpose and agent, drawn from a
generator or computed from a key (:func:`mix32`: integer arithmetic only, the same
numbers on any device and for any number of agents)."""

from __future__ import annotations

import zlib

import numpy as np
import torch


def derive_seed(seed: int, purpose: str, index: int = 0) -> int:
    """A 63-bit seed for stream ``(purpose, index)`` of run seed ``seed``."""
    sequence = np.random.SeedSequence([seed, zlib.crc32(purpose.encode()), index])
    return int(sequence.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


def generator(seed: int, purpose: str, index: int = 0) -> torch.Generator:
    """A torch generator seeded for stream ``(purpose, index)``."""
    return torch.Generator().manual_seed(derive_seed(seed, purpose, index))


LOW32 = 0xFFFFFFFF


def _mul32(x: torch.Tensor, constant: int) -> torch.Tensor:
    """``x * constant mod 2**32`` for ``x`` in [0, 2**32), without int64 overflow:
    the constant is split into 16-bit halves, so no product reaches 2**49."""
    high, low = constant >> 16, constant & 0xFFFF
    return ((((x * high) & 0xFFFF) << 16) + x * low) & LOW32


def mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (the ``lowbias32`` finalizer) of int64 values in [0, 2**32):
    every output bit depends on every input bit."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def hash32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash of int64 values in [0, 2**32), a bijection there: the
    finalizer of splitmix32 (multipliers 0x21F0AAAD and 0x735A2D97, below 2**31, so
    that each product is exact in int64 and takes one multiplication)."""
    x = x ^ (x >> 16)
    x = (x * 0x21F0AAAD) & LOW32
    x = x ^ (x >> 15)
    x = (x * 0x735A2D97) & LOW32
    return x ^ (x >> 15)


def agent_keys(seed: int, purpose: str, agents: torch.Tensor) -> torch.Tensor:
    """A 32-bit key per agent of ``agents`` (int64 indices) for stream ``purpose`` of run
    seed ``seed``, int64 in [0, 2**32), on the agents' device: agent i's key does not
    depend on which other agents are asked for."""
    base = derive_seed(seed, purpose) & LOW32
    low, high = agents & LOW32, agents >> 32
    return mix32(mix32(low ^ base) ^ mix32(high ^ (base >> 7)))
