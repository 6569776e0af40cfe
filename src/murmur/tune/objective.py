"""One trial of ``murmur tune``: a point's runs, one per seed, scored on the validation
split; the test set is never read.

    point -> config (space.with_point) -> one run per seed (experiment.run)
          -> each evaluation's validation figure reported (pruning) -> the score

A classification run scores its summary's ``validation_last_k.mean``, the mean
validation accuracy over agents of its last ``run.last_k`` evaluations, to be
maximized; a regression run its ``validation_loss``, the mean over agents at its last
evaluation, to be minimized. A trial scores the mean over its seeds.

A run that a rule of ``[collapse]`` stops (diverged, collapsed) scores nothing: it
ends its trial as :class:`Stopped`, as does a trial that falls behind the others at
an evaluation (:class:`Stopped` too, from the pruner's verdict). A run that fails (a
loss that is no longer a number where no rule watches it) raises
:class:`~murmur.errors.RunFailed`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from murmur.config import Config
from murmur.data import DATASETS
from murmur.errors import RunFailed
from murmur.experiment import run
from murmur.metrics.record_types import EvaluationRecord
from murmur.metrics.records import RunResult
from murmur.training.runs import OnRecord
from murmur.tune.bytes_limit import bytes_share

Task = Literal["classification", "regression"]

Report = Callable[[int, float], bool]
"""Takes an evaluation's step (:func:`step_of`) and figure; says whether the trial has
fallen behind and should stop there."""


@dataclass(frozen=True)
class Objective:
    """What a member's trials are scored by, from its task."""

    task: Task

    @property
    def direction(self) -> Literal["maximize", "minimize"]:
        return "maximize" if self.task == "classification" else "minimize"

    @property
    def name(self) -> str:
        """The figure in words, for reports."""
        if self.task == "classification":
            return "validation accuracy (mean of the last run.last_k evaluations)"
        return "validation loss (at the last evaluation)"

    def at_evaluation(self, record: EvaluationRecord) -> float | None:
        """The figure an evaluation reports for pruning: the mean over agents of its
        validation accuracy (classification) or loss; None where it measured none."""
        if self.task == "classification":
            values = record.get("validation_accuracy")
        else:
            values = record.get("validation_loss")
        if not values:
            return None
        return sum(values) / len(values)

    def of_run(self, result: RunResult) -> float:
        """A finished run's score; RunFailed where it is not a number."""
        if self.task == "classification":
            last_k = result.extra.get("validation_last_k")
            score = last_k["mean"] if last_k is not None else None
        else:
            score = result.extra.get("validation_loss")
        if score is None or not math.isfinite(score):
            raise RunFailed(f"seed {result.seed}: the validation {self._figure} is not a number")
        return float(score)

    def shown(self, score: float) -> str:
        """A score as reports print it: ``87.3 %`` or ``loss 0.0123``."""
        if self.task == "classification":
            return f"{100 * score:.2f} %"
        return f"loss {score:.4g}"

    @property
    def _figure(self) -> str:
        return "accuracy" if self.task == "classification" else "loss"


def objective_of(config: Config) -> Objective:
    """The objective of ``config``'s runs: by the task of its data."""
    data = config.data
    if data.dataset == "file":
        return Objective(data.task)
    info = DATASETS.get(data.dataset)
    return Objective("regression" if info is not None and info.classes == 0 else "classification")


class Stopped(Exception):
    """A trial that ended before its last run's end: a rule of ``[collapse]`` stopped one
    of its runs, or it fell behind the others (pruned)."""

    def __init__(
        self,
        reason: str,
        iteration: int,
        rule: str | None = None,
        bytes_vs_dsgd: float | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.iteration = iteration
        self.rule = rule
        """The rule that stopped the run (``collapse``'s), None where the pruner did."""
        self.bytes_vs_dsgd = bytes_vs_dsgd
        """What the stopped run sent up to its stop, over DSGD's in as many iterations
        (None: the pruner stopped it, or it has no DSGD baseline)."""


class SeedScore(NamedTuple):
    """One seed's run of a trial: its score, and its bytes over DSGD's."""

    score: float
    bytes_vs_dsgd: float | None


def step_of(config: Config, seed_index: int, iteration: int) -> int:
    """The step at which the evaluation at ``iteration`` of the ``seed_index``-th seed's
    run reports: the seeds' runs one after the other, so that trials compare the same
    seed at the same iteration."""
    return seed_index * (config.run.iterations + 1) + iteration


def train(config: Config, on_record: OnRecord) -> RunResult:
    """One run of a trial, in this process: no folder, no progress bar."""
    return run(config, on_record=on_record)


def score_point(
    config: Config, seeds: Sequence[int], objective: Objective, report: Report
) -> list[SeedScore]:
    """The score (and bytes) of each seed's run of ``config``, one run after the other;
    Stopped where a rule stopped one or ``report`` says the trial has fallen behind."""
    scores = []
    for index, seed in enumerate(seeds):
        seeded = dataclasses.replace(config, run=dataclasses.replace(config.run, seed=seed))
        result = train(seeded, _reporting(config, index, seed, objective, report))
        if result.stopped is not None:
            stop = result.stopped
            raise Stopped(
                f"seed {seed} {result.status} at iteration {stop['iteration']} "
                f"({stop['rule']}): {stop['reason']}",
                stop["iteration"],
                rule=stop["rule"],
                bytes_vs_dsgd=bytes_share(result),
            )
        scores.append(SeedScore(objective.of_run(result), bytes_share(result)))
    return scores


def _reporting(
    config: Config, index: int, seed: int, objective: Objective, report: Report
) -> OnRecord:
    """What the run of the ``index``-th seed does with each record: report its figure,
    and stop the trial where it has fallen behind."""

    def on_record(record: EvaluationRecord) -> None:
        value = objective.at_evaluation(record)
        if value is None or not math.isfinite(value):
            return  # a loss that is no longer a number: a rule or the run's check ends it
        iteration = record["iteration"]
        if report(step_of(config, index, iteration), value):
            raise Stopped(
                f"seed {seed} fell behind the other trials at iteration {iteration}", iteration
            )

    return on_record
