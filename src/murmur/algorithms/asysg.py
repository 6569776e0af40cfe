"""Asynchronous parallel SGD (docs/methods/asysg.md) and its synchronous baseline.

Lian, Huang, Li, Liu, "Asynchronous Parallel Stochastic Gradient for Nonconvex
Optimization", arXiv 1506.08272. W workers share one model x:

- ``asysg-con`` (consistent read, a parameter server): each worker pulls the
  whole x, computes a mini-batch gradient and pushes it; the server applies
  gradients as they arrive, M at a time::

      x_{k+1} = x_k - gamma_k * (1/M) sum_{m=1..M} G(x_{k - tau_{k,m}}; xi_{k,m})

  and answers each push with its current x. tau (the staleness) is the number
  of server updates between the read and the update that applies it.
- ``sync-ps``: the server waits for all W gradients of the same x, applies
  their mean and only then sends the new x to everyone: mini-batch SGD with
  batch W x b.
- ``asysg-incon`` (inconsistent read, shared memory): no server and no
  messages; a worker's read takes each coordinate from one of the last T + 1
  versions of x (uniformly, the newest included), and its update is applied
  to the shared x when its gradient is done.

We average the M gradients of an update (the paper sums them), so that the step
``a`` means the same for any M; the paper's gamma is ours divided by M. The
server's rule (which gradients make an update, staleness, when to evaluate and
stop, whom to answer) is ``murmur.algorithms.param_server``; the simulator
(``murmur.sim.server``) and the distributed runtime (``murmur.distributed.server``)
drive it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from murmur.algorithms.schedules import SgdConfig
from murmur.errors import UsageError


@dataclass(frozen=True)
class WorkersConfig(SgdConfig):
    """What every worker-based SGD algorithm shares."""

    workers: int = 4
    """W, the number of workers."""
    target_loss: float = 0.0
    """Stop once the training loss (whole training set, at an evaluation) is at most
    this; 0 runs all ``run.iterations`` updates."""
    gradient_norm: bool = False
    """Also record ``gradient_norm_squared``, ||grad f(x)||^2 of the mean loss over the
    whole training set, at every evaluation (one full-batch gradient each; it changes
    nothing else in the run)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.workers < 1:
            raise UsageError(f"algorithm.workers must be at least 1, not {self.workers}")
        if self.target_loss < 0:
            raise UsageError(f"algorithm.target_loss must be >= 0, not {self.target_loss}")


@dataclass(frozen=True)
class AsysgConfig(WorkersConfig):
    """AsySG-con: a parameter server applying stale gradients as they arrive."""

    name = "asysg-con"
    group: int = 1
    """M, gradients per server update (1 <= M <= W)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= self.group <= self.workers:
            raise UsageError(
                f"algorithm.group (M = {self.group}) must be between 1 and "
                f"algorithm.workers (W = {self.workers})"
            )


@dataclass(frozen=True)
class SyncPsConfig(WorkersConfig):
    """Synchronous parameter server: waits for all W gradients every update."""

    name = "sync-ps"


@dataclass(frozen=True)
class AsysgInconConfig(WorkersConfig):
    """AsySG-incon: lock-free shared memory with reads that mix versions."""

    name = "asysg-incon"
    max_delay: int = 4
    """T: a read takes each coordinate from one of the last T + 1 versions of x."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_delay < 0:
            raise UsageError(f"algorithm.max_delay must be >= 0, not {self.max_delay}")


def inconsistent_read(versions: Sequence[torch.Tensor], generator: torch.Generator) -> torch.Tensor:
    """AsySG-incon's read: each coordinate from one of ``versions`` (the last T + 1 of
    x, oldest first), uniformly and independently; a copy of the only one if there is
    one (no draw then). One draw of ``generator`` per read otherwise, on the CPU, so
    that the choice is the same wherever x lives; it goes up to x's device unread."""
    if len(versions) == 1:
        return versions[0].clone()
    stacked = torch.stack(list(versions))
    choice = torch.randint(0, len(versions), (1, stacked.shape[1]), generator=generator)
    return stacked.gather(0, choice.to(stacked.device, non_blocking=True))[0]
