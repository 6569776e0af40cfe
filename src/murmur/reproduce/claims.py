"""A paper's claim, what murmur measured for it, and the verdict computed from the two.

A verdict is never written by hand: :func:`judge` turns the outcome of a stated
criterion, evaluated on measured numbers, into ``holds`` / ``does not hold``, and
a quick run (too short to test a claim made of full-length training) whose
criterion fails is ``not comparable (quick run ...)`` instead of a failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Outcome = Literal["holds", "does not hold", "not comparable"]


@dataclass(frozen=True)
class Verdict:
    """``outcome``, and for ``not comparable`` the reason (shown in parentheses)."""

    outcome: Outcome
    reason: str = ""

    def __post_init__(self) -> None:
        if (self.outcome == "not comparable") != bool(self.reason):
            raise ValueError("a verdict has a reason exactly when it is 'not comparable'")

    def __str__(self) -> str:
        return f"{self.outcome} ({self.reason})" if self.reason else self.outcome


def judge(passed: bool, *, quick: bool, quick_reason: str = "quick run") -> Verdict:
    """The verdict of a criterion that ``passed`` or not on measured numbers.

    A failed criterion of a ``quick`` run is not comparable: its runs are too short
    to stand for the paper's experiment.
    """
    if passed:
        return Verdict("holds")
    if quick:
        return Verdict("not comparable", quick_reason)
    return Verdict("does not hold")


@dataclass(frozen=True)
class Claim:
    """One claim of a paper, checked against murmur's runs."""

    title: str
    paper: str
    """The paper's words (or what its figure shows), with where they come from."""
    measured: str
    """murmur's figure for it, one or two sentences with the numbers."""
    criterion: str
    """The rule that made the verdict from the measured numbers."""
    verdict: Verdict
    table: str = ""
    """A markdown table of the measured numbers (optional)."""
    plots: tuple[str, ...] = field(default_factory=tuple)
    """PNG files, relative to the report's folder."""
    note: str = ""
    """What limits the comparison on this machine (optional)."""


def percent(value: float) -> str:
    """An accuracy in [0, 1] as ``93.58 %``."""
    return f"{100 * value:.2f} %"
