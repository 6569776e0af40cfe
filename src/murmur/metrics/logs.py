"""The logs of a run's evaluations besides ``metrics.jsonl`` (``run.log``).

- ``"csv"``: ``metrics.csv`` beside ``metrics.jsonl``, one row per evaluation. Each
  column is a key of the record; a list (one value per agent: ``test_accuracy``,
  ``test_loss``, ``events_per_agent``, ...) becomes one column per agent,
  ``test_accuracy_0``, ``test_accuracy_1``, ... A value the record lacks (or null)
  is an empty cell. The header is the first record's keys; a later record with a
  key the header lacks (a count that appears mid-run) rewrites the file at once
  with the wider header, so that the file is always one table.
- ``"tensorboard"``: TensorBoard event files under ``tensorboard/``
  (``torch.utils.tensorboard``, ``pip install 'murmur[tensorboard]'``), a scalar per
  measure and evaluation with the iteration as its step (:data:`TENSORBOARD_TAGS`).

Both are written as the records come and flushed at once, as ``metrics.jsonl`` is,
so a killed run keeps every evaluation it made. A resumed run rewrites
``metrics.csv`` from the records it keeps and opens a new event file whose first
event hides, in TensorBoard, the events of the stopped run after the last record
kept (``purge_step``).
"""

from __future__ import annotations

import csv
import importlib.util
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from murmur.errors import UsageError
from murmur.metrics.record_types import EvaluationRecord

CSV_FILE = "metrics.csv"
TENSORBOARD_FOLDER = "tensorboard"
TENSORBOARD_INSTALL = "pip install 'murmur[tensorboard]'"

TENSORBOARD_TAGS = {
    "accuracy/mean": "accuracy_mean",
    "accuracy/min": "accuracy_min",
    "accuracy/max": "accuracy_max",
    "accuracy/model": "model_accuracy",
    "accuracy/validation": "validation_accuracy",
    "loss/test": "test_loss",
    "loss/model": "model_loss",
    "loss/train": "train_loss",
    "loss/validation": "validation_loss",
    "consensus_distance": "consensus_distance",
    "messages": "messages",
    "bytes": "bytes",
    "time/virtual_seconds": "virtual_seconds",
    "time/wall_seconds": "wall_seconds",
}
"""TensorBoard's tag of each record key it shows (``loss/test``, ``accuracy/validation``,
``loss/validation``: the mean over agents); a key a record lacks, or holds no number
in, is left out of that step."""


def check_logs(log: Sequence[str]) -> None:
    """UsageError, in one line, for a log this installation cannot write."""
    if "tensorboard" in log and importlib.util.find_spec("tensorboard") is None:
        raise UsageError(
            'run.log asks for "tensorboard", which is not installed; '
            f"{TENSORBOARD_INSTALL}, or drop it from run.log"
        )


def csv_row(record: Mapping[str, Any]) -> dict[str, Any]:
    """A record as flat columns: lists one column per element (``key_0``, ...)."""
    row: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, list):
            row.update((f"{key}_{i}", item) for i, item in enumerate(value))
        else:
            row[key] = value
    return row


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


class CsvLog:
    """``metrics.csv``: the kept records first (the file is rewritten), then one row
    appended and flushed per record."""

    def __init__(self, path: Path, records: Iterable[EvaluationRecord] = ()) -> None:
        self.path = path
        self.rows = [csv_row(record) for record in records]
        self.columns: list[str] = []
        for row in self.rows:
            self._widen(row)
        self._file: IO[str] | None = None
        self._rewrite()

    def _widen(self, row: Mapping[str, Any]) -> bool:
        """Add the keys of ``row`` the header lacks; whether there were any."""
        new = [key for key in row if key not in self.columns]
        self.columns.extend(new)
        return bool(new)

    def _rewrite(self) -> None:
        """Write the whole file again (header and every row), replacing the old one."""
        self.close()
        temporary = self.path.with_name(f".{self.path.name}.new")
        with temporary.open("w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(self.columns)
            writer.writerows(self._cells(row) for row in self.rows)
        os.replace(temporary, self.path)
        self._file = self.path.open("a", newline="")

    def _cells(self, row: Mapping[str, Any]) -> list[Any]:
        return [_cell(row.get(column)) for column in self.columns]

    def write(self, record: EvaluationRecord) -> None:
        row = csv_row(record)
        self.rows.append(row)
        if self._widen(row) or self._file is None:
            self._rewrite()
            return
        csv.writer(self._file).writerow(self._cells(row))
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def tensorboard_scalars(record: Mapping[str, Any]) -> dict[str, float]:
    """The scalars TensorBoard shows of a record (:data:`TENSORBOARD_TAGS`)."""
    scalars: dict[str, float] = {}
    for tag, key in TENSORBOARD_TAGS.items():
        value = record.get(key)
        if isinstance(value, list):  # per agent: their mean
            numbers = [item for item in value if isinstance(item, int | float)]
            value = sum(numbers) / len(numbers) if numbers and len(numbers) == len(value) else None
        if isinstance(value, int | float) and not isinstance(value, bool):
            scalars[tag] = float(value)
    return scalars


class TensorBoardLog:
    """TensorBoard event files in ``folder``: each record's scalars at its iteration,
    flushed at once. ``resumed_after``: the last iteration a resumed run keeps (-1: it
    keeps none); the events after it, the stopped run's, are hidden from TensorBoard."""

    def __init__(self, folder: Path, resumed_after: int | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter  # tensorboard is optional

        purge = None if resumed_after is None else resumed_after + 1
        self._writer = SummaryWriter(log_dir=str(folder), purge_step=purge)

    def write(self, record: EvaluationRecord) -> None:
        for tag, value in tensorboard_scalars(record).items():
            if math.isfinite(value):
                self._writer.add_scalar(tag, value, global_step=record["iteration"])
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
