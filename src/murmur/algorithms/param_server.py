"""The server's rule of AsySG-con, sync-ps and AsySG-incon, whatever runs it.

W workers share one model x (a 1-D tensor) held by the server. A worker reads x
(and its version k, the number of updates so far), computes a mini-batch
gradient G and hands over ``(G, k)``. The server collects the gradients in
arrival order and, once it has M of them (M = ``algorithm.group`` for
asysg-con, W for sync-ps, 1 for asysg-incon), applies their mean with the step
schedule::

    x_{k+1} = x_k - alpha_k * (1/M) sum_{m=1..M} G_m,    alpha_k = step(k)

(``torch.stack(G).mean(dim=0)``, converted to x's dtype, then
``x.add_(mean, alpha=-alpha_k)``). With ``algorithm.optimizer`` (or
``weight_decay``) the server turns each update's mean gradient into a direction first,
with one optimizer state for its one model (:mod:`murmur.algorithms.optimizers`, at
the current x), and steps along that. With ``order_by_worker`` the M gradients are
stacked in worker order instead of arrival order. Each applied gradient's
staleness is tau = k - (version read); their counts make the histogram.

- asysg-con answers each push at once with the current x (to that worker);
- sync-ps holds every answer until the update is applied (all W gradients of
  the current x are in), then answers every held worker, in arrival order;
- asysg-incon sends nothing (shared memory): a worker reads again at once, each
  coordinate from one of the last T + 1 versions (``inconsistent_read``).

The model is evaluated at the start, every ``run.eval_every`` updates and after
the last; the run is over after ``run.iterations`` updates or at the first
evaluation whose training loss is at most ``algorithm.target_loss`` (when > 0).
Gradients that arrive after that are ignored.

:class:`ParameterServer` holds this state and decides; the drivers move the
messages: ``murmur.sim.server`` on the virtual clock, ``murmur.distributed.server``
over torch.distributed.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Required, TypedDict

import torch

from murmur.algorithms.asysg import (
    AsysgConfig,
    AsysgInconConfig,
    SyncPsConfig,
    WorkersConfig,
    inconsistent_read,
)
from murmur.algorithms.optimizers import LocalOptimizer
from murmur.metrics.evaluation import test_set_metrics, validation_columns
from murmur.metrics.record_types import (
    ModelColumns,
    ServerRecord,
    Staleness,
    SummaryExtra,
    TestColumns,
    ValidationColumns,
)
from murmur.metrics.records import Outcome

if TYPE_CHECKING:
    from murmur.models.stacked import StackedModel

Clock = Literal["wall_seconds", "virtual_seconds"]
"""The time field of a driver's records that its summary reports at the target."""


class Times(TypedDict, total=False):
    """A driver's times of one evaluation: real, and the simulator's virtual clock."""

    wall_seconds: Required[float]
    virtual_seconds: float


class ModelMetrics(TestColumns, ValidationColumns, ModelColumns, total=False):
    """The model's part of a server record (:func:`model_metrics`)."""

    train_loss: Required[float]
    train_accuracy: Required[float | None]
    consensus_distance: Required[float]
    gradient_norm_squared: float


@dataclass(frozen=True)
class Arrival:
    """What the server did with one gradient."""

    applied: bool
    """It completed a group of M: x was updated and the version went up by one."""
    evaluate: bool
    """An evaluation is due now (every ``eval_every`` updates and after the last)."""
    answer: tuple[int, ...]
    """The workers to send the current x to now, in this order (unless the run is
    over once the evaluation is done)."""


_IGNORED = Arrival(applied=False, evaluate=False, answer=())


class ParameterServer:
    """x, its version and the rule of one AsySG-con, sync-ps or AsySG-incon run.

    Workers are numbered 0..W-1. ``batch_size``: samples per gradient.
    ``order_by_worker``: stack an update's gradients in worker order (the
    distributed sync-ps, whose arrival order is not reproducible) rather than in
    arrival order. ``reads``: the generator of AsySG-incon's mixed reads
    (required for it, unused otherwise).
    """

    def __init__(
        self,
        config: WorkersConfig,
        x: torch.Tensor,
        iterations: int,
        eval_every: int,
        *,
        batch_size: int,
        order_by_worker: bool = False,
        reads: torch.Generator | None = None,
    ) -> None:
        self.config = config
        self.workers = config.workers
        self.shared_memory = isinstance(config, AsysgInconConfig)
        """AsySG-incon: no messages, mixed reads."""
        self.synchronous = isinstance(config, SyncPsConfig)
        self.group = (
            config.group
            if isinstance(config, AsysgConfig)
            else self.workers
            if self.synchronous
            else 1
        )
        self.iterations = iterations
        self.eval_every = eval_every
        self.batch_size = batch_size
        self.order_by_worker = order_by_worker
        self.step = config.gradient_step()
        self.x = x.clone()
        self.optimizer = LocalOptimizer(config) if config.optimizes else None
        """The server's optimizer (None: plain SGD), and its state for the one model."""
        self.optimizer_state = (
            self.optimizer.init(self.x.view(1, -1)) if self.optimizer is not None else None
        )
        self.message_bytes = self.x.numel() * self.x.element_size()
        """Bytes of one message: a gradient or the model."""
        self.version = 0
        self.pending: list[tuple[int, torch.Tensor, int]] = []
        """(worker, gradient, version read) of the gradients of the next update."""
        self.held: list[int] = []
        """sync-ps: workers whose gradient is in, waiting for the next x."""
        self.staleness_counts: Counter[int] = Counter()
        self.gradients = 0
        self.pushes = [0] * self.workers
        self.server_messages = 0
        """Models sent (``sent``)."""
        self.last_record: ServerRecord | None = None
        """The newest record (None before the first evaluation)."""
        self.target_record: ServerRecord | None = None
        """The first record whose training loss reached the target."""
        self.history: deque[torch.Tensor] = deque(maxlen=getattr(config, "max_delay", 0) + 1)
        """AsySG-incon: the last T + 1 versions of x, oldest first."""
        self.history.append(self.x.clone())
        if self.shared_memory and reads is None:
            raise ValueError("asysg-incon needs a generator for its mixed reads")
        self.reads = reads

    # ------------------------------------------------------------ the rule

    @property
    def done(self) -> bool:
        """``iterations`` updates applied, or the target reached."""
        return self.version >= self.iterations or self.target_record is not None

    def receive(self, worker: int, gradient: torch.Tensor, read_version: int) -> Arrival:
        """Take ``worker``'s gradient of version ``read_version`` of x (ignored once the
        run is over); ValueError unless 0 <= ``read_version`` <= ``version``."""
        if self.done:
            return _IGNORED
        if not 0 <= read_version <= self.version:
            raise ValueError(f"a gradient of version {read_version} of {self.version}")
        self.pushes[worker] += 1
        self.gradients += 1
        self.pending.append((worker, gradient, read_version))
        applied = len(self.pending) == self.group
        if applied:
            self._apply()
        due = self.version % self.eval_every == 0 or self.version >= self.iterations
        return Arrival(applied, applied and due, self._answer(worker, applied))

    def _apply(self) -> None:
        pending = self.pending
        if self.order_by_worker:  # summed in worker order, whatever the order of arrival
            pending = sorted(pending, key=lambda item: item[0])
        alpha = self.step(self.version)
        total = torch.stack([gradient for _, gradient, _ in pending]).mean(dim=0)
        direction = total.to(self.x.dtype)
        if self.optimizer is not None and self.optimizer_state is not None:
            flat = direction.view(1, -1)
            self.optimizer.direction(self.optimizer_state, flat, self.x.view(1, -1))
        self.x.add_(direction, alpha=-alpha)
        for _, _, read_version in pending:
            self.staleness_counts[self.version - read_version] += 1
        self.pending = []
        self.version += 1
        if self.shared_memory:
            self.history.append(self.x.clone())

    def _answer(self, worker: int, applied: bool) -> tuple[int, ...]:
        if self.shared_memory:
            return ()
        if not self.synchronous:
            return (worker,)
        self.held.append(worker)
        if not applied:
            return ()
        answer, self.held = tuple(self.held), []
        return answer

    def read(self) -> tuple[torch.Tensor, int]:
        """What a worker reads now: a copy of x (AsySG-incon: each coordinate from one of
        the stored versions), and the version."""
        if self.shared_memory:
            assert self.reads is not None
            return inconsistent_read(self.history, self.reads), self.version
        return self.x.clone(), self.version

    def answers(self, arrival: Arrival, evaluate: Callable[[], ServerRecord]) -> tuple[int, ...]:
        """After ``arrival``: the evaluation if one is due (``evaluate``, the driver's,
        returns the record, which may reach the target), then the workers to send x to
        now: ``arrival.answer``, or none once the run is over."""
        if arrival.evaluate:
            self.reached(evaluate())
        return () if self.done else arrival.answer

    def sent(self, count: int = 1) -> None:
        """``count`` models were sent to workers."""
        self.server_messages += count

    def reached(self, record: ServerRecord) -> bool:
        """After an evaluation: True when ``record`` is the first whose training loss
        reached the target (which ends the run)."""
        target = self.config.target_loss
        if self.target_record is None and target > 0 and record["train_loss"] <= target:
            self.target_record = record.copy()
            return True
        return False

    @property
    def final_evaluation_due(self) -> bool:
        """The run is over but the last record is not of the current x."""
        return self.last_record is None or self.last_record["iteration"] != self.version

    # ------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        """Everything the rule carries, as plain values, for a checkpoint."""
        saved: dict[str, Any] = {
            "x": self.x,
            "version": self.version,
            "pending": [list(item) for item in self.pending],
            "held": list(self.held),
            "staleness_counts": dict(self.staleness_counts),
            "gradients": self.gradients,
            "pushes": list(self.pushes),
            "server_messages": self.server_messages,
            "last_record": self.last_record if self.last_record is not None else {},
            "target_record": self.target_record,
            "history": list(self.history),
            "reads": self.reads.get_state() if self.reads is not None else None,
        }
        if self.optimizer_state is not None:  # plain SGD's checkpoints stay as they were
            saved["optimizer"] = self.optimizer_state._asdict()
        return saved

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`state_dict`."""
        device = self.x.device  # a checkpoint holds CPU tensors; x may live on a GPU
        self.x.copy_(state["x"])
        self.version = state["version"]
        self.pending = [(worker, grad.to(device), read) for worker, grad, read in state["pending"]]
        self.held = list(state["held"])
        self.staleness_counts = Counter(state["staleness_counts"])
        self.gradients = state["gradients"]
        self.pushes = list(state["pushes"])
        self.server_messages = state["server_messages"]
        last: ServerRecord = state["last_record"]
        self.last_record = last.copy() if last else None
        self.target_record = state["target_record"]
        self.history.clear()
        self.history.extend(version.to(device) for version in state["history"])
        if self.reads is not None:
            self.reads.set_state(state["reads"])
        if self.optimizer_state is not None:
            saved = state["optimizer"]
            for name, value in self.optimizer_state._asdict().items():
                if value is not None:
                    value.copy_(saved[name])

    # ------------------------------------------------------------ reports

    def staleness(self) -> Staleness:
        """Mean, max and histogram (count of tau = 0, 1, ...) of the applied gradients."""
        applied = sum(self.staleness_counts.values())
        total = sum(tau * count for tau, count in self.staleness_counts.items())
        largest = max(self.staleness_counts, default=0)
        return {
            "mean": total / applied if applied else 0.0,
            "max": largest,
            "histogram": [self.staleness_counts.get(tau, 0) for tau in range(largest + 1)],
        }

    def _events_per_agent(self) -> list[int]:
        """Pushes per worker; none in shared memory, where nothing is a message."""
        return [0] * self.workers if self.shared_memory else list(self.pushes)

    def _traffic(self) -> tuple[int, int]:
        """Messages (gradients pushed and models sent) and their bytes."""
        messages = (0 if self.shared_memory else self.gradients) + self.server_messages
        return messages, messages * self.message_bytes

    def record(self, clock: Times, metrics: ModelMetrics) -> ServerRecord:
        """The evaluation record of x now: the rule's counts around ``clock`` (the
        driver's times) and ``metrics`` (``model_metrics``); kept as ``last_record``."""
        messages, size = self._traffic()
        events_per_agent = self._events_per_agent()
        record: ServerRecord = {
            "iteration": self.version,
            "samples": self.gradients * self.batch_size,
            **clock,
            **metrics,
            "events": sum(events_per_agent),
            "messages": messages,
            "bytes": size,
            "events_per_agent": events_per_agent,
            "staleness_mean": self.staleness()["mean"],
        }
        self.last_record = record
        return record

    def _last(self) -> ServerRecord:
        if self.last_record is None:
            raise RuntimeError("the server reports before its first evaluation")
        return self.last_record

    def extra(self, clock: Clock) -> SummaryExtra:
        """The rule's part of the summary's ``extra``; ``clock``: the records' time
        field reported at the target (as ``<clock>_to_target``)."""
        reached = self.target_record
        extra: SummaryExtra = {
            "workers": self.workers,
            "group": self.group,
            "staleness": self.staleness(),
            "train_loss": self._last()["train_loss"],
            "target_loss": self.config.target_loss,
            "iterations_to_target": reached["iteration"] if reached else None,
        }
        at_target = reached[clock] if reached else None
        if clock == "wall_seconds":
            extra["wall_seconds_to_target"] = at_target
        else:
            extra["virtual_seconds_to_target"] = at_target
        extra["server_messages"] = self.server_messages
        return extra

    def outcome(self, train_seconds: float, extra: SummaryExtra) -> Outcome:
        """The run's outcome: x and the counts now, with ``extra``."""
        messages, size = self._traffic()
        return Outcome(
            agents=self.workers,
            topology="shared memory" if self.shared_memory else "parameter server",
            iterations=self.version,
            last_record=self._last(),
            events_per_agent=self._events_per_agent(),
            messages=messages,
            bytes=size,
            train_seconds=train_seconds,
            samples=self.gradients * self.batch_size,
            parameters=self.x.view(1, -1).to("cpu", copy=True),
            extra=extra,
        )


def model_metrics(
    model: StackedModel,
    x: torch.Tensor,
    train: tuple[torch.Tensor, torch.Tensor],
    test: tuple[torch.Tensor, torch.Tensor],
    *,
    gradient_norm: bool = False,
    validation: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> ModelMetrics:
    """The model's part of an evaluation record of the one model ``x``: test-set
    metrics, the validation split's where there is one (``validation``: inputs,
    targets), training loss and accuracy on ``train`` (inputs, targets), and with
    ``gradient_norm`` also ``gradient_norm_squared``, ||grad f(x)||^2 of the mean
    training loss f on all of ``train`` (the quantity of AsySG's ergodic rate)."""
    flat = x.view(1, -1)
    train_accuracy, train_loss = model.evaluate(flat, *train)
    test_columns = test_set_metrics(model, flat, *test)
    metrics: ModelMetrics = {
        **test_columns,
        **validation_columns(model, flat, validation),
        "model_accuracy": test_columns["accuracy_mean"],  # the one model
        "model_loss": test_columns["test_loss"][0],
        "train_loss": float(train_loss[0]),
        "train_accuracy": float(train_accuracy[0]) if train_accuracy is not None else None,
        "consensus_distance": 0.0,
    }
    if gradient_norm:
        metrics["gradient_norm_squared"] = full_gradient_norm_squared(model, x, train)
    return metrics


def full_gradient_norm_squared(
    model: StackedModel, x: torch.Tensor, train: tuple[torch.Tensor, torch.Tensor]
) -> float:
    """||grad f(x)||^2 for f the mean loss of the one model ``x`` over all of ``train``.

    Deterministic and side-effect free: it draws no batch and changes no state, so
    the run it measures is the same with or without it.
    """
    inputs, targets = train
    _, grads = model.loss_and_grad(x.view(1, -1), inputs[None], targets[None])
    return float(grads[0].double().square().sum())
