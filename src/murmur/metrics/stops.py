"""Runs that a rule stopped early, as tables, reports and plots show them.

A run that a rule stops (its accuracy fell to chance, its loss stopped being finite
or blew up, its agents drifted apart) writes summary.json with ``"status":
"collapsed"`` or ``"diverged"`` and ``stopped``: the rule, the iteration and one line
saying why, beside every figure of its last evaluation. Those figures describe a run
cut short, not the method: a mean across seeds that took them in would mix two
outcomes into one number that describes neither (two seeds at chance and three at
96 % average to 62 % ± 47). So every statistic across seeds is taken over the
finished seeds alone, says how many those are, and the rest are named beside it
(:func:`stops_note`); a stopped run alone shows its status (:func:`status_text`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = [
    "STOPPED",
    "Stop",
    "finished",
    "group_status",
    "status_text",
    "stop_line",
    "stop_of",
    "stops_note",
]

STOPPED = ("collapsed", "diverged")
"""The statuses of a run that a rule stopped early."""

S = TypeVar("S", bound=Mapping[str, Any])


@dataclass(frozen=True)
class Stop:
    """Why and where a run stopped early: its status, the rule, the iteration (None
    where the summary does not say) and the rule's reason."""

    status: str
    rule: str
    iteration: int | None
    reason: str


def stop_of(summary: Mapping[str, Any]) -> Stop | None:
    """The stop of a run's summary; None for a run that finished (or failed)."""
    status, stopped = summary.get("status"), summary.get("stopped")
    if status not in STOPPED:
        return None
    details: Mapping[str, Any] = stopped if isinstance(stopped, dict) else {}
    iteration = details.get("iteration")
    counted = isinstance(iteration, int) and not isinstance(iteration, bool)
    return Stop(
        status=str(status),
        rule=str(details.get("rule") or "unnamed rule"),
        iteration=iteration if counted else None,
        reason=str(details.get("reason") or ""),
    )


def finished(summaries: Iterable[S]) -> list[S]:
    """The summaries of runs that were not stopped early: those statistics take in."""
    return [summary for summary in summaries if stop_of(summary) is None]


def status_text(stop: Stop) -> str:
    """A stopped run's status where a number would stand: "collapsed at 400"."""
    return stop.status if stop.iteration is None else f"{stop.status} at {stop.iteration}"


def group_status(stops: Sequence[Stop], seeds: int) -> str:
    """What a group whose every seed stopped shows instead of a mean: "collapsed (5 of 5
    seeds)"; "stopped" when the seeds stopped in different ways; for a run alone its
    :func:`status_text`."""
    if seeds == 1 and len(stops) == 1:
        return status_text(stops[0])
    statuses = {stop.status for stop in stops}
    status = statuses.pop() if len(statuses) == 1 else "stopped"
    return f"{status} ({len(stops)} of {_seeds(seeds)})"


def stops_note(stops: Sequence[Stop], seeds: int) -> str:
    """What happened to a group's stopped seeds, by status, then rule: "2 of 5 seeds
    collapsed (chance, at 400 and 500), 1 diverged (non-finite, at 200)"; for a run
    alone, "collapsed (chance, at 400)"."""
    by_status: dict[str, list[Stop]] = {}
    for stop in stops:
        by_status.setdefault(stop.status, []).append(stop)
    parts = []
    for number, (status, members) in enumerate(by_status.items()):
        count = f"{len(members)} of {_seeds(seeds)} " if number == 0 else f"{len(members)} "
        parts.append(f"{'' if seeds == 1 else count}{status} ({_rules(members)})")
    return ", ".join(parts)


def stop_line(stop: Stop) -> str:
    """A stop in one line, as the lists under tables give it: "collapsed at iteration
    400 (chance): accuracy at chance for 3 evaluations"."""
    where = "" if stop.iteration is None else f" at iteration {stop.iteration}"
    reason = f": {stop.reason}" if stop.reason else ""
    return f"{stop.status}{where} ({stop.rule}){reason}"


def _rules(stops: Sequence[Stop]) -> str:
    """Each rule and the iterations it stopped seeds at: "chance, at 400 and 500"."""
    by_rule: dict[str, list[int]] = {}
    for stop in stops:
        iterations = by_rule.setdefault(stop.rule, [])
        if stop.iteration is not None:
            iterations.append(stop.iteration)
    return "; ".join(
        f"{rule}, at {_listed(sorted(iterations))}" if iterations else rule
        for rule, iterations in by_rule.items()
    )


def _listed(numbers: Sequence[int]) -> str:
    """Numbers as a sentence lists them: "400", "400 and 500", "100, 200 and 300"."""
    texts = [str(number) for number in numbers]
    return texts[0] if len(texts) == 1 else f"{', '.join(texts[:-1])} and {texts[-1]}"


def _seeds(count: int) -> str:
    return f"{count} seed{'s' * (count != 1)}"
