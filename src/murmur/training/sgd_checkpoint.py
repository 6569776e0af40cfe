"""What a checkpoint of synchronous mini-batch training holds, and how a run continues
from it: one snapshot builder and one resume path, for the simulator and for every
rank of the distributed runtime.

A snapshot holds the loop's counts, the algorithm's state, the transport's (what
every agent last sent and received), the batch streams' positions, and what the
runtime adds of its own (the simulator's fault schedule and clock, a rank's records).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import torch

from murmur.algorithms.protocols import Algorithm
from murmur.data.batches import BatchSampler
from murmur.errors import UsageError
from murmur.training.checkpoint import restore_tuple, to_plain
from murmur.training.sgd_loop import SgdProgress


class Stateful(Protocol):
    """Something whose state a checkpoint saves and restores (a transport, a clock)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


def sgd_snapshot(
    at: SgdProgress, transport: Stateful, sampler: BatchSampler, **extra: object
) -> dict[str, Any]:
    """The state of a run at ``at``, with the runtime's ``extra`` entries."""
    return {
        "loop": at.counts(),
        "algorithm": to_plain(at.state),
        "transport": transport.state_dict(),
        "sampler": sampler.state_dict(),
        **extra,
    }


def resume_sgd(
    saved: Mapping[str, Any],
    done: int,
    algorithm: Algorithm,
    initial: torch.Tensor,
    transport: Stateful,
    sampler: BatchSampler,
    where: str = "the checkpoint",
) -> SgdProgress:
    """Put ``transport`` and ``sampler`` where the snapshot ``saved``, taken after
    ``done`` iterations, left them; the loop's progress from there, the algorithm's
    state restored from ``initial`` (the block's initial parameters). UsageError,
    naming ``where``, when the snapshot does not fit this run."""
    try:
        transport.load_state_dict(saved["transport"])
        sampler.load_state_dict(saved["sampler"])
        state = restore_tuple(algorithm.init(initial), saved["algorithm"])
        loop = saved["loop"]
        return SgdProgress(
            done,
            state,
            loop["samples"],
            loop["virtual_seconds"],
            loop["loss_sum"],
            loop["loss_steps"],
            loop.get("train_seconds", 0.0),
        )
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as error:
        raise UsageError(f"{where} does not fit this run: {error}") from None
