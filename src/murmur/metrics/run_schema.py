"""What a report needs of a run folder's files: summary.json and metrics.jsonl, field by field.

summary.json of a finished run holds every field of
:class:`murmur.metrics.records.RunResult` (``run_dir`` aside: the report uses
the folder it reads); algorithm-specific fields (``virtual_seconds``,
``layers``, ``staleness``, ``failed_agents``, ``dropped_messages``, ...) are
checked only where a run wrote them. A summary with ``"status": "failed"`` is a
run that stopped during training: it needs only its ``error``, a line saying
why. A summary without ``status`` is a finished run written before runs had one.

Each line of metrics.jsonl is an evaluation record with its ``iteration``; the
other fields the report reads are checked where present. A value of the wrong
type is damage: counts are integers, seconds and accuracies finite numbers in
range, and only losses and distances (which a diverged run may leave NaN or
infinite) may be any number.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from murmur.errors import UsageError

__all__ = ["check_record", "check_summary"]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_SHOWN_CHARACTERS = 40
"""Longest value text a message quotes; longer ones are cut."""
_REMAKE = "the file is damaged, remake the run"


@dataclass(frozen=True)
class Field:
    """What one JSON value must be: ``test`` passes it, ``words`` say what it must be.

    A list's elements must each be ``items``; an object must have every one of
    ``fields``, each as its field says.
    """

    words: str
    test: Callable[[object], bool]
    items: Field | None = None
    fields: Mapping[str, Field] | None = None


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_integer(value: object) -> TypeGuard[int]:
    return (
        isinstance(value, int) and not isinstance(value, bool) and _INT64_MIN <= value <= _INT64_MAX
    )


def _is_unicode(text: str) -> bool:
    """No lone surrogate (JSON's "\\ud800"): such a string cannot be written as UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _nullable(field: Field) -> Field:
    return dataclasses.replace(
        field, words=f"{field.words} or null", test=lambda v: v is None or field.test(v)
    )


def _list_of(item: Field) -> Field:
    return Field("a list", lambda v: isinstance(v, list), items=item)


def _object_of(**fields: Field) -> Field:
    return Field("an object", lambda v: isinstance(v, dict), fields=fields)


TEXT = Field("a string of valid Unicode", lambda v: isinstance(v, str) and _is_unicode(v))
INTEGER = Field("an integer from -2**63 to 2**63 - 1", _is_integer)
COUNT = Field("an integer from 0 to 2**63 - 1", lambda v: _is_integer(v) and v >= 0)
POSITIVE = Field("an integer from 1 to 2**63 - 1", lambda v: _is_integer(v) and v >= 1)
NUMBER = Field("a number", _is_number)
FINITE = Field("a finite number", lambda v: _is_number(v) and math.isfinite(v))
SECONDS = Field("a finite number >= 0", lambda v: _is_number(v) and 0 <= v < math.inf)
FRACTION = Field("a number from 0 to 1", lambda v: _is_number(v) and 0 <= v <= 1)
ACCURACY = _object_of(
    mean=_nullable(FRACTION),
    min=_nullable(FRACTION),
    max=_nullable(FRACTION),
    per_agent=_nullable(_list_of(FRACTION)),
)

FINISHED: dict[str, Field] = {
    "name": TEXT,
    "preset": TEXT,
    "algorithm": TEXT,
    "dataset": TEXT,
    "agents": POSITIVE,
    "topology": TEXT,
    "iterations": COUNT,
    "seed": INTEGER,
    "accuracy": ACCURACY,
    "test_loss": _nullable(NUMBER),
    "events": COUNT,
    "events_per_agent": _list_of(COUNT),
    "messages": COUNT,
    "bytes": COUNT,
    "communication_saving": _nullable(FINITE),
    "consensus_distance": _nullable(NUMBER),
    "wall_seconds": SECONDS,
    "train_seconds": SECONDS,
    "samples": COUNT,
    "samples_per_second": SECONDS,
}
"""Fields every finished run writes."""

FAULT_COUNTS: dict[str, Field] = {
    "dropped_messages": COUNT,
    "down_links": COUNT,
    "down_link_iterations": COUNT,
    "crashed_agents": COUNT,
    "lost_gradients": COUNT,
    "live_accuracy_mean": _nullable(FRACTION),
    "live_accuracy_min": _nullable(FRACTION),
}
"""What runs under ``[faults]`` count, in their summary and in every record."""

OPTIONAL: dict[str, Field] = {
    "virtual_seconds": SECONDS,
    "layers": _list_of(POSITIVE),
    "train_accuracy": ACCURACY,
    "mean_degree": SECONDS,
    "workers": POSITIVE,
    "staleness": _object_of(mean=SECONDS, max=COUNT, histogram=_list_of(COUNT)),
    "target_loss": _nullable(SECONDS),
    "iterations_to_target": _nullable(COUNT),
    "virtual_seconds_to_target": _nullable(SECONDS),
    "wall_seconds_to_target": _nullable(SECONDS),
    "failed_agents": _list_of(COUNT),
    "failed_workers": _list_of(COUNT),
    "single_process": _object_of(samples_per_second=SECONDS, accuracy=_nullable(FRACTION)),
    "speedup": SECONDS,
    "steps": Field(
        "an object of finite numbers",
        lambda v: (
            isinstance(v, dict) and all(_is_number(x) and math.isfinite(x) for x in v.values())
        ),
    ),
    **FAULT_COUNTS,
}
"""Algorithm-specific fields the report reads, checked where a run wrote them."""

FAILED: dict[str, Field] = {"error": TEXT}
"""Fields every failed run writes (besides its status)."""

FAILED_OPTIONAL: dict[str, Field] = {
    "name": TEXT,
    "preset": TEXT,
    "algorithm": TEXT,
    "dataset": TEXT,
    "seed": INTEGER,
}
"""What a failed run writes of its run when it can."""

STATUS = Field('"finished" or "failed"', lambda v: v in ("finished", "failed"))

RECORD: dict[str, Field] = {"iteration": COUNT}
"""Fields every evaluation record holds."""

RECORD_OPTIONAL: dict[str, Field] = {
    "layer": COUNT,
    "accuracy_mean": _nullable(FRACTION),
    "accuracy_min": _nullable(FRACTION),
    "accuracy_max": _nullable(FRACTION),
    "test_accuracy": _nullable(_list_of(FRACTION)),
    "events": COUNT,
    "messages": COUNT,
    "bytes": COUNT,
    "events_per_agent": _list_of(COUNT),
    **FAULT_COUNTS,
}
"""Record fields the report and its plots read, checked where present."""


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
    text = json.dumps(value, ensure_ascii=False)
    if len(text) <= _SHOWN_CHARACTERS:
        return text
    return text[: _SHOWN_CHARACTERS - 3] + "..."
