"""Local optimizers: what each agent makes of its stochastic gradient before the step.

Every SGD algorithm steps ``x <- ... - alpha_k d`` where plain SGD has d = g, the
agent's mini-batch gradient. With ``algorithm.optimizer`` (and
``algorithm.weight_decay``) the agent turns g into another direction d first, with
its own optimizer state, rows stacked on the agent axis as the algorithm's::

    g <- g + lambda x                                  weight_decay = lambda
    momentum:  m <- mu m + g;            d = m
    nesterov:  m <- mu m + g;            d = g + mu m
    adam:      m <- b1 m + (1 - b1) g;   v <- b2 v + (1 - b2) g^2;   t <- t + 1
               d = (m / (1 - b1^t)) / (sqrt(v) / sqrt(1 - b2^t) + eps)

(m = v = 0 at the start; mu and b1 are ``beta1``, b2 ``beta2``, eps ``adam_eps``).
With lr = alpha_k these are ``torch.optim.SGD(momentum=mu, dampening=0)``,
``SGD(momentum=mu, nesterov=True)`` and ``torch.optim.Adam``, each with its
``weight_decay``, for an agent alone; the algorithm then applies alpha_k d exactly as
it applied g (its mixing, triggers and tracking unchanged).

:class:`LocalOptimizer` is the transform (also the parameter server's, on its one
model); :class:`WithOptimizer` wraps an :class:`~murmur.algorithms.protocols.Algorithm`
with it, and :func:`with_optimizer` wraps only when the config asks for more than
plain SGD, so that plain runs make exactly the calls they made before.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from murmur.algorithms.protocols import Algorithm, Transport
from murmur.algorithms.schedules import SgdConfig


class OptimizerState(NamedTuple):
    """Each agent's optimizer state, one row per agent (None where the optimizer keeps
    none)."""

    moment: torch.Tensor | None = None
    """m, (agents, P): the momentum buffer, or Adam's first moment."""
    square: torch.Tensor | None = None
    """v, (agents, P): Adam's second moment."""
    steps: torch.Tensor | None = None
    """t, (agents,) int64: Adam's steps so far, for its bias correction."""


class LocalOptimizer:
    """The direction each agent steps along, from its gradient; see the module docstring."""

    def __init__(self, config: SgdConfig) -> None:
        self.kind = config.optimizer
        self.beta1 = config.beta1
        self.beta2 = config.beta2
        self.eps = config.adam_eps
        self.weight_decay = config.weight_decay

    def init(self, params: torch.Tensor) -> OptimizerState:
        """Zero state for the agents of ``params`` (agents, P)."""
        if self.kind == "sgd":
            return OptimizerState()
        moment = torch.zeros_like(params)
        if self.kind != "adam":
            return OptimizerState(moment=moment)
        steps = torch.zeros(params.shape[0], dtype=torch.int64, device=params.device)
        return OptimizerState(moment, torch.zeros_like(params), steps)

    def direction(
        self, state: OptimizerState, grads: torch.Tensor, params: torch.Tensor
    ) -> OptimizerState:
        """Turn ``grads`` (agents, P), taken at ``params``, into the agents' directions, in
        place; ``state`` is updated in place (and returned)."""
        if self.weight_decay != 0:
            grads.add_(params, alpha=self.weight_decay)
        if self.kind == "sgd":
            return state
        moment = state.moment
        if moment is None:
            raise ValueError(f"the {self.kind} optimizer's state has no moment")
        if self.kind == "adam":
            return self._adam(state, moment, grads)
        moment.mul_(self.beta1).add_(grads)
        if self.kind == "nesterov":
            grads.add_(moment, alpha=self.beta1)
        else:
            grads.copy_(moment)
        return state

    def _adam(
        self, state: OptimizerState, moment: torch.Tensor, grads: torch.Tensor
    ) -> OptimizerState:
        square, steps = state.square, state.steps
        if square is None or steps is None:
            raise ValueError("the adam optimizer's state has no second moment or steps")
        steps.add_(1)
        moment.lerp_(grads, 1 - self.beta1)
        square.mul_(self.beta2).addcmul_(grads, grads, value=1 - self.beta2)
        count = steps.to(torch.float64).unsqueeze(1)
        first = (1 - torch.pow(self.beta1, count)).to(grads.dtype)
        second = (1 - torch.pow(self.beta2, count)).sqrt().to(grads.dtype)
        denominator = torch.sqrt(square, out=grads).div_(second).add_(self.eps)
        torch.div(moment, denominator, out=grads).div_(first)
        return state

    def state_buffers(self) -> int:
        """Model-sized arrays of state per agent: 0, 1 (momentum) or 2 (Adam)."""
        return {"sgd": 0, "momentum": 1, "nesterov": 1, "adam": 2}[self.kind]


class OptimizedState(NamedTuple):
    """The wrapped algorithm's state and the agents' optimizer state."""

    inner: Any
    optimizer: OptimizerState


class WithOptimizer:
    """``inner`` stepping along the directions ``optimizer`` makes of the gradients."""

    def __init__(self, inner: Algorithm, optimizer: LocalOptimizer) -> None:
        self.inner = inner
        self.optimizer = optimizer

    def chosen_steps(self) -> dict[str, float]:
        return self.inner.chosen_steps()

    def init(self, params: torch.Tensor) -> OptimizedState:
        return OptimizedState(self.inner.init(params), self.optimizer.init(params))

    def initial_sent(self, params: torch.Tensor) -> torch.Tensor:
        return self.inner.initial_sent(params)

    def params(self, state: OptimizedState) -> torch.Tensor:
        return self.inner.params(state.inner)

    def step(
        self, state: OptimizedState, grads: torch.Tensor, iteration: int, transport: Transport
    ) -> OptimizedState:
        params = self.inner.params(state.inner)
        optimizer = self.optimizer.direction(state.optimizer, grads, params)
        return OptimizedState(self.inner.step(state.inner, grads, iteration, transport), optimizer)


def with_optimizer(algorithm: Algorithm, config: object) -> Algorithm:
    """``algorithm`` itself for plain SGD (no weight decay), else wrapped with the
    local optimizer ``config`` asks for."""
    if not isinstance(config, SgdConfig) or not config.optimizes:
        return algorithm
    return WithOptimizer(algorithm, LocalOptimizer(config))
