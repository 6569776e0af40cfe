"""A paper's claim, what murmur measured for it, and the verdict computed from the two.

A verdict is never written by hand: :func:`judge` turns the outcome of a stated
criterion, evaluated on measured numbers, into ``holds`` / ``does not hold``. A
quick run decides every claim too, at reduced size: its claims state their reduced
criterion (a shorter horizon, fewer workers or nodes, a threshold relaxed for the
shorter runs, each with its reason: :attr:`Claim.reduced`), and its verdicts say
``(quick)``. ``not comparable (why)`` is left for a claim this machine or these runs
cannot test at all (one core for a multi-process speed-up, a baseline run that
missed its target).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Outcome = Literal["holds", "does not hold", "not comparable"]


@dataclass(frozen=True)
class Verdict:
    """``outcome``, and in parentheses its reason: why it is ``not comparable``
    (required there), or ``quick`` for a verdict on a quick run's reduced criterion."""

    outcome: Outcome
    reason: str = ""

    def __post_init__(self) -> None:
        if self.outcome == "not comparable" and not self.reason:
            raise ValueError("a 'not comparable' verdict needs its reason")

    def __str__(self) -> str:
        return f"{self.outcome} ({self.reason})" if self.reason else self.outcome


QUICK = "quick"
"""The reason of a verdict on a quick run's reduced criterion."""


def judge(passed: bool, *, quick: bool) -> Verdict:
    """The verdict of a criterion that ``passed`` or not on measured numbers; on a
    ``quick`` run, marked as a verdict on its claim's reduced criterion."""
    return Verdict("holds" if passed else "does not hold", QUICK if quick else "")


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
    reduced: str = ""
    """A quick run: how its criterion or its runs are reduced from the full run's, and
    why the reduced criterion still tests the claim."""
    table: str = ""
    """A markdown table of the measured numbers (optional)."""
    plots: tuple[str, ...] = field(default_factory=tuple)
    """PNG files, relative to the report's folder."""
    note: str = ""
    """What limits the comparison on this machine (optional)."""


def percent(value: float) -> str:
    """An accuracy in [0, 1] as ``93.58 %``."""
    return f"{100 * value:.2f} %"
