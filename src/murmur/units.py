"""Quantities written for people: bytes in decimal units, as network traffic is counted.

On the base layer, so that the memory estimate, the command line and the reports say
sizes the same way.
"""

from __future__ import annotations

from numbers import Real

__all__ = ["human_bytes", "bytes_in_unit"]

MISSING = "-"
"""What a size that is not a number reads as."""
_BYTE_UNITS = ("KB", "MB", "GB", "TB", "PB")


def human_bytes(value: object) -> str:
    """Bytes in decimal units (1 KB = 1000 B): "512 B", "12.06 GB"; "-" for a value
    that is not a number."""
    if isinstance(value, bool) or not isinstance(value, Real):
        return MISSING
    number, _, unit = bytes_in_unit(float(value), 0.0)
    return f"{number} {unit}"


def bytes_in_unit(value: float, other: float) -> tuple[str, str, str]:
    """``value`` and ``other`` (a spread) as numbers of ``value``'s decimal unit, and the
    unit: (6.81e9, 6.1e8) -> ("6.81", "0.61", "GB"); whole bytes below 1 KB."""
    if abs(value) < 1000:
        return f"{round(value)}", f"{round(other)}", "B"
    scale = 1.0
    for unit in _BYTE_UNITS:
        scale *= 1000
        if abs(value) / scale < 1000 or unit == _BYTE_UNITS[-1]:
            break
    return f"{value / scale:.2f}", f"{other / scale:.2f}", unit
