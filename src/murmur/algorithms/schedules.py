"""Step-size and threshold schedules of the form ``scale / (eps * k + 1) ** exponent``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Decaying:
    """``scale / (eps * k + 1) ** exponent`` at iteration ``k`` (0-based)."""

    scale: float
    exponent: float
    eps: float

    def __call__(self, iteration: int) -> float:
        return self.scale / (self.eps * iteration + 1.0) ** self.exponent
