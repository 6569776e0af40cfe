"""Hogwild!: lock-free SGD of W processes on one shared-memory model.

The practical form of AsySG-incon (Lian, Huang, Li, Liu, NIPS 2015, arXiv
1506.08272; Niu, Recht, Re, Wright, "Hogwild!", NIPS 2011): W workers share one
parameter vector x without locks. Worker w reads x as it stands (a read may mix
coordinates written at different steps by other workers), draws a mini-batch
xi_{w,k} from its own stream and writes, in place,

    x <- x - alpha_k G(x; xi_{w,k}),   alpha_k = a / (eps k + 1)^d2,

with k the worker's own step count. ``run.iterations`` steps are made in all,
split evenly over the workers. The runtime is :mod:`murmur.procs.hogwild`.
"""

from __future__ import annotations

from dataclasses import dataclass

from murmur.algorithms.schedules import SgdConfig
from murmur.errors import UsageError


@dataclass(frozen=True)
class HogwildConfig(SgdConfig):
    """Parameters of Hogwild!: the gradient step and the number of processes."""

    name = "hogwild"
    workers: int = 2
    """W, the number of worker processes updating the shared model."""
    compare_single: bool = True
    """Also train with one process (same steps in all) and report the speed-up."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.workers < 1:
            raise UsageError(f"algorithm.workers must be at least 1, not {self.workers}")
