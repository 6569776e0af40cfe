"""Network-wide measures computed from stacked agent parameters."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from murmur.metrics.record_types import AccuracySummary, ModelColumns, TestColumns

if TYPE_CHECKING:
    from murmur.models.stacked import StackedModel


def consensus_distance(params: torch.Tensor) -> float:
    """(1/N) sum_i ||x_i - x_bar||^2 for stacked parameters (N, P)."""
    deviation = params - params.mean(dim=0, keepdim=True)
    return float(deviation.pow(2).sum() / params.shape[0])


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
