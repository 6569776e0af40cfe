"""What a report needs of a run folder's files: summary.json and metrics.jsonl, field by field.

summary.json of a finished run holds every field of
:class:`murmur.metrics.records.RunResult` (``run_dir`` aside: the report uses
the folder it reads); algorithm-specific fields (``virtual_seconds``,
``layers``, ``staleness``, ``failed_agents``, ``dropped_messages``, ...) are
checked only where a run wrote them. A summary with ``"status": "failed"`` is a
run that stopped during training: it needs only its ``error``, a line saying
why. A run that a rule stopped early (``"diverged"`` or ``"collapsed"``) writes every
field of a finished run and ``stopped`` (the rule, the iteration, why). A summary
without ``status`` is a finished run written before runs had one.

Each line of metrics.jsonl is an evaluation record with its ``iteration``; the
other fields the report reads are checked where present. A value of the wrong
type is damage: counts are integers, seconds and accuracies finite numbers in
range, and only losses and distances (which a diverged run may leave NaN or
infinite) may be any number.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from murmur.errors import UsageError, shortened
from murmur.metrics.fields import Field, fields_of
from murmur.metrics.record_types import EvaluationRecord, FailedSummary, RunSummary

__all__ = ["check_record", "check_summary"]

_SHOWN_CHARACTERS = 40
"""Longest value text a message quotes; longer ones are cut."""
_REMAKE = "the file is damaged, remake the run"

FINISHED, OPTIONAL = fields_of(RunSummary)
"""Fields every finished run writes; algorithm-specific fields the report reads,
checked where a run wrote them (the fault counts among them)."""

FAILED, FAILED_OPTIONAL = fields_of(FailedSummary)
"""Fields every failed run writes (besides its status); what it writes of its run
when it can."""

STATUS = Field(
    '"finished", "diverged", "collapsed" or "failed"',
    lambda v: v in ("finished", "diverged", "collapsed", "failed"),
)

RECORD, RECORD_OPTIONAL = fields_of(EvaluationRecord)
"""Fields every evaluation record holds; those the report and its plots read,
checked where present."""


def check_summary(where: str, summary: dict[str, Any]) -> None:
    """Refuse a summary.json (``where`` names it) that lacks a field or holds a wrong one."""
    if "status" in summary:
        _check(where, "status", summary["status"], STATUS)
    if summary.get("status") == "failed":
        _check_fields(where, summary, FAILED, FAILED_OPTIONAL)
    else:
        _check_fields(where, summary, FINISHED, OPTIONAL)


def check_record(where: str, record: dict[str, Any]) -> None:
    """Refuse an evaluation record (``where``: its file and line) with a wrong field."""
    _check_fields(where, record, RECORD, RECORD_OPTIONAL)


def _check_fields(
    where: str,
    value: dict[str, Any],
    required: Mapping[str, Field],
    optional: Mapping[str, Field],
    prefix: str = "",
) -> None:
    """Check an object's fields; ``prefix`` names the object they are in ("accuracy.")."""
    for key, field in required.items():
        if key not in value:
            raise UsageError(f"{where} has no field '{prefix}{key}'; {_REMAKE}")
        _check(where, prefix + key, value[key], field)
    for key, field in optional.items():
        if key in value:
            _check(where, prefix + key, value[key], field)


def _check(where: str, name: str, value: Any, field: Field) -> None:
    """Refuse ``value`` of field ``name`` unless it is what ``field`` says, elements included."""
    if not field.test(value):
        raise UsageError(
            f"{where}: field '{name}' must be {field.words}, not {_shown(value)}; {_REMAKE}"
        )
    if field.items is not None and value is not None:
        for index, item in enumerate(value):
            _check(where, f"{name}[{index}]", item, field.items)
    if field.fields is not None and value is not None:
        _check_fields(where, value, field.fields, {}, prefix=f"{name}.")


def _shown(value: object) -> str:
    """A value as a message quotes it: JSON text, cut short; a list or object by its kind."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return shortened(json.dumps(value, ensure_ascii=False), _SHOWN_CHARACTERS)
