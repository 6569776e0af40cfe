"""A run's messages and bytes against DSGD's: the "vs DSGD" columns.

DSGD sends at every iteration: every agent broadcasts its whole model (one *event*)
as one point-to-point *message* to each neighbour, each of the model's *bytes*. A
method that talks less is measured against that in messages and in bytes, because
they differ: an uncompressed DETSGRAD-GT message carries two vectors (its model and
its tracker), BEER sends them as two messages, and a compressed message is one
message of fewer bytes. Bytes compare every method; the tables leave events out
(summary.json keeps them), since the two methods count them differently.

The baseline of a run is, in this order:

1. the first DSGD run (``algorithm`` "dsgd") of the same seed, dataset, topology,
   number of agents and iterations among the summaries compared: each seed has its
   own DSGD run. A DSGD run that a rule stopped early (:mod:`murmur.metrics.stops`)
   sent less than DSGD does and is no baseline;
2. else the run's own ``full_exchange``: what DSGD would send on the run's graph in
   its iterations, written by every decentralized SGD run on a fixed graph;
3. else none, and its cells are "-": runs of one learner, of a parameter server,
   layer-wise runs (``communication_saving`` null) and runs that left no count.

:func:`versus_dsgd_note` says which rows were measured against (2), the analytic figure,
because the comparison had no DSGD run for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Literal

from murmur.metrics.record_types import RunSummary
from murmur.metrics.stops import stop_of

__all__ = [
    "QUANTITIES",
    "SHOWN_QUANTITIES",
    "Quantity",
    "Baseline",
    "dsgd_baselines",
    "estimated",
    "versus_dsgd",
    "versus_dsgd_note",
]

Quantity = Literal["events", "messages", "bytes"]
QUANTITIES: tuple[Quantity, ...] = ("events", "messages", "bytes")
"""What a baseline holds: a run's events (broadcasts), messages and bytes."""
SHOWN_QUANTITIES: tuple[Quantity, ...] = ("messages", "bytes")
"""What the tables compare: a run's events (broadcasts) stay in summary.json, since a
method that sends two messages a step (BEER) and one that sends two vectors in one
(DETSGRAD-GT) count them differently."""


@dataclass(frozen=True)
class Baseline:
    """What DSGD sent (or would send) where a run ran."""

    events: float
    messages: float
    bytes: float
    measured: bool
    """True: a DSGD run of the comparison sent it; False: the run's full exchange."""

    def of(self, quantity: Quantity) -> float:
        return {"events": self.events, "messages": self.messages, "bytes": self.bytes}[quantity]


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, Real):
        return None
    return float(value)


def _setup(summary: RunSummary) -> tuple[str, ...]:
    """Runs whose counts compare: the same seed, dataset, graph, agents and iterations."""
    keys = ("seed", "dataset", "topology", "agents", "iterations")
    return tuple(str(summary.get(key)) for key in keys)


def _counts(source: object, measured: bool) -> Baseline | None:
    """A baseline from a summary's (or a full exchange's) events, messages and bytes;
    None unless all three are positive numbers."""
    if not isinstance(source, dict):
        return None
    values = [_number(source.get(key)) for key in QUANTITIES]
    if any(value is None or value <= 0 for value in values):
        return None
    events, messages, sent = (float(value or 0.0) for value in values)
    return Baseline(events, messages, sent, measured)


def _compares(summary: RunSummary) -> bool:
    """Whether a run is decentralized message passing whose counts compare with DSGD's."""
    if _number(summary.get("agents")) == 1:
        return False
    # Layer-wise runs write a null communication saving: their messages are ADMM's.
    return not ("communication_saving" in summary and summary["communication_saving"] is None)


def dsgd_baselines(summaries: Sequence[RunSummary]) -> list[Baseline | None]:
    """Each summary's baseline (see the module's docstring), None where it has none."""
    measured: dict[tuple[str, ...], Baseline] = {}
    for summary in summaries:
        if summary.get("algorithm") == "dsgd" and stop_of(summary) is None:
            counted = _counts(summary, measured=True)
            if counted is not None:
                measured.setdefault(_setup(summary), counted)
    result: list[Baseline | None] = []
    for summary in summaries:
        if not _compares(summary):
            result.append(None)
            continue
        found = measured.get(_setup(summary))
        result.append(found or _counts(summary.get("full_exchange"), measured=False))
    return result


def versus_dsgd(summaries: Sequence[RunSummary], quantity: Quantity) -> list[float | None]:
    """Each summary's ``quantity`` over its baseline's (1.0: as much as DSGD); None
    without a baseline or a count."""
    result: list[float | None] = []
    for summary, baseline in zip(summaries, dsgd_baselines(summaries), strict=True):
        value = _number(summary.get(quantity))
        result.append(None if baseline is None or value is None else value / baseline.of(quantity))
    return result


def estimated(summaries: Sequence[RunSummary]) -> list[str]:
    """The names of the rows measured against what DSGD would send, for want of a DSGD
    run of their set-up in the comparison; sorted, each once."""
    pairs = zip(summaries, dsgd_baselines(summaries), strict=True)
    return sorted(
        {
            str(summary.get("name") or summary.get("algorithm"))
            for summary, base in pairs
            if base is not None and not base.measured
        }
    )


def versus_dsgd_note(summaries: Sequence[RunSummary]) -> str | None:
    """The line under a table whose "vs DSGD" columns hold rows of :func:`estimated`
    (None: none does): what those rows are measured against."""
    rows = estimated(summaries)
    if not rows:
        return None
    return (
        f"messages / bytes vs DSGD %: the table has no DSGD run of the set-up of "
        f"{', '.join(rows)}: its figures are over what DSGD would send on the run's graph "
        "in its iterations (every agent its whole model to each neighbour at every "
        "iteration)."
    )
