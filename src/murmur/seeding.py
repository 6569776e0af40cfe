"""Independent, reproducible random streams: one per purpose and agent."""

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
