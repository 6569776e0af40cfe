"""What a run writes: step records (metrics.jsonl) and its result (summary.json)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

import torch

from murmur.metrics.logs import CSV_FILE, TENSORBOARD_FOLDER, CsvLog, TensorBoardLog
from murmur.metrics.record_types import (
    AccuracySummary,
    EvaluationRecord,
    RunSummary,
    StopSummary,
    SummaryExtra,
)

OutcomeExtra = SummaryExtra
"""What a runtime adds to its run's summary."""


class MetricsWriter:
    """Appends one JSON object per evaluation to ``metrics.jsonl``, flushed at once, and
    each record to the other logs ``log`` names beside it (``metrics.csv``, TensorBoard
    event files: :mod:`murmur.metrics.logs`).

    ``records``: those the file already holds (a resumed run's); ``resumed``: whether
    the run continues a stopped one in the folder (its other logs then start again from
    ``records``).
    """

    def __init__(
        self,
        path: Path | None,
        records: Iterable[EvaluationRecord] | None = None,
        *,
        log: Sequence[str] = ("jsonl",),
        resumed: bool = False,
    ) -> None:
        self.path = path
        self._file: IO[str] | None = path.open("a") if path is not None else None
        self.records: list[EvaluationRecord] = list(records or [])
        self._logs: list[CsvLog | TensorBoardLog] = []
        if path is not None and "csv" in log:
            self._logs.append(CsvLog(path.with_name(CSV_FILE), self.records))
        if path is not None and "tensorboard" in log:
            last = self.records[-1]["iteration"] if self.records else -1
            folder = path.with_name(TENSORBOARD_FOLDER)
            self._logs.append(TensorBoardLog(folder, last if resumed else None))

    def write(self, record: EvaluationRecord) -> None:
        self.records.append(record)
        if self._file is not None:
            self._file.write(to_json(record) + "\n")
            self._file.flush()
        for log in self._logs:
            log.write(record)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        for log in self._logs:
            log.close()
        self._logs = []


@dataclass
class Outcome:
    """What a runtime hands back after training; ``experiment.run`` adds the rest."""

    agents: int
    topology: str
    iterations: int
    last_record: EvaluationRecord
    """The final evaluation record (``test_accuracy`` per agent, ``test_loss``, ...)."""
    events_per_agent: list[int]
    messages: int
    bytes: int
    train_seconds: float
    samples: int
    communication_saving: float | None = None
    parameters: torch.Tensor | None = None
    extra: SummaryExtra = field(default_factory=lambda: SummaryExtra())
    statistics: dict[str, torch.Tensor] | None = None
    """Each agent's final running statistics ``{name: (agents, *shape)}``, for a model
    with buffers (``models.statistics``); None otherwise."""


@dataclass(frozen=True)
class RunResult:
    """The outcome of one run; ``to_dict()`` is what ``summary.json`` holds."""

    name: str
    preset: str
    algorithm: str
    dataset: str
    agents: int
    topology: str
    iterations: int
    seed: int
    accuracy: AccuracySummary
    """Final test accuracy over agents: mean, min, max, per_agent (all None for a
    regression task)."""
    test_loss: float
    """Final test loss, mean over agents."""
    events: int
    events_per_agent: list[int]
    messages: int
    bytes: int
    communication_saving: float | None
    """1 - events / (agents * iterations); None where not meaningful (SSFN)."""
    consensus_distance: float
    wall_seconds: float
    """Real time of the whole run, evaluation included."""
    train_seconds: float
    """Real time of the training steps alone."""
    samples: int
    samples_per_second: float
    """Training samples processed per second of training time."""
    run_dir: str | None = None
    extra: SummaryExtra = field(default_factory=lambda: SummaryExtra())
    """Algorithm-specific results, merged into the top level of summary.json."""
    status: Literal["finished", "diverged", "collapsed"] = "finished"
    """``finished``, or what a rule of ``[collapse]`` found when it stopped the run early
    (every figure above is then of its last evaluation)."""
    stopped: StopSummary | None = None
    """The rule that stopped the run, at which iteration and why (None: it finished)."""
    parameters: torch.Tensor | None = field(default=None, repr=False, compare=False)
    """Final stacked parameters (agents, P); not written to summary.json."""
    records: list[EvaluationRecord] = field(default_factory=list, repr=False, compare=False)
    """Every evaluation's record, oldest first: the learning curve (the lines of
    metrics.jsonl); not written to summary.json."""

    def to_dict(self) -> RunSummary:
        summary: RunSummary = {
            "status": self.status,
            "name": self.name,
            "preset": self.preset,
            "algorithm": self.algorithm,
            "dataset": self.dataset,
            "agents": self.agents,
            "topology": self.topology,
            "iterations": self.iterations,
            "seed": self.seed,
            "accuracy": self.accuracy,
            "test_loss": self.test_loss,
            "events": self.events,
            "events_per_agent": self.events_per_agent,
            "messages": self.messages,
            "bytes": self.bytes,
            "communication_saving": self.communication_saving,
            "consensus_distance": self.consensus_distance,
            "wall_seconds": self.wall_seconds,
            "train_seconds": self.train_seconds,
            "samples": self.samples,
            "samples_per_second": self.samples_per_second,
            "run_dir": self.run_dir,
            **self.extra,
        }
        if self.stopped is not None:
            summary["stopped"] = self.stopped
        return summary

    def write(self, path: Path) -> None:
        path.write_text(to_json(self.to_dict(), indent=2) + "\n")


def write_failure(path: Path, reason: str, **fields: Any) -> None:
    """summary.json of a run that stopped before its end: ``status``, ``error``, ``fields``."""
    path.write_text(to_json({"status": "failed", "error": reason, **fields}, indent=2) + "\n")


def to_json(value: Any, indent: int | None = None) -> str:
    """Strict JSON: a number that is not finite (NaN, infinity) is written as null."""
    return json.dumps(_finite(value), indent=indent, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value
