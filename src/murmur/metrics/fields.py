"""What one JSON value of a run folder's files must be (:class:`Field`), and the
field tables a TypedDict's annotations say (:func:`fields_of`).

A key of a record or summary type carries its Field as ``Annotated`` metadata:
``iteration: Required[Annotated[int, COUNT]]``. A key without one is written but
not checked.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeGuard

__all__ = [
    "COUNT",
    "FINITE",
    "FRACTION",
    "INTEGER",
    "NUMBER",
    "POSITIVE",
    "SECONDS",
    "TEXT",
    "Field",
    "fields_of",
    "finite_number",
    "list_of",
    "nullable",
    "object_of",
]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


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


def is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def finite_number(value: object) -> float | None:
    """``value`` as a float where it is a number (not a bool) that is neither NaN nor
    infinite; None otherwise (absent, null, text, NaN, infinity)."""
    return float(value) if is_number(value) and math.isfinite(value) else None


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


def nullable(field: Field) -> Field:
    return dataclasses.replace(
        field, words=f"{field.words} or null", test=lambda v: v is None or field.test(v)
    )


def list_of(item: Field) -> Field:
    return Field("a list", lambda v: isinstance(v, list), items=item)


def object_of(kind: type) -> Field:
    """An object with every field of the TypedDict ``kind`` (all of them required)."""
    required, _ = fields_of(kind)
    return Field("an object", lambda v: isinstance(v, dict), fields=required)


TEXT = Field("a string of valid Unicode", lambda v: isinstance(v, str) and _is_unicode(v))
INTEGER = Field("an integer from -2**63 to 2**63 - 1", _is_integer)
COUNT = Field("an integer from 0 to 2**63 - 1", lambda v: _is_integer(v) and v >= 0)
POSITIVE = Field("an integer from 1 to 2**63 - 1", lambda v: _is_integer(v) and v >= 1)
NUMBER = Field("a number", is_number)
FINITE = Field("a finite number", lambda v: is_number(v) and math.isfinite(v))
SECONDS = Field("a finite number >= 0", lambda v: is_number(v) and 0 <= v < math.inf)
FRACTION = Field("a number from 0 to 1", lambda v: is_number(v) and 0 <= v <= 1)


def fields_of(kind: type) -> tuple[dict[str, Field], dict[str, Field]]:
    """The required and the optional fields of the TypedDict ``kind`` that carry a
    :class:`Field`, in the order its annotations declare them (a base's first)."""
    required: dict[str, Field] = {}
    optional: dict[str, Field] = {}
    keys = vars(kind)
    for key, annotation in typing.get_type_hints(kind, include_extras=True).items():
        field = _field(annotation)
        if field is not None and key in keys["__required_keys__"]:
            required[key] = field
        elif field is not None and key in keys["__optional_keys__"]:
            optional[key] = field
    return required, optional


def _field(annotation: object) -> Field | None:
    """The Field in ``annotation``'s ``Annotated`` metadata, under Required/NotRequired."""
    while typing.get_origin(annotation) in (typing.Required, typing.NotRequired):
        (annotation,) = typing.get_args(annotation)
    for meta in getattr(annotation, "__metadata__", ()):
        if isinstance(meta, Field):
            return meta
    return None
