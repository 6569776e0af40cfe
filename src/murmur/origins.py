"""Where a registered name comes from: murmur itself, or the plugin that registered it.

Algorithms (:mod:`murmur.registry`), compressors
(:mod:`murmur.algorithms.compressors`) and graphs (:mod:`murmur.topology.graphs`) are
registered by name; each registration is marked with the innermost
:func:`registering_as` around it (:mod:`murmur.plugins` wraps every plugin's import
in one), so that a clash or a listing can say whose a name is.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

BUILT_IN = "murmur"
"""The origin of murmur's own names."""
_STACK = [BUILT_IN]


class RegistrationError(ValueError):
    """A name that cannot be registered: taken or malformed, or what it names lacks what
    its kind needs."""


def current() -> str:
    """The origin of what is registered now."""
    return _STACK[-1]


@contextmanager
def registering_as(origin: str) -> Iterator[None]:
    """Mark what is registered inside the block as coming from ``origin`` (a plugin)."""
    _STACK.append(origin)
    try:
        yield
    finally:
        _STACK.pop()


NAME_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")


def check_entry(kind: str, name: str, build: object, taken: str | None) -> None:
    """RegistrationError for a compressor or graph named ``name`` that is malformed,
    taken (``taken``: by whom; None: free) or not callable."""
    if not isinstance(name, str) or not name or not set(name) <= NAME_CHARACTERS:
        raise RegistrationError(
            f"a {kind}'s name is lower-case letters, digits, '-' and '_', not {name!r}"
        )
    refuse_taken(kind, name, taken)
    if not callable(build):
        raise RegistrationError(f"{kind} '{name}': build must be callable, not {build!r}")


def refuse_taken(kind: str, name: str, origin: str | None) -> None:
    """RegistrationError where ``name`` is taken already (``origin``: by whom; None:
    free)."""
    if origin is not None:
        whose = f"a built-in {kind}" if origin == BUILT_IN else f"a {kind} of {origin}"
        raise RegistrationError(f"{kind} name '{name}' is taken by {whose}")
