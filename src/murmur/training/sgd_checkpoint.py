"""What a checkpoint of synchronous mini-batch training holds, and how a run continues
from it: one snapshot builder and one resume path, for the simulator and for every
rank of the distributed runtime.

A snapshot holds the loop's counts, the algorithm's state, the transport's (what
every agent last sent and received), the batch streams' positions, each agent's
running statistics where the model has buffers, and what the
runtime adds of its own (the simulator's fault schedule and clock, a rank's evaluations).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NotRequired, Protocol, TypedDict

import torch

from murmur.algorithms.protocols import Algorithm
from murmur.data.batches import BatchSampler
from murmur.errors import UsageError
from murmur.models.statistics import AgentStatistics
from murmur.training.checkpoint import restore_tuple, to_plain
from murmur.training.sgd_loop import LoopCounts, SgdProgress


class Stateful(Protocol):
    """Something whose state a checkpoint saves and restores (a transport, a clock)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


class SgdSnapshot(TypedDict):
    """What a checkpoint of synchronous SGD holds (``checkpoint.pt``'s ``state``, or a
    rank's file); tensors are saved as they are, by ``torch.save``."""

    loop: LoopCounts
    algorithm: object
    """The algorithm's state record as plain values (``checkpoint.to_plain``)."""
    transport: dict[str, Any]
    """What every agent last sent and received, and the message counters."""
    sampler: dict[str, Any]
    """Each agent's batch stream."""
    statistics: NotRequired[dict[str, torch.Tensor]]
    """Each agent's running statistics (a model with buffers; empty before the first step)."""
    schedule: NotRequired[dict[str, Any] | None]
    """The simulator: the rounds' down links, crashes and graphs (None: none)."""
    clock: NotRequired[dict[str, torch.Tensor]]
    """The simulator: the compute times' random stream."""
    evaluations: NotRequired[dict[str, Any]]
    """A distributed rank: the evaluations whose records rank 0 may not have written yet
    (:meth:`murmur.distributed.rank_records.RankRecords.state_dict`)."""
    agents_per_rank: NotRequired[int]


def sgd_snapshot(
    at: SgdProgress,
    transport: Stateful,
    sampler: BatchSampler,
    statistics: AgentStatistics | None = None,
) -> SgdSnapshot:
    """The state of a run at ``at``, with the model's running ``statistics`` if it has
    any; the runtime adds its own entries."""
    saved: SgdSnapshot = {
        "loop": at.counts(),
        "algorithm": to_plain(at.state),
        "transport": transport.state_dict(),
        "sampler": sampler.state_dict(),
    }
    if statistics is not None:
        saved["statistics"] = statistics.state_dict()
    return saved


def resume_sgd(
    saved: Mapping[str, Any],
    done: int,
    algorithm: Algorithm,
    initial: torch.Tensor,
    transport: Stateful,
    sampler: BatchSampler,
    where: str = "the checkpoint",
    statistics: AgentStatistics | None = None,
) -> SgdProgress:
    """Put ``transport`` and ``sampler`` where the snapshot ``saved``, taken after
    ``done`` iterations, left them; the loop's progress from there, the algorithm's
    state restored from ``initial`` (the block's initial parameters), the model's running
    ``statistics`` (if it has any) from the snapshot's. UsageError,
    naming ``where``, when the snapshot does not fit this run."""
    try:
        transport.load_state_dict(saved["transport"])
        sampler.load_state_dict(saved["sampler"])
        if statistics is not None:
            statistics.load_state_dict(saved["statistics"])
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
