"""Quantities written for people: bytes in decimal units, as network traffic is counted.

On the base layer, so that the memory estimate, the command line and the reports say
sizes the same way.
"""

from __future__ import annotations

from numbers import Real

__all__ = ["human_bytes"]

MISSING = "-"
"""What a size that is not a number reads as."""
_BYTE_UNITS = ("KB", "MB", "GB", "TB", "PB")


def human_bytes(value: object) -> str:
    """Bytes in decimal units (1 KB = 1000 B): "512 B", "12.06 GB"; "-" for a value
    that is not a number."""
    if isinstance(value, bool) or not isinstance(value, Real):
        return MISSING
    number = float(value)
    if abs(number) < 1000:
        return f"{round(number)} B"
    for unit in _BYTE_UNITS:
        number /= 1000
        if abs(number) < 1000 or unit == _BYTE_UNITS[-1]:
            break
    return f"{number:.2f} {unit}"
