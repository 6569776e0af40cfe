"""The rules that stop a run once it has diverged or collapsed, read off each
evaluation record as the run makes it.

    record -> HealthWatch.observe -> None (train on) | Stop (the run ends here)

Each rule gives the run a status (settings: ``[collapse]``,
:class:`~murmur.sections.CollapseConfig`):

- ``non-finite`` -> diverged: a test or training loss is no longer a number.
- ``loss-blowup`` -> diverged: the loss is more than ``loss_factor`` times the loss at
  the first evaluation. The loss is the training loss where a record holds one, else
  the test loss, mean over agents; a mini-batch run's first record, made before any
  step, holds the test loss of the initial model, which its training losses are then
  measured against.
- ``consensus-growing`` -> diverged, decentralized mini-batch runs without
  ``[faults]`` only (a layer-wise run solves a new problem at each layer, whose
  distance says nothing of the last one's; agents cut off by down links or crashes
  drift apart by design): the median consensus
  distance of the last ``consensus_evaluations`` evaluations is more than
  ``consensus_growth`` times that of the ones nearest the middle of the run so far,
  and above ``consensus_floor`` (:func:`consensus_medians` and :func:`grew`, which
  ``scripts/consensus_check.py`` applies to finished runs, with a lower growth).
- ``chance`` -> collapsed: the agents' mean accuracy is within ``chance_margin`` of
  chance level for ``patience`` evaluations in a row. The accuracy is the
  validation split's where the records hold ``validation_accuracy``, else the test
  set's; chance level is the share of the most common class of that split (what
  always answering one class scores at best; 1/classes for a balanced split).

The last two judge only evaluations after the warm-up (``warmup`` of the run's
iterations, or layers for a layer-wise run). Each rule judges a run on its records
alone, so a run resumed from a checkpoint replays its kept records first.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from murmur.algorithms.arock import DssfnAsyncConfig
from murmur.algorithms.ssfn import LayerwiseConfig
from murmur.data.datasets import Dataset
from murmur.metrics.fields import finite_number
from murmur.metrics.record_types import EvaluationRecord, StopSummary
from murmur.sections import CollapseConfig
from murmur.training.setup import Setup

RuleName = Literal["non-finite", "loss-blowup", "consensus-growing", "chance"]
Status = Literal["diverged", "collapsed"]


@dataclass(frozen=True)
class Stop:
    """A rule's verdict: the run ends at the evaluation of ``iteration``."""

    rule: RuleName
    iteration: int
    reason: str
    """One line saying what the rule saw."""

    @property
    def status(self) -> Status:
        """What the run became: ``collapsed`` (at chance), else ``diverged``."""
        return "collapsed" if self.rule == "chance" else "diverged"

    def summary(self) -> StopSummary:
        """The summary's ``stopped`` entry."""
        return {"rule": self.rule, "iteration": self.iteration, "reason": self.reason}


@dataclass(frozen=True)
class ChanceLevels:
    """What always answering the most common class scores on each split measured."""

    test: float
    validation: float | None = None
    """None: the run holds no validation split."""


@dataclass(frozen=True)
class RunShape:
    """What the rules need to know of a run besides its records."""

    span: int
    """The iterations (layers, for a layer-wise run) the run would make."""
    consensus: bool
    """Whether ``consensus-growing`` applies: a decentralized mini-batch run without
    faults."""
    chance: ChanceLevels | None
    """None: a regression task, which has no accuracy."""


class HealthWatch:
    """The rules of ``config`` applied to one run's records, one at a time, oldest first;
    it keeps only what they need of the earlier ones."""

    def __init__(self, config: CollapseConfig, shape: RunShape) -> None:
        self.config = config
        self.shape = shape
        self.stopped: Stop | None = None
        """The first verdict; once given, later records are not judged."""
        self.warmup_ends = config.warmup * shape.span
        self.first_loss: float | None = None
        self.curve_iterations: list[int] = []
        self.curve: list[float] = []
        """The consensus distance of each evaluation so far, and its iteration."""
        self.at_chance = 0
        """Evaluations in a row, after the warm-up, at chance level."""

    def stopping(self) -> bool:
        """Whether a rule has stopped the run (what its runner asks after evaluations)."""
        return self.stopped is not None

    def observe(self, record: EvaluationRecord) -> Stop | None:
        """Judge the evaluation ``record``; the verdict so far (None: train on)."""
        if self.stopped is None:
            verdicts: tuple[tuple[RuleName, str | None], ...] = (
                ("non-finite", non_finite(record)),
                ("loss-blowup", self._loss_blowup(record)),
                ("consensus-growing", self._consensus_growing(record)),
                ("chance", self._chance(record)),
            )
            for rule, reason in verdicts:
                if reason is not None:
                    self.stopped = Stop(rule, record["iteration"], reason)
                    break
        return self.stopped

    def _loss_blowup(self, record: EvaluationRecord) -> str | None:
        loss = run_loss(record)
        if loss is None or not math.isfinite(loss):
            return None
        if self.first_loss is None:
            self.first_loss = loss
            return None
        factor = self.config.loss_factor
        if self.first_loss > 0 and loss > factor * self.first_loss:
            return (
                f"the loss is {loss:.4g}, more than {factor:g} times its {self.first_loss:.4g} "
                "at the first evaluation"
            )
        return None

    def _consensus_growing(self, record: EvaluationRecord) -> str | None:
        distance = record.get("consensus_distance")
        if not self.shape.consensus or distance is None or not math.isfinite(distance):
            return None
        iteration = record["iteration"]
        self.curve_iterations.append(iteration)
        self.curve.append(distance)
        window = self.config.consensus_evaluations
        if iteration < self.warmup_ends or len(self.curve) < 2 * window:
            return None
        middle, end = consensus_medians(self.curve_iterations, self.curve, window)
        if not grew(middle, end, self.config.consensus_growth, self.config.consensus_floor):
            return None
        return (
            f"the consensus distance grew from {middle:.3g} around iteration {iteration // 2} "
            f"to {end:.3g} over the last {window} evaluations"
        )

    def _chance(self, record: EvaluationRecord) -> str | None:
        measured = measured_accuracy(record, self.shape.chance)
        if measured is None or record["iteration"] < self.warmup_ends:
            return None
        accuracy, chance, split = measured
        if accuracy > chance + self.config.chance_margin:
            self.at_chance = 0
            return None
        self.at_chance += 1
        if self.at_chance < self.config.patience:
            return None
        evaluations = "evaluation" if self.at_chance == 1 else f"{self.at_chance} evaluations"
        return (
            f"{split} accuracy {100 * accuracy:.1f} % at chance ({100 * chance:.1f} %) "
            f"for {evaluations}"
        )


def non_finite(record: EvaluationRecord) -> str | None:
    """Why ``record``'s losses say the run diverged (None: they are all numbers)."""
    losses = record.get("test_loss")
    if isinstance(losses, list) and not all(finite_number(loss) is not None for loss in losses):
        return "the test loss is no longer finite"
    train = _field(record, "train_loss")
    if train is not None and finite_number(train) is None:
        return "the training loss is no longer finite"
    return None


def run_loss(record: EvaluationRecord) -> float | None:
    """The loss ``loss-blowup`` follows: the record's training loss where it holds one,
    else its test loss, mean over agents (None: it holds neither)."""
    train = _field(record, "train_loss")
    if isinstance(train, int | float):
        return float(train)
    losses = record.get("test_loss")
    if not losses:
        return None
    return sum(losses) / len(losses)


def measured_accuracy(
    record: EvaluationRecord, chance: ChanceLevels | None
) -> tuple[float, float, str] | None:
    """The mean accuracy the ``chance`` rule judges, the chance level of its split and
    the split's name: the validation split's where ``record`` holds it, else the test
    set's. None for a run without accuracies (regression)."""
    if chance is None:
        return None
    validation = _field(record, "validation_accuracy")
    if isinstance(validation, list) and validation and chance.validation is not None:
        return sum(validation) / len(validation), chance.validation, "validation"
    accuracy = record.get("accuracy_mean")
    if accuracy is None:
        return None
    return accuracy, chance.test, "test"


def grew(middle: float, end: float, growth: float, floor: float) -> bool:
    """Whether a consensus distance grew from ``middle`` to ``end`` (the medians of
    :func:`consensus_medians`): ``end`` is more than ``growth`` times ``middle`` and more
    than ``floor``, below which agents are in consensus whatever the ratio."""
    return end > growth * middle and end > floor


def consensus_medians(
    iterations: Sequence[int], distances: Sequence[float], window: int
) -> tuple[float, float]:
    """The median consensus distance of the ``window`` evaluations nearest the middle
    iteration of a curve (its evaluations' ``iterations``, ascending, and
    ``distances``; the middle is half the last iteration, and the earlier evaluation
    wins a tie) and of its last ``window`` evaluations, so that one evaluation taken
    just after a swing does not count as growth."""
    if not distances:
        raise ValueError("a consensus-distance curve needs at least one evaluation")
    target = iterations[-1] / 2
    place = bisect.bisect_left(iterations, target)
    around = range(max(place - window, 0), min(place + window, len(iterations)))
    nearest = sorted(around, key=lambda index: abs(iterations[index] - target))[:window]
    middle = statistics.median(distances[index] for index in nearest)
    return middle, statistics.median(distances[-window:])


def chance_levels(dataset: Dataset) -> ChanceLevels | None:
    """The chance level of ``dataset``'s test and validation splits (None: regression)."""
    if dataset.task != "classification":
        return None
    validation = dataset.validation
    return ChanceLevels(
        test=majority_share(dataset.y_test),
        validation=majority_share(validation[1]) if validation is not None else None,
    )


def majority_share(labels: torch.Tensor) -> float:
    """The share of ``labels`` of the most common class (0 for no labels)."""
    if labels.numel() == 0:
        return 0.0
    return float(torch.bincount(labels.reshape(-1).cpu()).max()) / labels.numel()


def health_watch(setup: Setup) -> HealthWatch | None:
    """The rules ``setup``'s run is held to; None where none apply: ``collapse.enabled``
    is false, or the run is asynchronous dSSFN in the distributed runtime, whose
    records reach rank 0 only at its end (it keeps the non-finite check, which fails the
    run). In the distributed runtime every rank holds a watch of its own, and every rank
    judges the same records (an SGD run's are the ranks' sums; a synchronous dSSFN run's
    the ranks' gathered rows; a server's its own), so that all of them stop at the same
    evaluation."""
    config = setup.config
    if not config.collapse.enabled:
        return None
    if setup.plan.runtime == "distributed" and isinstance(config.algorithm, DssfnAsyncConfig):
        return None
    algorithm = config.algorithm
    span = algorithm.layers if isinstance(algorithm, LayerwiseConfig) else config.run.iterations
    plan = setup.plan
    consensus = plan.decentralized and plan.kind == "sgd" and not config.faults.active
    shape = RunShape(span, consensus, chance_levels(setup.dataset))
    return HealthWatch(config.collapse, shape)


def _field(record: EvaluationRecord, key: str) -> object:
    """``record[key]`` of a key that only some kinds of record hold (None: absent)."""
    fields: Mapping[str, object] = record
    return fields.get(key)
