"""Centralized SGD: one model trained on all the data, the baseline of every run.

One learner draws, each iteration, as many samples as all agents together
(agents x batch_size) from the whole training set and steps
x <- x - alpha_k g(x) with alpha_k = a / (eps k + 1)^d2. Nothing is sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from murmur.algorithms.protocols import Transport
from murmur.algorithms.schedules import SgdConfig


@dataclass(frozen=True)
class CentralizedConfig(SgdConfig):
    """Parameters of centralized SGD: the gradient step only."""

    name = "centralized"


class CentralizedState(NamedTuple):
    x: torch.Tensor
    """The one model, (1, P)."""


class Centralized:
    """Plain SGD on one learner holding all data."""

    def __init__(self, config: CentralizedConfig) -> None:
        self.gradient_step = config.gradient_step()

    def chosen_steps(self) -> dict[str, float]:
        return {}  # one learner mixes nothing

    def init(self, params: torch.Tensor) -> CentralizedState:
        return CentralizedState(x=params.clone())

    def initial_sent(self, params: torch.Tensor) -> torch.Tensor:
        return params

    def params(self, state: CentralizedState) -> torch.Tensor:
        return state.x

    def step(
        self, state: CentralizedState, grads: torch.Tensor, iteration: int, transport: Transport
    ) -> CentralizedState:
        state.x.add_(grads, alpha=-self.gradient_step(iteration))
        return state
