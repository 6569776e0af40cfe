"""One loop of synchronous mini-batch training, for a block of agents.

The block is every agent in the simulator and a rank's agents (one, or
``--agents-per-rank``) in the distributed runtime: each iteration the block
draws its mini-batches, takes the gradients of all its model copies in one
batched call, and the algorithm steps the block, talking through the
transport it is given (the three, with the block's initial parameters and
batch stream, one :class:`SgdBlock`). Every ``eval_every`` iterations and at the
end (and once before the first step) the runtime's ``evaluate`` measures the
block; what else a runtime adds (a virtual clock, checkpoints, a call after each
step, a rule that stops the run) comes as one :class:`SgdHooks`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

import torch
from tqdm import tqdm

from murmur.algorithms.protocols import Algorithm, Transport
from murmur.metrics.record_types import EvaluationRecord
from murmur.training.checkpoint import Checkpoints
from murmur.training.progress import progress_bar
from murmur.training.setup import Problem


@dataclass(frozen=True)
class Evaluation:
    """Where a block stands at an evaluation."""

    iteration: int
    params: torch.Tensor
    """The block's parameters, (block, P)."""
    samples: int
    """Training samples the block has drawn so far."""
    train_loss: float | None
    """Mean training loss of the block's steps since the previous evaluation."""
    wall_seconds: float
    virtual_seconds: float


@dataclass(frozen=True)
class SgdTrained:
    """The end of a block's training."""

    params: torch.Tensor
    train_seconds: float
    """Real seconds of the training steps alone (evaluations left out)."""
    samples: int
    virtual_seconds: float
    iterations: int
    """The iterations the block made: all it was asked for, or fewer where ``stop``
    ended the loop at an evaluation."""


class LoopCounts(TypedDict):
    """Where the loop stands, but the algorithm's state: what a checkpoint saves of it."""

    samples: int
    virtual_seconds: float
    loss_sum: float
    loss_steps: int
    train_seconds: float


@dataclass
class SgdProgress:
    """Where the loop stands after ``done`` iterations: all it carries to the next one."""

    done: int
    state: Any
    """The algorithm's state."""
    samples: int
    virtual_seconds: float
    loss_sum: float
    """Sum of the mean training losses of the steps since the last evaluation."""
    loss_steps: int
    train_seconds: float = 0.0
    """Real seconds of the training steps so far (evaluations left out)."""
    unread_losses: list[torch.Tensor] = field(default_factory=list)
    """The mean training loss of each step since ``loss_sum`` was last brought up to
    date, not yet read back from the model's device (:meth:`settle`)."""
    unread_messages: list[torch.Tensor] = field(default_factory=list)
    """The largest message of each step since ``virtual_seconds`` was last brought up
    to date, in bytes, not yet read back (:meth:`settle`)."""

    def settle(self, round_seconds: Callable[[int], float] | None) -> None:
        """Read back what the steps since the last call left on their tensors and add
        it, in step order, to ``loss_sum`` and (with ``round_seconds``, the clock's
        duration of a round) ``virtual_seconds``: once per evaluation or checkpoint
        instead of once per step, which on a GPU is a wait for the device each time."""
        if self.unread_losses:
            for loss in torch.stack(self.unread_losses).tolist():
                self.loss_sum += loss
            self.unread_losses.clear()
        if self.unread_messages:
            if round_seconds is not None:
                for size in torch.stack(self.unread_messages).tolist():
                    self.virtual_seconds += round_seconds(size)
            self.unread_messages.clear()

    def counts(self) -> LoopCounts:
        """Everything but the state, as plain numbers (after :meth:`settle`)."""
        return {
            "samples": self.samples,
            "virtual_seconds": self.virtual_seconds,
            "loss_sum": self.loss_sum,
            "loss_steps": self.loss_steps,
            "train_seconds": self.train_seconds,
        }


@dataclass(frozen=True)
class SgdBlock:
    """What the loop trains: a block of agents of ``problem``, stepped by ``algorithm``
    through ``transport``."""

    problem: Problem
    algorithm: Algorithm
    transport: Transport
    initial: torch.Tensor
    """The block's initial parameters, (block, P)."""
    draw: Callable[[], torch.Tensor]
    """The block's next mini-batch indices, (block, batch)."""


@dataclass(frozen=True)
class SgdHooks:
    """What a runtime adds to the loop, each part optional."""

    round_seconds: Callable[[int], float] | None = None
    """The virtual duration of an iteration whose largest message had that many bytes,
    0 when nothing was sent (the simulator's clock; None keeps no virtual time)."""
    checkpoints: Checkpoints | None = None
    """Where to save, when due (after that iteration's evaluation), what ``snapshot``
    makes of the loop's progress: the runtime's whole state."""
    snapshot: Callable[[SgdProgress], Mapping[str, Any]] | None = None
    after_step: Callable[[], None] | None = None
    """Called at the end of every iteration (a distributed rank collects the evaluations
    the ranks have finished summing)."""
    stop: Callable[[], bool] | None = None
    """Asked before every step; true ends the loop there, after the evaluation that made
    it so (a rule of ``[collapse]`` stopped the run)."""

    def checkpoint_due(self, done: int, iterations: int) -> bool:
        """Whether a checkpoint is saved after iteration ``done``."""
        return (
            self.checkpoints is not None
            and self.snapshot is not None
            and self.checkpoints.due(done, iterations)
        )


def train_sgd(
    block: SgdBlock,
    iterations: int,
    eval_every: int,
    evaluate: Callable[[Evaluation], EvaluationRecord | None],
    hooks: SgdHooks,
    *,
    progress: bool = False,
    start: SgdProgress | None = None,
) -> SgdTrained:
    """Step the block's algorithm ``iterations`` times from its initial parameters,
    evaluating every ``eval_every`` iterations, at the end and (from the start) once
    before the first step.

    ``evaluate`` may return the record it made, for the progress bar.
    ``start``: continue from this point of an earlier run (its evaluations are done).
    """
    algorithm, round_seconds = block.algorithm, hooks.round_seconds
    started = time.perf_counter()
    if start is None:
        start = SgdProgress(0, algorithm.init(block.initial), 0, 0.0, 0.0, 0)
        evaluate(Evaluation(0, algorithm.params(start.state), 0, None, 0.0, 0.0))
    at = replace(start, unread_losses=[], unread_messages=[])
    batch = BatchRows(block.problem.x_train, block.problem.y_train)
    bar = progress_bar(progress, iterations, initial=start.done)
    for iteration in range(start.done, iterations):
        if hooks.stop is not None and hooks.stop():
            break
        _step(at, block, batch, iteration, round_seconds)
        evaluating = at.done % eval_every == 0 or at.done == iterations
        saving = hooks.checkpoint_due(at.done, iterations)
        if evaluating or saving:
            _settle(at, round_seconds)
        if evaluating:
            _evaluate(at, algorithm, evaluate, time.perf_counter() - started, bar)
        if saving and hooks.checkpoints is not None and hooks.snapshot is not None:
            hooks.checkpoints.save(at.done, hooks.snapshot(replace(at)))
        if hooks.after_step is not None:
            hooks.after_step()
        bar.update(1)
    bar.close()
    _settle(at, round_seconds)
    return SgdTrained(
        algorithm.params(at.state), at.train_seconds, at.samples, at.virtual_seconds, at.done
    )


def _evaluate(
    at: SgdProgress,
    algorithm: Algorithm,
    evaluate: Callable[[Evaluation], EvaluationRecord | None],
    wall: float,
    bar: tqdm,
) -> None:
    """Evaluate the block where ``at`` stands, ``wall`` seconds into the run; the
    training loss counts from here again, and the progress bar shows the accuracy."""
    record = evaluate(_evaluation(at, algorithm, wall))
    at.loss_sum, at.loss_steps = 0.0, 0
    if record is not None and record["accuracy_mean"] is not None:
        bar.set_postfix(acc=f"{record['accuracy_mean']:.3f}", msgs=record["messages"])


def _step(
    at: SgdProgress,
    block: SgdBlock,
    batch: BatchRows,
    iteration: int,
    round_seconds: Callable[[int], float] | None,
) -> None:
    """Step ``iteration`` of the block on the mini-batches its ``draw()`` gives: ``at``
    moves on by it, its real and (with ``round_seconds``) virtual time and its loss
    counted."""
    algorithm, transport = block.algorithm, block.transport
    step_started = time.perf_counter()
    indices = block.draw()
    x, y = batch.take(indices)
    if block.problem.augment is not None:
        x = block.problem.augment(x, transport.agents, iteration)
    losses, grads = block.problem.model.loss_and_grad(
        algorithm.params(at.state), x, y, draws=(transport.agents, iteration)
    )
    before = _sent_so_far(transport) if round_seconds is not None else None
    at.state = algorithm.step(at.state, grads, iteration, transport)
    at.train_seconds += time.perf_counter() - step_started
    if round_seconds is not None and before is not None:
        at.unread_messages.append(_largest_message(before, _sent_so_far(transport)))
    at.samples += indices.numel()
    at.unread_losses.append(losses.mean())
    at.loss_steps += 1
    at.done = iteration + 1


def _settle(at: SgdProgress, round_seconds: Callable[[int], float] | None) -> None:
    """``at.settle``, its time counted as training: on a GPU, the steps queued since the
    last read run to their end while it waits."""
    started = time.perf_counter()
    at.settle(round_seconds)
    at.train_seconds += time.perf_counter() - started


def _evaluation(at: SgdProgress, algorithm: Algorithm, wall: float) -> Evaluation:
    """Where the block stands at ``at``, ``wall`` seconds into the run."""
    return Evaluation(
        at.done,
        algorithm.params(at.state),
        at.samples,
        at.loss_sum / at.loss_steps,
        wall,
        at.virtual_seconds,
    )


class BatchRows:
    """The rows of a mini-batch, gathered into buffers that every step reuses."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y
        self._x = x.new_empty(0)
        self._y = y.new_empty(0)

    def take(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x[indices], y[indices]`` for (block, batch) ``indices``; valid until the next call."""
        # an upload that does not wait for the device (the sampler works on the CPU)
        flat = indices.reshape(-1).to(self.x.device, non_blocking=True)
        torch.index_select(self.x, 0, flat, out=self._x)
        torch.index_select(self.y, 0, flat, out=self._y)
        return (
            self._x.view(*indices.shape, *self.x.shape[1:]),
            self._y.view(*indices.shape, *self.y.shape[1:]),
        )


def _sent_so_far(transport: Transport) -> tuple[torch.Tensor, torch.Tensor]:
    counters = transport.counters
    return counters.messages_per_agent.clone(), counters.bytes_per_agent.clone()


def _largest_message(
    before: tuple[torch.Tensor, torch.Tensor], after: tuple[torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    """The largest per-agent message size of one round, from counters before and after
    (0 when nothing was sent), as a 0-d tensor left unread."""
    messages, sizes = after[0] - before[0], after[1] - before[1]
    largest = (sizes // messages.clamp(min=1)).max()
    return torch.where(messages.any(), largest, torch.zeros_like(largest))
