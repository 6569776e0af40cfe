"""The results table across seeds: one row per group of runs that differ only in seed.

Each figure of a group's row is the mean across its seeds and the sample standard
deviation (``mean +- sd``; ``±`` in Markdown), see :mod:`murmur.reporting.statistics`;
"95 % CI" is the 95 % confidence interval of the mean final accuracy (Student's t
with n - 1 degrees of freedom); "seeds" is n. A group of one run shows its value
alone and "-" for the interval. When every group holds one run the table is
:func:`murmur.reporting.report.format_table`'s, as without seeds.

The figures: the agents' mean, worst and best test accuracy at the final
evaluation, the last-k mean accuracy, the average model's and the training
accuracy where summaries have them, messages, bytes, wall-clock seconds and
virtual seconds where runs have a virtual clock. Figures that compare a run with
another one are computed seed by seed, against the run of the same seed, then
spread across seeds: "messages / bytes vs DSGD %" against that
seed's DSGD run (:mod:`murmur.reporting.versus_dsgd`), the speed-ups against that
seed's W = 1 run. Runs with a target loss show "reached" (how many of the seeds
reached it) beside the iterations and virtual seconds to it, which are spread over
the seeds that did.

Seeds that a rule stopped early (collapsed or diverged, :mod:`murmur.metrics.stops`)
are in no figure: every mean, sd, interval and comparison is over the group's
finished seeds. Then the mean accuracy says how many those are ("93.10 ± 0.40 (3 of
5 seeds)"), and a "stopped" column, shown when some run stopped, says what happened
to the others ("2 of 5 seeds collapsed (chance, at 400 and 500)"). A group whose
every seed stopped shows its status instead of a mean ("collapsed (5 of 5 seeds)")
and "-" for every figure.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from murmur.metrics.record_types import RunSummary
from murmur.metrics.stops import Stop, finished, group_status, stop_of, stops_note
from murmur.reporting.report import (
    MISSING,
    as_number,
    bytes_to_target,
    format_table,
    has_column,
    has_target,
    last_k_accuracy,
    last_k_text,
    lost_share,
    mixing_text,
    model_accuracy,
    render_table,
    run_label,
    shown_path,
    speedups,
    stopped_line,
    target_text,
    to_accuracy,
    validation_last_k_accuracy,
)
from murmur.reporting.statistics import Spread, spread
from murmur.reporting.versus_dsgd import SHOWN_QUANTITIES, Quantity, versus_dsgd, versus_dsgd_note
from murmur.units import bytes_in_unit, human_bytes

__all__ = ["comparison_markdown", "format_results", "format_seed_table", "figure_spread"]

Group = Sequence[RunSummary]
V = TypeVar("V")


@dataclass(frozen=True)
class _Figure:
    header: str
    value: Callable[[RunSummary], float | None]
    text: Callable[[float], str] | None
    """How a mean or sd is written; None: with the decimals of ``_virtual_decimals``."""


def _accuracy(statistic: str) -> Callable[[RunSummary], float | None]:
    def value(summary: RunSummary) -> float | None:
        accuracy = summary.get("accuracy")
        return as_number(accuracy.get(statistic)) if isinstance(accuracy, dict) else None

    return value


def _train_accuracy(summary: RunSummary) -> float | None:
    accuracy = summary.get("train_accuracy")
    return as_number(accuracy.get("mean")) if isinstance(accuracy, dict) else None


def _field(key: str) -> Callable[[RunSummary], float | None]:
    return lambda summary: as_number(summary.get(key))


def _percent(value: float) -> str:
    return f"{100 * value:.2f}"


def _count(value: float) -> str:
    return str(round(value))


def _seconds(value: float) -> str:
    return f"{value:.1f}"


def _virtual_decimals(mean: float) -> int:
    """Decimals that give a mean of simulated seconds three significant digits (its sd
    the same decimals): virtual times are often tiny."""
    return 1 if mean == 0 else max(1, 2 - math.floor(math.log10(abs(mean))))


FINAL_MEAN = _Figure("final acc mean %", _accuracy("mean"), _percent)
STOPPED_HEADING = "Stopped early, in no mean:"
"""The heading of the list of runs that a rule stopped early, under a table."""


def figure_spread(
    group: Group, value: Callable[[RunSummary], float | None] = FINAL_MEAN.value
) -> Spread | None:
    """The spread across a group's runs of one figure (the final mean accuracy by
    default), over the runs that have it; None where none has."""
    values = [v for summary in group if (v := value(summary)) is not None and math.isfinite(v)]
    return spread(values) if values else None


def per_seed(
    summaries: Sequence[RunSummary], compare: Callable[[list[RunSummary]], Sequence[V]]
) -> Callable[[RunSummary], V | None]:
    """A figure that compares runs, ``compare(runs)`` (one value per run), computed
    among the runs of each seed apart: each run against the same seed's baseline."""
    by_seed: dict[str, list[RunSummary]] = {}
    for summary in summaries:
        by_seed.setdefault(repr(summary.get("seed")), []).append(summary)
    by_run: dict[int, V] = {}
    for same in by_seed.values():
        by_run.update(zip(map(id, same), compare(same), strict=True))
    return lambda summary: by_run.get(id(summary))


def _staleness(summary: RunSummary) -> float | None:
    staleness = summary.get("staleness")
    return as_number(staleness.get("mean")) if isinstance(staleness, dict) else None


def _present(summaries: list[RunSummary], figures: list[_Figure]) -> list[_Figure]:
    return [f for f in figures if any(f.value(summary) is not None for summary in summaries)]


def _figures(summaries: list[RunSummary]) -> list[_Figure]:
    k = last_k_text(summaries)
    optional = [
        _Figure(f"last-{k} acc %", last_k_accuracy, _percent),
        _Figure(f"last-{k} val acc %", validation_last_k_accuracy, _percent),
        _Figure("avg model acc %", model_accuracy, _percent),
        _Figure("train acc %", _train_accuracy, _percent),
    ]
    figures = [
        _Figure("final acc min %", _accuracy("min"), _percent),
        _Figure("final acc max %", _accuracy("max"), _percent),
        *_present(summaries, optional),
        _Figure("messages", _field("messages"), _count),
        _Figure("bytes", _field("bytes"), human_bytes),
        *_compared(summaries),
        _Figure("wall s", _field("wall_seconds"), _seconds),
    ]
    if has_column(summaries, "virtual_seconds"):
        figures.append(_Figure("virtual s", _field("virtual_seconds"), None))
    return [FINAL_MEAN, *figures, *_target_figures(summaries), *_worker_figures(summaries)]


def _target_figures(summaries: list[RunSummary]) -> list[_Figure]:
    """Iterations, seconds and bytes to the target accuracy, over the seeds that
    reached it (how many: "reached N %")."""
    target = target_text(summaries)
    if target is None:
        return []
    figures = [
        _Figure(f"its to {target} %", to_accuracy("iteration"), _count),
        _Figure(f"s to {target} %", to_accuracy("wall_seconds"), _seconds),
    ]
    if has_column(summaries, "virtual_seconds"):
        figures.append(_Figure(f"virtual s to {target} %", to_accuracy("virtual_seconds"), None))
    if any((as_number(summary.get("bytes")) or 0) > 0 for summary in summaries):
        figures.append(_Figure(f"bytes to {target} %", bytes_to_target, human_bytes))
    return figures


def _reached_target(group: Group) -> str:
    """How many of a group's finished seeds reached the target accuracy, "2/3"."""
    reached = [summary for summary in group if to_accuracy("iteration")(summary) is not None]
    return f"{len(reached)}/{len(group)}"


def _compared(summaries: list[RunSummary]) -> list[_Figure]:
    """Bytes and messages against each seed's DSGD run, and the share of messages lost
    where runs lost some."""
    figures = [_versus_figure(summaries, quantity) for quantity in SHOWN_QUANTITIES]
    if has_column(summaries, "dropped_messages"):
        figures.append(_Figure("lost msgs %", lost_share, _percent))
    return _present(summaries, figures)


def _versus_figure(summaries: list[RunSummary], quantity: Quantity) -> _Figure:
    def compare(same: list[RunSummary]) -> list[float | None]:
        return versus_dsgd(same, quantity)

    return _Figure(f"{quantity} vs DSGD %", per_seed(summaries, compare), _percent)


def _worker_figures(summaries: list[RunSummary]) -> list[_Figure]:
    """Staleness, then, with a target loss, the way to it and the speed-ups against each
    seed's W = 1 run."""
    figures = [_Figure("staleness mean", _staleness, _seconds)]
    if any(has_target(summary) for summary in summaries):
        pairs = per_seed(summaries, speedups)
        figures += [
            _Figure("its to target", _field("iterations_to_target"), _count),
            _Figure("virtual s to target", _field("virtual_seconds_to_target"), None),
            _Figure("iteration speedup", _speedup(pairs, 0), _two),
            _Figure("time speedup", _speedup(pairs, 1), _two),
        ]
    return _present(summaries, figures)


def _speedup(
    pairs: Callable[[RunSummary], tuple[float | None, float | None] | None], which: int
) -> Callable[[RunSummary], float | None]:
    def value(summary: RunSummary) -> float | None:
        pair = pairs(summary)
        return None if pair is None else pair[which]

    return value


def _two(value: float) -> str:
    return f"{value:.2f}"


def _reached(group: Group) -> str:
    """How many of a group's runs with a target reached it, "4/5"; "-" without one."""
    targeted = [summary for summary in group if has_target(summary)]
    if not targeted:
        return MISSING
    reached = [s for s in targeted if as_number(s.get("iterations_to_target")) is not None]
    return f"{len(reached)}/{len(targeted)}"


def _cell(group: Group, figure: _Figure, plus_minus: str) -> str:
    result = figure_spread(group, figure.value)
    if result is None:
        return MISSING
    decimals = _virtual_decimals(result.mean)

    def text(value: float) -> str:
        return f"{value:.{decimals}f}" if figure.text is None else figure.text(value)

    if result.sd is None:
        return text(result.mean)
    if figure.text is human_bytes:  # one unit for both: "6.81 +- 0.61 GB"
        mean, sd, unit = bytes_in_unit(result.mean, result.sd)
        return f"{mean} {plus_minus} {sd} {unit}"
    return f"{text(result.mean)} {plus_minus} {text(result.sd)}"


def _interval(group: Group) -> str:
    """The 95 % interval of the mean final accuracy, within 0 to 100 %."""
    result = figure_spread(group)
    if result is None or result.low is None or result.high is None:
        return MISSING
    return f"[{_percent(max(0.0, result.low))}, {_percent(min(1.0, result.high))}]"


def _folder(group: Group) -> str:
    """The folder that holds a group's runs: the run's own for one run."""
    folders = [str(summary.get("run_dir", "")) for summary in group]
    if not all(folders):
        return MISSING
    try:
        return shown_path(os.path.commonpath(folders))
    except ValueError:  # relative and absolute paths, or several drives
        return MISSING


def _text(value: object) -> str:
    return MISSING if value is None or value == "" else str(value)


def _stops(group: Group) -> list[Stop]:
    return [stop for summary in group if (stop := stop_of(summary)) is not None]


def _final_mean(group: Group, plus_minus: str) -> str:
    """The mean final accuracy over the group's finished seeds, with their count when
    some stopped; the group's status when every seed did."""
    done, stops = finished(group), _stops(group)
    if not done:
        return group_status(stops, len(group))
    cell = _cell(done, FINAL_MEAN, plus_minus)
    return f"{cell} ({len(done)} of {len(group)} seeds)" if stops else cell


def _stopped(group: Group) -> str:
    """What happened to the group's seeds that stopped early; "-" when none did."""
    stops = _stops(group)
    return stops_note(stops, len(group)) if stops else MISSING


def format_seed_table(
    groups: Sequence[Group], markdown: bool = False, compact: bool = False, explain: bool = False
) -> str:
    """One row per group of runs (one configuration over several seeds): the mean and
    sd across its finished seeds of each figure, the interval of the mean accuracy, the
    seeds, and where some run stopped early, what happened to it; ``compact``: the
    terminal's columns only (``column_meanings.COMPACT``); ``explain``: with the
    meaning of each column under it."""
    summaries = [summary for group in groups for summary in group]
    figures = _figures(summaries)
    targets = any(has_target(summary) for summary in summaries)
    target = target_text(summaries)
    mixing = has_column(summaries, "mixing")
    stopped = any(stop_of(summary) is not None for summary in summaries)
    plus_minus = "±" if markdown else "+-"
    headers = [
        *((header, False) for header in ("name", "algorithm", "dataset")),
        ("agents", True),
        ("topology", False),
        *([("mixing", False)] if mixing else []),
        ("iterations", True),
        ("seeds", True),
        (FINAL_MEAN.header, True),
        ("95 % CI", True),
        *([("stopped", False)] if stopped else []),
        *((figure.header, True) for figure in figures[1:]),
        *([(f"reached {target} %", True)] if target is not None else []),
        *([("reached", True)] if targets else []),
        *([] if markdown else [("run folder", False)]),
    ]
    rows = []
    for group in groups:
        first, done = group[0], finished(group)
        cells = [run_label(first), _text(first.get("algorithm")), _text(first.get("dataset"))]
        cells += [_text(first.get("agents")), _text(first.get("topology"))]
        cells += [mixing_text(first)] if mixing else []
        cells += [_text(first.get("iterations")), str(len(group))]
        cells += [_final_mean(group, plus_minus), _interval(done)]
        cells += [_stopped(group)] if stopped else []
        cells += [_cell(done, figure, plus_minus) for figure in figures[1:]]
        cells += [_reached_target(done)] if target is not None else []
        cells += [_reached(done)] if targets else []
        rows.append(cells if markdown else [*cells, _folder(group)])
    return render_table(headers, rows, markdown, compact, explain)


def format_results(
    groups: Sequence[Group], markdown: bool = False, compact: bool = False, explain: bool = False
) -> str:
    """The results table: one row per run when every group has one run (as without
    seeds), else one row per group (:func:`format_seed_table`); ``compact``: the
    terminal's columns only; ``explain``: with the meaning of each column under it."""
    if all(len(group) == 1 for group in groups):
        return format_table([group[0] for group in groups], markdown, compact, explain)
    return format_seed_table(groups, markdown, compact, explain)


def comparison_markdown(groups: Sequence[Group], failed: Sequence[str] = ()) -> str:
    """A comparison's ``comparison.md``: the results table; with seeds, then a row for
    each seed ("Each seed:"); then the runs that a rule stopped early, one line each
    with its rule and reason ("Stopped early, in no mean:"); then the runs that failed
    ("Failed:")."""
    text = format_results(groups, markdown=True, explain=True) + "\n" if groups else ""
    summaries = [summary for group in groups for summary in group]
    if any(len(group) > 1 for group in groups):
        text += f"\nEach seed:\n\n{format_table(summaries, markdown=True)}\n"
    stopped = [line for summary in summaries if (line := stopped_line(summary)) is not None]
    if stopped:
        text += f"\n{STOPPED_HEADING}\n\n" + "".join(f"- {line}\n" for line in stopped)
    note = versus_dsgd_note(summaries)
    if note:
        text += f"\n{note}\n"
    if failed:
        text += "\nFailed:\n\n" + "".join(f"- {line}\n" for line in failed)
    return text
