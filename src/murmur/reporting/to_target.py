"""Time and bytes to a target accuracy: how papers compare methods that talk less.

A run *reaches* a target accuracy at its first evaluation whose mean test accuracy
over agents (``accuracy_mean`` of metrics.jsonl) is at least the target; what it
had spent by then is read from that record: the iteration, the wall-clock and
(in the simulator) the virtual seconds, and the bytes and messages all agents had
sent. A run that never reaches it has none of them ("-" in a table), and so has a
run of regression, which has no accuracy.

The target is ``--target`` of ``murmur run`` and ``murmur report`` (a percentage),
else :func:`default_target`: :data:`DEFAULT_SHARE` of the highest final mean
accuracy among the table's finished runs, rounded down to a whole percent, so that
the best run reaches it and every run's way to it is compared on one scale.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from murmur.metrics.record_types import EvaluationRecord, RunSummary, ToAccuracy
from murmur.metrics.stops import stop_of
from murmur.reporting.report import read_records

__all__ = [
    "DEFAULT_SHARE",
    "default_target",
    "reach",
    "with_targets",
    "targets_from_folders",
    "grouped_targets",
]

DEFAULT_SHARE = 0.95
"""The default target: this share of the table's highest final mean accuracy."""


def default_target(summaries: Sequence[RunSummary]) -> float | None:
    """:data:`DEFAULT_SHARE` of the highest final mean accuracy among the runs that
    finished (a collapsed or diverged run sets no target), rounded down to a whole
    percent; None where no run has an accuracy (regression, or every run stopped)."""
    finals = [
        float(mean)
        for summary in summaries
        if stop_of(summary) is None
        and isinstance(accuracy := summary.get("accuracy"), dict)
        and isinstance(mean := accuracy.get("mean"), int | float)
        and math.isfinite(mean)
    ]
    if not finals:
        return None
    return math.floor(100 * DEFAULT_SHARE * max(finals)) / 100


def reach(records: Sequence[EvaluationRecord], target: float) -> ToAccuracy:
    """What a run had spent at its first evaluation whose mean accuracy reached
    ``target``: its ``accuracy`` (the target) alone where none did."""
    for record in records:
        mean = record.get("accuracy_mean")
        if isinstance(mean, int | float) and mean >= target:
            reached: dict[str, Any] = {"accuracy": target, "iteration": record["iteration"]}
            for key in ("wall_seconds", "virtual_seconds", "bytes", "messages"):
                if isinstance(record.get(key), int | float):
                    reached[key] = record.get(key)
            return cast(ToAccuracy, reached)
    return {"accuracy": target}


def with_targets(
    summaries: Sequence[RunSummary],
    records: Sequence[Sequence[EvaluationRecord]],
    target: float | None = None,
) -> list[RunSummary]:
    """Copies of ``summaries`` with ``to_accuracy``: where each run reached ``target``
    (else :func:`default_target`) in its ``records`` (one list per summary, in order).
    The summaries come back as they are where there is no target (no accuracy)."""
    chosen = default_target(summaries) if target is None else target
    if chosen is None:
        return list(summaries)
    result = []
    for summary, run_records in zip(summaries, records, strict=True):
        copy = cast(RunSummary, dict(summary))
        copy["to_accuracy"] = reach(run_records, chosen)
        result.append(copy)
    return result


def targets_from_folders(
    summaries: Sequence[RunSummary], target: float | None = None
) -> list[RunSummary]:
    """:func:`with_targets` with each run's records read from its folder's metrics.jsonl
    (none for a run without a folder)."""
    records = [
        read_records(Path(folder) / "metrics.jsonl")
        if isinstance(folder := summary.get("run_dir"), str)
        else []
        for summary in summaries
    ]
    return with_targets(summaries, records, target)


def grouped_targets(
    groups: Sequence[Sequence[RunSummary]], target: float | None = None
) -> list[list[RunSummary]]:
    """:func:`targets_from_folders` of groups of runs (a comparison's members, one run
    per seed each), on one target for all, in the same groups."""
    flat = targets_from_folders([summary for group in groups for summary in group], target)
    result, start = [], 0
    for group in groups:
        result.append(flat[start : start + len(group)])
        start += len(group)
    return result
