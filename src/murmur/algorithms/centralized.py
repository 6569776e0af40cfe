"""Centralized SGD: one model trained on all the data, the baseline of every run.

One learner draws, each iteration, as many samples as all agents together
(agents x batch_size) from the whole training set and steps
x <- x - alpha_k g(x) with alpha_k = a / (eps k + 1)^d2. Nothing is sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from murmur.algorithms.schedules import Decaying
from murmur.config import AlgorithmConfig
from murmur.errors import UsageError
from murmur.runtime.transport import Transport


@dataclass(frozen=True)
class CentralizedConfig(AlgorithmConfig):
    """Parameters of centralized SGD."""

    name = "centralized"
    a: float = 0.1
    """Gradient step scale: alpha_k = a / (eps k + 1)^d2."""
    d2: float = 1.0
    """Decay exponent of the gradient step."""
    eps: float = 1e-5
    """Decay rate per iteration of the gradient step."""

    def __post_init__(self) -> None:
        if self.a <= 0:
            raise UsageError(f"algorithm.a must be positive, not {self.a}")
        if self.eps < 0 or self.d2 < 0:
            raise UsageError("algorithm.eps and algorithm.d2 must be >= 0")


class CentralizedState(NamedTuple):
    x: torch.Tensor
    """The one model, (1, P)."""


class Centralized:
    """Plain SGD on one learner holding all data."""

    def __init__(self, config: CentralizedConfig) -> None:
        self.gradient_step = Decaying(config.a, config.d2, config.eps)

    def init(self, params: torch.Tensor) -> CentralizedState:
        return CentralizedState(x=params.clone())

    def params(self, state: CentralizedState) -> torch.Tensor:
        return state.x

    def step(
        self, state: CentralizedState, grads: torch.Tensor, iteration: int, transport: Transport
    ) -> CentralizedState:
        state.x.add_(grads, alpha=-self.gradient_step(iteration))
        return state
