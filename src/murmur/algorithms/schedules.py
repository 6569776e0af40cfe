"""Step-size and threshold schedules of the form ``scale / (eps * k + 1) ** exponent``."""

from __future__ import annotations

from dataclasses import dataclass

from murmur.errors import UsageError
from murmur.sections import AlgorithmConfig


@dataclass(frozen=True)
class Decaying:
    """``scale / (eps * k + 1) ** exponent`` at iteration ``k`` (0-based)."""

    scale: float
    exponent: float
    eps: float

    def __call__(self, iteration: int) -> float:
        try:
            return self.scale / (self.eps * iteration + 1.0) ** self.exponent
        except OverflowError:  # a huge exponent: the schedule has decayed to nothing
            return 0.0


@dataclass(frozen=True)
class SgdConfig(AlgorithmConfig):
    """The gradient step every SGD algorithm shares: alpha_k = a / (eps k + 1)^d2."""

    a: float = 0.1
    """Gradient step scale."""
    d2: float = 1.0
    """Decay exponent of the gradient step."""
    eps: float = 1e-5
    """Decay rate per iteration of the steps."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.a <= 0:
            raise UsageError(f"algorithm.a must be positive, not {self.a}")
        if self.eps < 0 or self.d2 < 0:
            raise UsageError("algorithm.eps and algorithm.d2 must be >= 0")

    def gradient_step(self) -> Decaying:
        return Decaying(self.a, self.d2, self.eps)
