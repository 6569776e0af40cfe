"""Step-size and threshold schedules of the form ``scale / (eps * k + 1) ** exponent``,
and the gradient step and local optimizer every SGD algorithm shares."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Literal

from murmur.errors import UsageError
from murmur.sections import AlgorithmConfig, Step

Optimizer = Literal["sgd", "momentum", "nesterov", "adam"]
OPTIMIZERS: tuple[Optimizer, ...] = ("sgd", "momentum", "nesterov", "adam")


@dataclass(frozen=True)
class Decaying:
    """``scale / (eps * k + 1) ** exponent`` at iteration ``k`` (0-based), times
    ``(k + 1) / warmup`` while ``k + 1 < warmup`` (a linear warm-up), times ``decay``
    once for every milestone at or before ``k`` (torch's ``MultiStepLR``)."""

    scale: float
    exponent: float
    eps: float
    warmup: int = 0
    """Iterations of linear warm-up; 0 (or 1): none."""
    milestones: tuple[int, ...] = ()
    """Iterations, increasing, from which the step is ``decay`` times smaller again."""
    decay: float = 1.0

    def __call__(self, iteration: int) -> float:
        try:
            step = self.scale / (self.eps * iteration + 1.0) ** self.exponent
        except OverflowError:  # a huge exponent: the schedule has decayed to nothing
            return 0.0
        if self.milestones:
            step *= self.decay ** bisect.bisect_right(self.milestones, iteration)
        if iteration + 1 < self.warmup:
            return step * ((iteration + 1) / self.warmup)
        return step


def check_step(key: str, value: Step) -> None:
    """Refuse a step size ``key`` (``algorithm.b``) that is neither positive nor "auto"."""
    if value != "auto" and value <= 0:
        raise UsageError(f"{key} must be positive or 'auto', not {value}")


@dataclass(frozen=True)
class DecayingConsensus(AlgorithmConfig):
    """The decaying consensus step of the event-triggered methods (DETSGRAD,
    DETSGRAD-GT): the agents mix with W = I - beta_k L, beta_k = b / (eps k + 1)^d1."""

    b: Step = "auto"
    """Consensus step scale: beta_k = b / (eps k + 1)^d1; needs b * lambda_max(L) < 2;
    "auto" picks 2 / (lambda_2 + lambda_max) for DETSGRAD, 1 / (lambda_2 + lambda_max)
    for DETSGRAD-GT."""
    d1: float = 0.1
    """Decay exponent of the consensus step."""

    def mixing_weights(self) -> str:
        """W = I - beta_k L, decaying with the consensus step."""
        return "laplacian"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_step("algorithm.b", self.b)
        if self.d1 < 0:
            raise UsageError("algorithm.d1 must be >= 0")


@dataclass(frozen=True)
class SgdConfig(AlgorithmConfig):
    """The gradient step every SGD algorithm shares: alpha_k = a / (eps k + 1)^d2
    (times min(1, (k + 1) / warmup)), along the direction the local optimizer makes of
    each agent's gradient (docs/guides/optimizers.md)."""

    a: float = 0.1
    """Gradient step scale."""
    d2: float = 1.0
    """Decay exponent of the gradient step."""
    eps: float = 1e-5
    """Decay rate per iteration of the steps."""
    optimizer: Optimizer = "sgd"
    """Each agent's local optimizer: sgd (the gradient), momentum, nesterov or adam."""
    beta1: float = 0.9
    """First-moment coefficient in [0, 1): mu of momentum and nesterov, beta1 of adam."""
    beta2: float = 0.999
    """Adam's second-moment coefficient, in [0, 1)."""
    adam_eps: float = 1e-8
    """Adam's epsilon, added to the root of the second moment (> 0)."""
    weight_decay: float = 0.0
    """Coupled L2: weight_decay * x is added to the gradient before the optimizer (>= 0)."""
    warmup: int = 0
    """Iterations of linear warm-up: alpha_k times min(1, (k + 1) / warmup); 0: none."""
    milestones: tuple[int, ...] = ()
    """Iterations, increasing, at which the gradient step is multiplied by ``decay``
    (a step decay, as torch's MultiStepLR: from iteration m on, once more for each
    milestone m); empty: none. The CIFAR papers decay at 50 % and 75 % of training."""
    decay: float = 0.1
    """What the step is multiplied by at each of ``milestones``, in (0, 1]."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.a <= 0:
            raise UsageError(f"algorithm.a must be positive, not {self.a}")
        if self.eps < 0 or self.d2 < 0:
            raise UsageError("algorithm.eps and algorithm.d2 must be >= 0")
        if self.optimizer not in OPTIMIZERS:
            raise UsageError(
                f"algorithm.optimizer must be one of {', '.join(OPTIMIZERS)}, "
                f"not {self.optimizer!r}"
            )
        for key in ("beta1", "beta2"):
            value = getattr(self, key)
            if not 0 <= value < 1:
                raise UsageError(f"algorithm.{key} must be in [0, 1), not {value:g}")
        if not 0 < self.adam_eps < math.inf:
            raise UsageError(f"algorithm.adam_eps must be positive, not {self.adam_eps:g}")
        if not 0 <= self.weight_decay < math.inf:
            raise UsageError(f"algorithm.weight_decay must be >= 0, not {self.weight_decay:g}")
        if self.warmup < 0:
            raise UsageError(f"algorithm.warmup must be >= 0 iterations, not {self.warmup}")
        _check_milestones(self.milestones, self.decay)

    def gradient_step(self) -> Decaying:
        return Decaying(self.a, self.d2, self.eps, self.warmup, self.milestones, self.decay)

    @property
    def optimizes(self) -> bool:
        """Whether the gradient is turned into another direction (an optimizer other
        than sgd, or weight decay) before the step."""
        return self.optimizer != "sgd" or self.weight_decay != 0


def _check_milestones(milestones: tuple[int, ...], decay: float) -> None:
    """UsageError unless ``milestones`` are positive and increasing and ``decay`` is in
    (0, 1]."""
    pairs = zip(milestones[:-1], milestones[1:], strict=True)
    if any(later <= earlier for earlier, later in pairs):
        raise UsageError(f"algorithm.milestones must increase, not {list(milestones)}")
    if milestones and milestones[0] < 1:
        raise UsageError(f"algorithm.milestones must be >= 1, not {milestones[0]}")
    if not 0 < decay <= 1:
        raise UsageError(f"algorithm.decay must be in (0, 1], not {decay:g}")
