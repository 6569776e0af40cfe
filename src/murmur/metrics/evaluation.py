"""Network-wide measures computed from stacked agent parameters, and what a run's
records say of its accuracy over the whole run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from murmur.metrics.record_types import (
    AccuracySummary,
    BestAccuracy,
    EvaluationRecord,
    LastKAccuracy,
    ModelColumns,
    SummaryExtra,
    TestColumns,
    ValidationColumns,
)
from murmur.seeding import generator

if TYPE_CHECKING:
    from murmur.models.stacked import StackedModel
    from murmur.models.statistics import Stacked


EVAL_AGENTS_AUTO = 1000
"""``run.eval_agents = 0``: every agent up to this many agents, a sample of this many above."""


def measured_agents(eval_agents: int, agents: int, seed: int) -> torch.Tensor | None:
    """The agents an evaluation measures, sorted (None: every agent): ``eval_agents`` of
    them (``0``: :data:`EVAL_AGENTS_AUTO`) drawn from the ``"eval_agents"`` stream of
    run seed ``seed``, the same at every evaluation."""
    wanted = eval_agents or EVAL_AGENTS_AUTO
    if wanted >= agents:
        return None
    order = torch.randperm(agents, generator=generator(seed, "eval_agents"))
    return order[:wanted].sort().values


CONSENSUS_BLOCK = 2**24
"""Most values :func:`consensus_distance` takes the deviations of at once (64 MB of
float32): beyond, it goes through the agents in blocks of rows, so that measuring
100 agents of a 6.6 M-parameter network costs no two more copies of their models."""


def consensus_distance(params: torch.Tensor) -> float:
    """(1/N) sum_i ||x_i - x_bar||^2 for stacked parameters (N, P), in blocks of rows
    above :data:`CONSENSUS_BLOCK` values."""
    mean = params.mean(dim=0, keepdim=True)
    if params.numel() <= CONSENSUS_BLOCK:
        return float((params - mean).pow(2).sum() / params.shape[0])
    rows = max(1, CONSENSUS_BLOCK // max(1, params.shape[1]))
    total = 0.0
    for start in range(0, params.shape[0], rows):
        total += float((params[start : start + rows] - mean).pow(2).sum())
    return total / params.shape[0]


def accuracy_summary(per_agent: list[float] | None) -> AccuracySummary:
    """Mean, min, max and per-agent list of accuracies (all None for regression)."""
    if per_agent is None:
        return {"mean": None, "min": None, "max": None, "per_agent": None}
    return {
        "mean": sum(per_agent) / len(per_agent),
        "min": min(per_agent),
        "max": max(per_agent),
        "per_agent": per_agent,
    }


def test_set_metrics(
    model: StackedModel, params: torch.Tensor, x_test: torch.Tensor, y_test: torch.Tensor
) -> TestColumns:
    """The test-set part of an evaluation record, for stacked parameters (N, P)."""
    accuracy, loss = model.evaluate(params, x_test, y_test)
    summary = accuracy_summary(accuracy.tolist() if accuracy is not None else None)
    return {
        "test_accuracy": summary["per_agent"],
        "test_loss": loss.tolist(),
        "accuracy_mean": summary["mean"],
        "accuracy_min": summary["min"],
        "accuracy_max": summary["max"],
    }


def validation_columns(
    model: StackedModel,
    params: torch.Tensor,
    validation: tuple[torch.Tensor, torch.Tensor] | None,
    statistics: Stacked | None = None,
) -> ValidationColumns:
    """The validation-set part of an evaluation record, for stacked parameters (N, P)
    (and, for a model with buffers, the rows' running ``statistics`` where they are not
    every agent's): nothing where the run has no validation split (``validation`` None)."""
    if validation is None:
        return {}
    accuracy, loss = model.evaluate(params, *validation, statistics=statistics)
    return {
        "validation_accuracy": accuracy.tolist() if accuracy is not None else None,
        "validation_loss": loss.tolist(),
    }


def model_columns(accuracy: torch.Tensor | None, loss: torch.Tensor) -> ModelColumns:
    """A record's average-model columns from one model's evaluation (``accuracy`` None
    for regression; the first row of each)."""
    return {
        "model_accuracy": float(accuracy[0]) if accuracy is not None else None,
        "model_loss": float(loss[0]),
    }


def average_model_columns(
    model: StackedModel,
    params: torch.Tensor,
    x_test: torch.Tensor,
    y_test: torch.Tensor,
    own: tuple[torch.Tensor | None, torch.Tensor] | None = None,
) -> ModelColumns:
    """The test accuracy and loss of the average model, the mean of the rows of
    ``params`` (N, P), as ``model.pt`` holds it; ``own``: the rows' own accuracy and
    loss, which are the average's when there is one row (nothing is evaluated again)."""
    if params.shape[0] == 1 and own is not None:
        return model_columns(*own)
    return model_columns(*model.evaluate(params.mean(dim=0, keepdim=True), x_test, y_test))


def accuracy_over_run(records: Sequence[EvaluationRecord], last_k: int) -> SummaryExtra:
    """``accuracy_last_k`` and ``accuracy_best`` of a run's ``records`` (oldest first):
    the mean of the last ``last_k`` evaluations' accuracy mean, min and max (of all of
    them where there are fewer), and the evaluation of the highest accuracy mean (the
    first, on ties). Nothing for a run whose records have no accuracy (regression)."""
    scored = [score for score in map(_scores, records) if score is not None]
    if not scored:
        return {}
    last_k_accuracy, best = _last_k_and_best(scored, last_k)
    return {"accuracy_last_k": last_k_accuracy, "accuracy_best": best}


def validation_over_run(records: Sequence[EvaluationRecord], last_k: int) -> SummaryExtra:
    """The summary's validation fields of a run's ``records`` (oldest first), where they
    measure a validation split: ``validation_accuracy`` (mean, min, max, per agent) and
    ``validation_loss`` (mean over agents) of the last evaluation, and for
    classification ``validation_last_k`` and ``validation_best``, made of the validation
    accuracy as :func:`accuracy_over_run` makes ``accuracy_last_k`` and
    ``accuracy_best`` of the test accuracy; the best with the test accuracy mean of its
    evaluation. Nothing for a run without a validation split."""
    measured = [record for record in records if "validation_loss" in record]
    if not measured:
        return {}
    losses = measured[-1]["validation_loss"]
    extra: SummaryExtra = {
        "validation_accuracy": accuracy_summary(measured[-1].get("validation_accuracy")),
        "validation_loss": sum(losses) / len(losses),
    }
    scored = [score for score in map(_validation_scores, measured) if score is not None]
    if not scored:
        return extra
    extra["validation_last_k"], best = _last_k_and_best(scored, last_k)
    test = {record["iteration"]: record.get("accuracy_mean") for record in measured}
    extra["validation_best"] = {**best, "test_mean": test[best["iteration"]]}
    return extra


_Score = tuple[int, float, float, float]
"""An evaluation's iteration and accuracy mean, min and max over agents."""


def _last_k_and_best(scored: list[_Score], last_k: int) -> tuple[LastKAccuracy, BestAccuracy]:
    """The mean of the last ``last_k`` scores' mean, min and max, and the score of the
    highest mean (the first, on ties)."""
    last = scored[-last_k:]
    last_k_accuracy: LastKAccuracy = {
        "k": len(last),
        "mean": sum(score[1] for score in last) / len(last),
        "min": sum(score[2] for score in last) / len(last),
        "max": sum(score[3] for score in last) / len(last),
    }
    iteration, mean, low, high = max(scored, key=lambda score: score[1])  # the first of ties
    return last_k_accuracy, {"iteration": iteration, "mean": mean, "min": low, "max": high}


def _scores(record: EvaluationRecord) -> _Score | None:
    """A record's iteration and accuracy mean, min and max; None where it has none."""
    mean, low, high = (
        record.get("accuracy_mean"),
        record.get("accuracy_min"),
        record.get("accuracy_max"),
    )
    if mean is None or low is None or high is None:
        return None
    return record["iteration"], mean, low, high


def _validation_scores(record: EvaluationRecord) -> _Score | None:
    """A record's iteration and validation accuracy mean, min and max; None where it has
    none (regression, or no validation split)."""
    accuracy = record.get("validation_accuracy")
    if not accuracy:
        return None
    return record["iteration"], sum(accuracy) / len(accuracy), min(accuracy), max(accuracy)
