"""The figures of ``murmur report``, from finished runs.

Against the run's progress (iteration, or layer for layer-wise runs): mean test
accuracy, cumulative messages, the training loss and the consensus distance.
Against the cost of reaching an accuracy: cumulative bytes and messages, virtual
time (the simulator's clock: what the asynchronous methods save) and wall time.
Final events per agent as bars. Across runs: for layer-wise runs training time
vs nodes and accuracy vs mean degree, final accuracy vs the share of messages
lost, and for worker-based runs speedup vs workers and the staleness histogram.

Runs that differ only in their seed are one seed group
(:mod:`murmur.reporting.seed_curves`): the line plots draw a group as one line, the
mean across its seeds on a common x grid, with the band of the 95 % interval of that
mean, and one legend entry, "label (n seeds)"; the events bars and the
lost-messages points show the mean with error bars from the lowest to the highest
seed. A run alone in the accuracy plot has the spread over its agents as its band
instead, as the title says; beside other lines it has none. Each group's colour is
its method's (:mod:`murmur.reporting.palette`), the same in every report, with line
styles telling one method's groups apart. A plot with nothing to show still writes its
file, with a note saying why it is empty, except the optional ones, which return
whether they wrote their file and remove a stale copy when they do not.

A run that a rule stopped early (collapsed or diverged, :mod:`murmur.metrics.stops`)
is in no mean: a group's line, bars and points are over its finished seeds and say
how many ("dsgd (3 of 5 seeds)"). The line plots draw each stopped run as a line of
its own that ends where the run stopped, at an x (:data:`STOP_MARKER`), named in the
legend "dsgd (collapsed at 400)" (a run alone) or "dsgd: 2 of 5 seeds collapsed
(chance, at 400 and 500)" (seeds, one entry for all of them); the plots of final
values across runs leave stopped runs out.

The figures go through :mod:`murmur.reporting.canvas`: the legend outside the axes,
the format from the file's suffix (PNG, PDF or SVG), PNGs at ``dpi``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import SupportsFloat, cast

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from murmur.metrics.fields import finite_number
from murmur.metrics.record_types import EvaluationRecord, RunSummary
from murmur.metrics.stops import stop_of
from murmur.reporting.canvas import DPI, FORMATS, new_figure, save
from murmur.reporting.canvas import finish as _finish
from murmur.reporting.palette import Look, PlotStyle, looks
from murmur.reporting.report import Run, has_target, lost_share, run_label, speedups
from murmur.reporting.seed_curves import (
    Curve,
    GroupLine,
    Series,
    group_label,
    group_lines,
    plot_groups,
)
from murmur.reporting.seed_groups import SeedGroup

__all__ = [
    "DPI",
    "FORMATS",
    "plot_accuracy",
    "plot_messages",
    "plot_events_per_agent",
    "plot_accuracy_vs_bytes",
    "plot_accuracy_vs_messages",
    "plot_accuracy_vs_virtual_time",
    "plot_accuracy_vs_wall_time",
    "plot_train_loss",
    "plot_consensus_distance",
    "accuracy_against",
    "plot_time_vs_nodes",
    "plot_accuracy_vs_degree",
    "plot_accuracy_vs_lost",
    "lost_points",
    "plot_speedup_vs_workers",
    "plot_staleness",
    "speedup_lines",
    "x_axis_label",
]

MAX_AGENT_TICKS = 32
MAX_MARKED_POINTS = 40
"""A line with more points is drawn without markers."""
LOG_SPAN = 10.0
"""A time axis is logarithmic when the lines' last values span this factor or more."""
SEEDS_NOTE = "line: mean over seeds, band: 95 % interval of the mean"
PLAIN = PlotStyle()
"""The figures' look where the user chose nothing."""
STOP_MARKER = "x"
"""The marker at the last point of a run that a rule stopped early."""
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_HATCHES = ("//", "..", "xx", "\\\\", "oo")
"""Bars of a method's second, third, ... line: its colour, hatched."""

AccuracySeries = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""Iterations and the mean, min and max accuracy over agents (%), of one run."""
Line = tuple[Look, str, Curve]
"""A group's look, legend entry and curve."""


@dataclass(frozen=True)
class _Lines:
    """What a line plot draws: each run's (x, y) series, or None for a run left out
    (named in the legend as ``left out, LEFT_OUT: ...``), and the axes' words."""

    series: Callable[[Run, str], Series | None]
    """A run's series against the record field it is given (the x axis's)."""
    ylabel: str
    title: str
    empty: str
    xlabel: str | None = None
    """None: iteration or layer, from the runs drawn (:func:`x_axis_label`)."""
    log_x: bool | None = False
    """None: logarithmic when the lines' last x values span :data:`LOG_SPAN` or more."""
    log_y: bool = False
    left_out: str = ""


def plot_accuracy(
    runs: Sequence[Run], path: str | Path, *, dpi: float = DPI, style: PlotStyle = PLAIN
) -> None:
    """Mean test accuracy (%) vs iteration, layer, or for parameter servers the samples
    their workers computed gradients on (:func:`x_axis_label`), one line per seed group.

    A group of seeds' band is the 95 % interval of its mean; a run alone, drawn as
    the only line, has the spread over its agents (worst to best) as its band, and
    where its records carry ``model_accuracy`` the average model's accuracy dotted. With
    several lines a run alone has no band: bands of agents overlap into one smear,
    and the table gives each worst agent.
    """
    figure, axes = new_figure()
    x_key = _x_key(runs)
    lines = _accuracy_lines(runs, x_key, style)
    notes = []
    for look, line in lines:
        _draw_line(axes, line.curve, look, line.label)
        if line.curve.seeds > 1:
            notes.append(SEEDS_NOTE)
        elif len(lines) == 1 and not line.curve.stopped:
            notes += _alone(axes, line.runs[0], x_key, look)
    _finish(
        axes,
        bool(lines),
        "no evaluation records with test accuracy",
        _progress_axis(axes, [run for _, line in lines for run in line.runs]),
        "test accuracy (%)",
        _titled(_accuracy_title(runs), "; ".join(dict.fromkeys(notes))),
    )
    _save(figure, path, dpi)


def _accuracy_title(runs: Sequence[Run]) -> str:
    """The accuracy plot's title: of agents' mean where some run has several models."""
    if runs and all(_one_model(run) for run in runs):
        return "Test accuracy"
    return "Mean test accuracy over agents"


def _alone(axes: Axes, run: Run, x_key: str, look: Look) -> list[str]:
    """A lone run's band over its agents and its average model's line; what they are."""
    notes = []
    if _agent_band(axes, run, x_key, look.colour):
        notes.append("band: worst to best agent")
    model = _model_accuracy(run, x_key)
    if model[0]:
        axes.plot(*model, color=look.colour, linestyle=":", label="average model (dotted)")
        notes.append("dotted: the agents' average model")
    return notes


def _accuracy_lines(
    runs: Sequence[Run], x_key: str, style: PlotStyle
) -> list[tuple[Look, GroupLine]]:
    """The accuracy lines of each group (:func:`group_lines`), with its look."""
    groups = plot_groups(runs)
    lines = []
    for look, group in zip(_group_looks(groups, style), groups, strict=True):
        series = [
            _smoothed(_accuracy_series(run.records, x_key)[:2], style.smooth) for run in group.runs
        ]
        lines += [(look, line) for line in group_lines(group, series)]
    return lines


def _group_looks(groups: Sequence[SeedGroup], style: PlotStyle) -> list[Look]:
    """Each group's look (:mod:`murmur.reporting.palette`), from its label and algorithm."""
    named = [(group.label, str(group.runs[0].summary.get("algorithm") or "")) for group in groups]
    chosen = looks(named, style)
    return [chosen[label] for label, _ in named]


def _smoothed(series: Series, window: int) -> Series:
    """``series`` with each y the mean of it and the ``window - 1`` before it (fewer at
    the start); as it is for a window of 1."""
    if window <= 1:
        return series
    y = np.asarray(series[1], dtype=float)
    sums = np.cumsum(np.insert(y, 0, 0.0))
    ends = np.arange(1, len(y) + 1)
    starts = np.maximum(ends - window, 0)
    return series[0], (sums[ends] - sums[starts]) / (ends - starts)


def _agent_band(axes: Axes, run: Run, x_key: str, colour: str) -> bool:
    """Fill the run's band from its worst to its best agent; whether it had one (a run
    of one model has none)."""
    if _one_model(run):
        return False
    x, _, low, high = _accuracy_series(run.records, x_key)
    band = np.isfinite(low) & np.isfinite(high) & (high > low)
    if band.any():
        axes.fill_between(x, low, high, where=band, color=colour, alpha=0.2, linewidth=0)
    return bool(band.any())


def _one_model(run: Run) -> bool:
    """Whether a run trains one model: one agent, a parameter server or shared memory."""
    return run.summary.get("agents") == 1 or "workers" in run.summary


def _model_accuracy(run: Run, x_key: str) -> Series:
    """The average model's accuracy (%) against ``x_key``; none for a run of one model,
    whose model it is."""
    if _one_model(run):
        return [], []
    return _percent_series(run.records, "model_accuracy", x_key)


def _titled(title: str, note: str) -> str:
    return f"{title}\n({note})" if note else title


def _progress_axis(axes: Axes, runs: Sequence[Run]) -> str:
    """The x label for ``runs`` (layer, iteration or samples); layers get whole-number
    ticks."""
    xlabel = x_axis_label(runs)
    if xlabel == "layer":
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    return xlabel


def plot_messages(
    runs: Sequence[Run], path: str | Path, *, dpi: float = DPI, style: PlotStyle = PLAIN
) -> None:
    """Cumulative messages vs iteration (or layer), one line per group that sends any."""
    _plot_lines(
        runs,
        path,
        _Lines(
            series=lambda run, x: _multi_agent(run, "messages", x),
            ylabel="messages (cumulative)",
            title="Messages sent",
            empty="no run with message counts",
        ),
        dpi,
        style,
    )


def _multi_agent(run: Run, key: str, x: str = "iteration") -> Series:
    """A record field against ``x``; nothing for a one-agent run."""
    return ([], []) if run.summary.get("agents") == 1 else _series(run.records, key, x)


def plot_train_loss(
    runs: Sequence[Run], path: str | Path, *, dpi: float = DPI, style: PlotStyle = PLAIN
) -> bool:
    """Training loss vs iteration, log y axis; written (and True) only when some run's
    records have a ``train_loss`` (mini-batch runs: the mean since the previous
    evaluation), else a stale path is removed and False returned."""
    return _plot_lines(
        runs,
        path,
        _Lines(
            series=lambda run, x: _series(run.records, "train_loss", x),
            ylabel="training loss (log scale)",
            title="Training loss (mean over the steps since the previous evaluation)",
            empty="no run with a training loss",
            log_y=True,
        ),
        dpi,
        style,
        optional=True,
    )


def _consensus_distance(run: Run, x: str = "iteration") -> Series:
    """A multi-agent run's consensus distance against iterations, without the values
    that are rounding off identical models (below 1e-9 of the run's largest), which a
    log axis would stretch over orders of magnitude."""
    iterations, distances = _multi_agent(run, "consensus_distance", x)
    floor = 1e-9 * max(distances, default=0.0)
    points = [(i, d) for i, d in zip(iterations, distances, strict=True) if d > floor]
    return [i for i, _ in points], [d for _, d in points]


def plot_consensus_distance(
    runs: Sequence[Run], path: str | Path, *, dpi: float = DPI, style: PlotStyle = PLAIN
) -> bool:
    """Consensus distance (1/N) sum_i ||x_i - x_bar||^2 vs iteration, log y axis, one
    line per multi-agent group; written (and True) only when some run has it."""
    return _plot_lines(
        runs,
        path,
        _Lines(
            series=_consensus_distance,
            ylabel="consensus distance (log scale)",
            title="Consensus distance: mean squared distance of the agents to their average",
            empty="no multi-agent run with a consensus distance",
            log_y=True,
        ),
        dpi,
        style,
        optional=True,
    )


def plot_accuracy_vs_bytes(
    runs: Sequence[Run], path: str | Path, *, dpi: float = DPI, style: PlotStyle = PLAIN
) -> None:
    """Mean test accuracy (%) vs cumulative bytes sent, log x axis, one line per group.

    A log axis cannot show 0 bytes: each line starts at the first evaluation with
    a positive byte count (an evaluation before any exchange is left out), and runs
    that never send a byte (centralized ones) are left out of the plot altogether;
    the legend names them.
    """
    _plot_lines(
        runs,
        path,
        _Lines(
            series=lambda run, _: _sent(run, "bytes"),
            xlabel="bytes sent (cumulative, log scale)",
            ylabel="test accuracy (%)",
            title="Mean test accuracy vs bytes sent",
            empty="no run with bytes and test accuracy",
            log_x=True,
            left_out="no bytes",
        ),
        dpi,
        style,
    )


def plot_accuracy_vs_messages(
    runs: Sequence[Run], path: str | Path, *, dpi: float = DPI, style: PlotStyle = PLAIN
) -> None:
    """Mean test accuracy (%) vs cumulative point-to-point messages, one line per group.

    Runs that never send a message (centralized ones) are left out, as the legend
    says; the other runs keep their evaluations at 0 messages.
    """
    _plot_lines(
        runs,
        path,
        _Lines(
            series=lambda run, _: _sent(run, "messages"),
            xlabel="point-to-point messages (cumulative)",
            ylabel="test accuracy (%)",
            title="Mean test accuracy vs messages",
            empty="no run with messages and test accuracy",
            left_out="no messages",
        ),
        dpi,
        style,
    )


def _sent(run: Run, key: str) -> Series | None:
    """Accuracy against a cumulative count; None for a run that never sends."""
    counts, accuracy = accuracy_against(run.records, key)
    if counts and not any(count > 0 for count in counts):
        return None
    return counts, accuracy


def plot_accuracy_vs_virtual_time(
    runs: Sequence[Run], path: str | Path, *, dpi: float = DPI, style: PlotStyle = PLAIN
) -> bool:
    """Mean test accuracy (%) vs the simulator's virtual seconds, one line per group:
    the figure of asynchronous methods, which reach an accuracy sooner on the clock
    than the iterations say. The x axis turns logarithmic when the lines' ends span
    a factor of 10 or more. Written (and True) only when some run's records have
    ``virtual_seconds``; otherwise a stale path is removed and False returned."""
    return _plot_lines(
        runs,
        path,
        _Lines(
            series=lambda run, _: accuracy_against(run.records, "virtual_seconds"),
            xlabel="virtual time (s, simulator's clock)",
            ylabel="test accuracy (%)",
            title="Mean test accuracy vs virtual time",
            empty="no run with virtual time",
            log_x=None,
        ),
        dpi,
        style,
        optional=True,
    )


def plot_accuracy_vs_wall_time(
    runs: Sequence[Run], path: str | Path, *, dpi: float = DPI, style: PlotStyle = PLAIN
) -> None:
    """Mean test accuracy (%) vs wall-clock seconds since the run started, one line per
    group (the real time of distributed runs; in the simulator, how long simulating
    took). Log x axis under the same rule as the virtual-time plot."""
    _plot_lines(
        runs,
        path,
        _Lines(
            series=lambda run, _: accuracy_against(run.records, "wall_seconds"),
            xlabel="wall time (s)",
            ylabel="test accuracy (%)",
            title="Mean test accuracy vs wall time",
            empty="no run with wall time and test accuracy",
            log_x=None,
        ),
        dpi,
        style,
    )


def _plot_lines(
    runs: Sequence[Run],
    path: str | Path,
    lines: _Lines,
    dpi: float,
    style: PlotStyle = PLAIN,
    optional: bool = False,
) -> bool:
    """Draw ``lines`` (see :class:`_Lines`); whether the file was written. An optional
    plot with no line writes nothing and removes a stale ``path``."""
    x_key = _x_key(runs)
    drawn, left_out, log_x = _group_lines(runs, lines, x_key, style)
    if optional and not drawn:
        Path(path).unlink(missing_ok=True)
        return False
    figure, axes = new_figure()
    for look, label, curve in drawn:
        _draw_line(axes, curve, look, label)
    if drawn and log_x:
        axes.set_xscale("log")
        if lines.log_x is None:  # seconds: 0.1, 1, 10 rather than powers of ten
            axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    if drawn and lines.log_y:
        _log_y(axes, drawn)
    if drawn and left_out:
        axes.plot([], [], " ", label=f"left out, {lines.left_out}: {', '.join(left_out)}")
    xlabel = lines.xlabel
    if xlabel is None:
        xlabel = _progress_axis(axes, [run for run in runs if _drawn(run, lines, x_key)])
    elif log_x and "log" not in xlabel:
        xlabel = xlabel.replace(")", ", log scale)") if xlabel.endswith(")") else xlabel + " (log)"
    seeds = any(curve.seeds > 1 for _, _, curve in drawn)
    title = _titled(lines.title, SEEDS_NOTE if seeds else "")
    _finish(axes, bool(drawn), lines.empty, xlabel, lines.ylabel, title)
    _save(figure, path, dpi)
    return True


def _log_y(axes: Axes, drawn: list[Line]) -> None:
    """A log y axis; plain numbers on its ticks while the values span less than 100x,
    on the minor ticks too below 10x."""
    axes.set_yscale("log")
    low = min(float(np.min(curve.low)) for _, _, curve in drawn)
    high = max(float(np.max(curve.high)) for _, _, curve in drawn)
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    if high < 100 * low:
        axes.yaxis.set_major_formatter(plain)
    if high < 10 * low:
        axes.yaxis.set_minor_formatter(plain)


def _drawn(run: Run, lines: _Lines, x_key: str) -> bool:
    series = lines.series(run, x_key)
    return series is not None and bool(series[0])


def _group_lines(
    runs: Sequence[Run], lines: _Lines, x_key: str, style: PlotStyle
) -> tuple[list[Line], list[str], bool]:
    """Each group's curve (points a log axis cannot show dropped, smoothed as ``style``
    says), the labels of the groups left out, and whether the x axis is logarithmic."""
    groups = plot_groups(runs)
    members = [
        [
            None if (got := lines.series(run, x_key)) is None else _smoothed(got, style.smooth)
            for run in group.runs
        ]
        for group in groups
    ]
    left_out = [
        group.label
        for group, series in zip(groups, members, strict=True)
        if all(member is None for member in series)
    ]
    group_looks = _group_looks(groups, style)
    log_x = lines.log_x
    if log_x is None:
        log_x = _spans(_curves(groups, members, (False, False), group_looks))
    drawn = _curves(groups, members, (log_x, lines.log_y), group_looks)
    return drawn, left_out, log_x


def _curves(
    groups: Sequence[SeedGroup],
    members: list[list[Series | None]],
    log: tuple[bool, bool],
    group_looks: Sequence[Look],
) -> list[Line]:
    """Each group's lines; ``log``: whether the x and the y axis are logarithmic."""
    drawn = []
    for look, group, series in zip(group_looks, groups, members, strict=True):
        kept = [None if member is None else _positive(member, *log) for member in series]
        drawn += [(look, line.label, line.curve) for line in group_lines(group, kept)]
    return drawn


def _positive(series: Series, x: bool, y: bool) -> Series:
    """The points of ``series`` a log axis can show: positive x (if ``x``) and y (if ``y``)."""
    points = [(a, b) for a, b in zip(*series, strict=True) if (not x or a > 0) and (not y or b > 0)]
    return [a for a, _ in points], [b for _, b in points]


def _spans(lines: list[Line]) -> bool:
    """Whether the lines' last x values span :data:`LOG_SPAN` or more (all positive)."""
    ends = [float(curve.x[-1]) for _, _, curve in lines]
    return bool(ends) and min(ends) > 0 and max(ends) / min(ends) >= LOG_SPAN


def _draw_line(axes: Axes, curve: Curve, look: Look, label: str) -> None:
    """A curve in its look; a group of seeds with the band of its 95 % interval; a run
    stopped early thinner, with :data:`STOP_MARKER` at its last point."""
    if curve.stopped:
        last = [len(curve.x) - 1]
        axes.plot(
            curve.x,
            curve.y,
            color=look.colour,
            linestyle=look.line_style,
            linewidth=1.0,
            marker=STOP_MARKER,
            markevery=last,
            markersize=8,
            markeredgewidth=2,
            label=label,
        )
        return
    marker = "." if curve.measured and len(curve.x) <= MAX_MARKED_POINTS else None
    axes.plot(
        curve.x, curve.y, color=look.colour, linestyle=look.line_style, marker=marker, label=label
    )
    if curve.seeds > 1:
        axes.fill_between(
            curve.x, curve.low, curve.high, color=look.colour, alpha=0.15, linewidth=0
        )


def accuracy_against(records: list[EvaluationRecord], key: str) -> tuple[list[float], list[float]]:
    """A record field's values and the mean test accuracy (%) where a record has both.

    The mean is ``accuracy_mean``, else the mean of the per-agent ``test_accuracy``.
    """
    counts, accuracy = [], []
    for record in records:
        count, mean = (
            finite_number(_field(record, key)),
            _statistic(record, "accuracy_mean", np.mean),
        )
        if count is not None and mean is not None:
            counts.append(count)
            accuracy.append(100 * mean)
    return counts, accuracy


def plot_events_per_agent(
    runs: Sequence[Run], path: str | Path, *, dpi: float = DPI, style: PlotStyle = PLAIN
) -> None:
    """Final events per agent (broadcasts: sends of one message to every neighbour) as
    grouped bars: one group of bars per agent, one colour per seed group (the mean over
    its finished seeds, error bars from min to max); runs stopped early are left out,
    as the legend says."""
    figure, axes = new_figure()
    bars, left_out = _event_bars(runs, style)
    width = 0.8 / max(len(bars), 1)
    for position, (look, label, table) in enumerate(bars):
        agents = np.arange(table.shape[1])
        mean = table.mean(axis=0)
        spread = [mean - table.min(axis=0), table.max(axis=0) - mean]
        several = table.shape[0] > 1
        axes.bar(
            agents - 0.4 + width * (position + 0.5),
            mean,
            width=width,
            color=look.colour,
            hatch=None if look.line_style == "-" else _HATCHES[position % len(_HATCHES)],
            edgecolor="white",
            label=label,
            yerr=spread if several else None,
            ecolor="0.25",
            capsize=2 if several else 0,
        )
    if left_out:
        axes.plot([], [], " ", label=f"left out, stopped early: {', '.join(left_out)}")
    # Every agent gets a tick while they stay readable; beyond that, integer ticks only.
    agent_count = max((table.shape[1] for _, _, table in bars), default=0)
    if 0 < agent_count <= MAX_AGENT_TICKS:
        axes.set_xticks(range(agent_count))
    elif bars:
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    several = any(table.shape[0] > 1 for _, _, table in bars)
    note = "bars: mean over seeds, error bars: min to max over seeds" if several else ""
    _finish(
        axes,
        bool(bars),
        "no multi-agent run with events per agent",
        "agent",
        "broadcasts (total)",
        _titled("Broadcasts per agent (a broadcast: one message to every neighbour)", note),
    )
    _save(figure, path, dpi)


def _event_bars(
    runs: Sequence[Run], style: PlotStyle
) -> tuple[list[tuple[Look, str, np.ndarray]], list[str]]:
    """Each multi-agent group's look, legend entry and final events per agent (a row per
    finished seed); and the groups left out because every run stopped early."""
    bars, left_out = [], []
    groups = plot_groups(runs)
    for look, group in zip(_group_looks(groups, style), groups, strict=True):
        done = _finished(group.runs)
        counts = [_final_events_per_agent(run) for run in done]
        counts = [c for c in counts if c and len(c) == len(counts[0])]
        if group.runs[0].summary.get("agents") == 1:
            continue
        of = len(group.runs) if len(done) < len(group.runs) else None
        if counts:
            bars.append((look, group_label(group.label, len(counts), of), np.array(counts)))
        elif not done:
            left_out.append(group.label)
    return bars, left_out


def _finished(runs: Sequence[Run]) -> list[Run]:
    """The runs that were not stopped early: those a mean or a final value takes in."""
    return [run for run in runs if stop_of(run.summary) is None]


def plot_time_vs_nodes(
    runs: Sequence[Run], path: str | Path, *, dpi: float = DPI, style: PlotStyle = PLAIN
) -> bool:
    """Training time on the virtual clock vs number of nodes, one line per algorithm.

    Uses each run's summary ``agents`` and ``virtual_seconds``; runs without
    them are left out. Writes path and returns True only when some algorithm
    has runs at two or more node counts; otherwise writes nothing, removes a
    stale path and returns False.
    """
    sweep = _Sweep(
        x_of=lambda summary: finite_number(summary.get("agents")),
        y_of=lambda summary: finite_number(summary.get("virtual_seconds")),
        xlabel="nodes (agents)",
        ylabel="training time (virtual seconds)",
        title="Training time vs number of nodes (virtual clock)",
        integer_x=True,
    )
    return _plot_by_algorithm(runs, path, sweep, dpi=dpi, style=style)


def plot_accuracy_vs_degree(
    runs: Sequence[Run], path: str | Path, *, dpi: float = DPI, style: PlotStyle = PLAIN
) -> bool:
    """Final mean test accuracy (%) vs mean graph degree, one line per algorithm.

    Uses each run's summary ``mean_degree`` and ``accuracy.mean``; runs
    without them are left out. Written, and True returned, under the same
    condition as plot_time_vs_nodes: some algorithm at two or more degrees.
    """
    sweep = _Sweep(
        x_of=lambda summary: finite_number(summary.get("mean_degree")),
        y_of=_mean_accuracy_percent,
        xlabel="mean degree",
        ylabel="mean test accuracy (%)",
        title="Mean test accuracy vs mean degree",
        integer_x=False,
    )
    return _plot_by_algorithm(runs, path, sweep, dpi=dpi, style=style)


@dataclass(frozen=True)
class LostPoint:
    """A seed group's final accuracy against its share of messages lost, in percent:
    the means over its seeds and their min and max."""

    label: str
    index: int
    seeds: int
    lost: tuple[float, float, float]
    accuracy: tuple[float, float, float]
    """(mean, min, max)."""
    of: int | None = None
    """The group's runs, where some stopped early and are in no point."""


def lost_points(runs: Sequence[Run]) -> list[LostPoint]:
    """One point per seed group with a measured lost share and a final accuracy.

    The share is ``dropped_messages`` over ``messages`` (``lost_share``): a run
    without faults sits at 0, a run that sent nothing is left out, as is one
    without a final mean accuracy or one stopped early.
    """
    points = []
    for index, group in enumerate(plot_groups(runs)):
        pairs = [
            (lost, accuracy)
            for run in _finished(group.runs)
            if (lost := _percent_of(lost_share(run.summary))) is not None
            and (accuracy := _mean_accuracy_percent(run.summary)) is not None
        ]
        if pairs:
            losses, accuracies = zip(*pairs, strict=True)
            of = len(group.runs) if len(_finished(group.runs)) < len(group.runs) else None
            spreads = _spread(losses), _spread(accuracies)
            points.append(LostPoint(group.label, index, len(pairs), *spreads, of=of))
    return points


def _spread(values: Sequence[float]) -> tuple[float, float, float]:
    return float(np.mean(values)), min(values), max(values)


def plot_accuracy_vs_lost(
    runs: Sequence[Run], path: str | Path, *, dpi: float = DPI, style: PlotStyle = PLAIN
) -> bool:
    """Final mean test accuracy (%) vs the share of messages lost (%): one point per
    run, or per seed group (mean, error bars from min to max over its seeds), named
    after it: how each stands up to ``faults.drop``.

    Written, and True returned, only when the points lie at two or more lost
    shares; otherwise nothing is written, a stale path is removed and False is
    returned.
    """
    points = lost_points(runs)
    if len({round(point.lost[0], 9) for point in points}) < 2:
        Path(path).unlink(missing_ok=True)
        return False
    figure, axes = new_figure()
    group_looks = _group_looks(plot_groups(runs), style)
    for number, point in enumerate(points):
        (x, x_low, x_high), (y, y_low, y_high) = point.lost, point.accuracy
        axes.errorbar(
            [x],
            [y],
            xerr=[[x - x_low], [x_high - x]] if point.seeds > 1 else None,
            yerr=[[y - y_low], [y_high - y]] if point.seeds > 1 else None,
            color=group_looks[point.index].colour,
            marker=_MARKERS[number % len(_MARKERS)],
            markersize=7,
            linestyle="none",
            capsize=3,
            label=group_label(point.label, point.seeds, point.of),
        )
    several = any(point.seeds > 1 for point in points)
    note = "mean over seeds, error bars: min to max over seeds" if several else ""
    _finish(
        axes,
        True,
        "",
        "messages lost (%)",
        "final mean test accuracy (%)",
        _titled("Final mean test accuracy vs messages lost, one point per run", note),
    )
    _save(figure, path, dpi)
    return True


def _percent_of(fraction: float | None) -> float | None:
    return None if fraction is None else 100 * fraction


def _mean_accuracy_percent(summary: RunSummary) -> float | None:
    value = summary.get("accuracy")
    mean = finite_number(value.get("mean")) if isinstance(value, dict) else None
    return None if mean is None else 100 * mean


def speedup_lines(
    runs: Sequence[Run],
) -> dict[str, tuple[list[tuple[float, float, float | None]], list[float]]]:
    """Speedup points of runs with a target, one line per algorithm (and dataset, target).

    Each line holds (W, iteration speedup, time speedup) of every run with a
    speedup, and the W of its runs that did not reach the target (left out of
    the points; runs that reached it but lack a W = 1 run that did are in
    neither). Speedups are ``report.speedups``: over the W = 1 run of the
    same algorithm, dataset and target loss. A line is named after the
    algorithm, with the dataset / target added when the runs span several. Runs
    stopped early are in neither.
    """
    summaries = [run.summary for run in _finished(runs)]
    entries = []
    for summary, (iteration, time) in zip(summaries, speedups(summaries), strict=True):
        workers = finite_number(summary.get("workers"))
        if not has_target(summary) or workers is None:
            continue
        algorithm = str(summary.get("algorithm") or run_label(summary))
        target = finite_number(summary.get("target_loss"))
        reached = finite_number(summary.get("iterations_to_target")) is not None
        entries.append(
            (algorithm, summary.get("dataset"), target, workers, reached, iteration, time)
        )
    several_datasets = len({entry[1] for entry in entries}) > 1
    several_targets = len({entry[2] for entry in entries}) > 1
    lines: dict[str, tuple[list[tuple[float, float, float | None]], list[float]]] = {}
    for algorithm, dataset, target, workers, reached, iteration, time in entries:
        name = algorithm
        if several_datasets:
            name += f" ({dataset or '?'})"
        if several_targets:
            name += f" (target {'?' if target is None else f'{target:g}'})"
        points, not_reached = lines.setdefault(name, ([], []))
        if not reached:
            not_reached.append(workers)
        elif iteration is not None:  # reached, and its W = 1 run did too
            points.append((workers, iteration, time))
    return lines


def _speedup_line(
    axes: Axes,
    name: str,
    points: list[tuple[float, float, float | None]],
    not_reached: list[float],
    colour: str,
) -> None:
    """One algorithm's iteration speedup (hollow circles) and time speedup (squares)."""
    workers, iteration = mean_line([(w, s) for w, s, _ in points])
    # Hollow circles around the time line's squares: the two often coincide.
    axes.plot(
        workers,
        iteration,
        color=colour,
        marker="o",
        markersize=9,
        markerfacecolor="none",
        label=f"{name}: iterations",
    )
    timed = [(w, t) for w, _, t in points if t is not None]
    if timed:
        time_workers, time = mean_line(timed)
        axes.plot(
            time_workers,
            time,
            color=colour,
            marker="s",
            markersize=4,
            linestyle="--",
            label=f"{name}: virtual time",
        )
    if not_reached:
        left_out = ", ".join(f"{w:g}" for w in sorted(set(not_reached)))
        axes.plot([], [], " ", label=f"{name}: not reached, left out: W = {left_out}")


def plot_speedup_vs_workers(
    runs: Sequence[Run], path: str | Path, *, dpi: float = DPI, style: PlotStyle = PLAIN
) -> bool:
    """Iteration and time speedup to the target loss vs workers W, with linear speedup y = W.

    One colour per algorithm: iteration speedup W * its_1 / its_W solid, time
    speedup (virtual seconds) dashed; both axes log2. Runs that did not reach
    the target are left out, as the legend says. Written, and True returned,
    only when some algorithm has a W = 1 run that reached its target and
    another W that did; otherwise nothing is written, a stale path is removed
    and False is returned.
    """
    lines = speedup_lines(runs)
    if not any(len({w for w, _, _ in points}) >= 2 for points, _ in lines.values()):
        Path(path).unlink(missing_ok=True)
        return False
    figure, axes = new_figure()
    all_workers: set[float] = set()
    line_looks = looks([(name, name.split(" (")[0]) for name in lines], style)
    for name, (points, not_reached) in lines.items():
        if points:
            _speedup_line(axes, name, points, not_reached, line_looks[name].colour)
            all_workers.update(w for w, _, _ in points)
            all_workers.update(not_reached)
    ticks = sorted(all_workers)
    axes.plot(
        [ticks[0], ticks[-1]], [ticks[0], ticks[-1]], color="0.4", linestyle=":", label="linear (W)"
    )
    axes.set_xscale("log", base=2)
    axes.set_yscale("log", base=2)
    axes.set_xticks(ticks)
    axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    _finish(
        axes,
        True,
        "",
        "workers W",
        "speedup over W = 1",
        "Speedup to the target loss (runs that did not reach it left out)",
    )
    _save(figure, path, dpi)
    return True


def plot_staleness(
    runs: Sequence[Run], path: str | Path, *, dpi: float = DPI, style: PlotStyle = PLAIN
) -> bool:
    """Staleness histogram of each run with one: share of applied gradients (%) per staleness.

    One line per run (its name as label), log y axis so that rare staleness
    values show; staleness values no gradient had are gaps. Written, and True
    returned, only when some run has a ``staleness`` histogram with counts;
    otherwise nothing is written, a stale path is removed and False is returned.
    """
    histograms = []
    run_looks = looks(
        [(run_label(run.summary), str(run.summary.get("algorithm") or "")) for run in runs], style
    )
    for run in runs:
        counts = _staleness_histogram(run.summary)
        if counts:
            histograms.append((run_looks[run_label(run.summary)], run, counts))
    if not histograms:
        Path(path).unlink(missing_ok=True)
        return False
    figure, axes = new_figure()
    for look, run, counts in histograms:
        total = sum(counts)
        shares = [100 * count / total if count > 0 else math.nan for count in counts]
        axes.plot(
            range(len(counts)),
            shares,
            color=look.colour,
            linestyle=look.line_style,
            marker=".",
            label=run_label(run.summary),
        )
    axes.set_yscale("log")
    axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    _finish(
        axes,
        True,
        "",
        "staleness (server updates between read and apply)",
        "applied gradients (%)",
        "Staleness of applied gradients",
    )
    _save(figure, path, dpi)
    return True


def _staleness_histogram(summary: RunSummary) -> list[float]:
    """A run's staleness counts (index = staleness); empty when absent, malformed or all 0."""
    staleness = summary.get("staleness")
    histogram = staleness.get("histogram") if isinstance(staleness, dict) else None
    if not isinstance(histogram, list):
        return []
    counts = [finite_number(count) for count in histogram]
    valid = [count for count in counts if count is not None and count >= 0]
    if len(valid) != len(counts) or not sum(valid):
        return []
    return valid


SAMPLES_AXIS = "training samples (gradients computed x batch)"
"""The progress axis of runs of parameter servers and shared memory: a synchronous
server's iteration computes W gradients, an asynchronous one's one, so iterations
would put unequal work side by side."""


def _x_key(runs: Sequence[Run]) -> str:
    """The record field of the progress axis: ``samples`` where some run has workers
    and every run's records count samples, else ``iteration`` (layers: their iteration)."""
    if not any("workers" in run.summary for run in runs):
        return "iteration"
    counted = all(
        finite_number(_field(record, "samples")) is not None
        for run in runs
        for record in run.records
    )
    return "samples" if counted else "iteration"


def x_axis_label(runs: Sequence[Run]) -> str:
    """The x-axis label: "layer" if every run with records is layer-wise, the samples
    axis (:data:`SAMPLES_AXIS`) where runs have workers (:func:`_x_key`), else
    "iteration".

    A run is layer-wise when each of its records that has an iteration also
    has a numeric ``layer`` (SSFN-style runs record once per layer, with
    iteration equal to layer). Runs without records do not count; with none
    left the label is "iteration".
    """
    if _x_key(runs) == "samples":
        return SAMPLES_AXIS
    with_records = [
        [record for record in run.records if finite_number(record.get("iteration")) is not None]
        for run in runs
    ]
    with_records = [records for records in with_records if records]
    layer_wise = all(
        finite_number(record.get("layer")) is not None
        for records in with_records
        for record in records
    )
    return "layer" if with_records and layer_wise else "iteration"


def algorithm_points(
    runs: Sequence[Run],
    x_of: Callable[[RunSummary], float | None],
    y_of: Callable[[RunSummary], float | None],
) -> dict[str, list[tuple[float, float]]]:
    """(x, y) points of each run's summary, grouped into lines by algorithm.

    Runs where x_of or y_of gives None are left out, as are runs stopped early. A
    line is named after the algorithm, with the dataset added when the points span
    several datasets (a line should not mix datasets). Lines keep the order of first
    appearance.
    """
    points = []
    for run in _finished(runs):
        x, y = x_of(run.summary), y_of(run.summary)
        if x is None or y is None:
            continue
        algorithm = str(run.summary.get("algorithm") or run_label(run.summary))
        points.append((algorithm, run.summary.get("dataset"), x, y))
    several_datasets = len({dataset for _, dataset, _, _ in points}) > 1
    lines: dict[str, list[tuple[float, float]]] = {}
    for algorithm, dataset, x, y in points:
        name = f"{algorithm} ({dataset or '?'})" if several_datasets else algorithm
        lines.setdefault(name, []).append((x, y))
    return lines


def mean_line(points: Sequence[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """The distinct x values in increasing order and the mean y of the points at each."""
    xs = sorted({x for x, _ in points})
    return xs, [float(np.mean([y for x, y in points if x == value])) for value in xs]


@dataclass(frozen=True)
class _Sweep:
    """What a plot across runs draws: a summary's x and y, and the axes' words."""

    x_of: Callable[[RunSummary], float | None]
    y_of: Callable[[RunSummary], float | None]
    xlabel: str
    ylabel: str
    title: str
    integer_x: bool


def _plot_by_algorithm(
    runs: Sequence[Run], path: str | Path, sweep: _Sweep, *, dpi: float, style: PlotStyle = PLAIN
) -> bool:
    """One line per algorithm through the mean y at each x of ``sweep``, sorted by x.

    Where several runs share an x (seeds, other settings), the line goes
    through their mean and each run is also shown as a faint dot.
    """
    lines = algorithm_points(runs, sweep.x_of, sweep.y_of)
    if not any(len({x for x, _ in points}) >= 2 for points in lines.values()):
        Path(path).unlink(missing_ok=True)
        return False
    figure, axes = new_figure()
    line_looks = looks([(name, name.split(" (")[0]) for name in lines], style)
    for name, points in lines.items():
        colour = line_looks[name].colour
        xs, means = mean_line(points)
        axes.plot(xs, means, color=colour, marker="o", label=name)
        if len(points) > len(xs):
            axes.scatter(
                [x for x, _ in points], [y for _, y in points], color=colour, alpha=0.35, s=14
            )
    if sweep.integer_x:
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    _finish(axes, True, "", sweep.xlabel, sweep.ylabel, sweep.title)
    _save(figure, path, dpi)
    return True


def _accuracy_series(records: list[EvaluationRecord], x: str = "iteration") -> AccuracySeries:
    """``x`` (iterations, or samples) and mean/min/max accuracy in percent; NaN where a
    record lacks a value.

    Statistics the record does not carry are computed from its per-agent
    test_accuracy list.
    """
    rows = []
    for record in records:
        iteration = finite_number(_field(record, x))
        if iteration is None:
            continue
        statistics = []
        for key, reduce in (
            ("accuracy_mean", np.mean),
            ("accuracy_min", min),
            ("accuracy_max", max),
        ):
            value = _statistic(record, key, reduce)
            statistics.append(math.nan if value is None else 100 * value)
        rows.append([iteration, *statistics])
    table = np.array(rows, dtype=float).reshape(-1, 4)
    return table[:, 0], table[:, 1], table[:, 2], table[:, 3]


def _statistic(
    record: EvaluationRecord, key: str, reduce: Callable[[list[float]], SupportsFloat]
) -> float | None:
    """An accuracy statistic of a record, else reduce over its per-agent test_accuracy."""
    value = finite_number(record.get(key))
    if value is not None:
        return value
    per_agent = [a for a in map(finite_number, record.get("test_accuracy") or []) if a is not None]
    return float(reduce(per_agent)) if per_agent else None


def _series(
    records: list[EvaluationRecord], key: str, x: str = "iteration"
) -> tuple[list[float], list[float]]:
    """``x`` (iterations, or samples) and the values of one numeric record field, where
    both are present."""
    iterations, values = [], []
    for record in records:
        iteration, value = finite_number(_field(record, x)), finite_number(_field(record, key))
        if iteration is not None and value is not None:
            iterations.append(iteration)
            values.append(value)
    return iterations, values


def _final_events_per_agent(run: Run) -> list[float]:
    """Events per agent at the end: from the summary, else from the last record."""
    counts: list[int] | None = run.summary.get("events_per_agent")
    if not counts and run.records:
        counts = run.records[-1].get("events_per_agent")
    if not isinstance(counts, list):
        return []
    values = [finite_number(count) for count in counts]
    finite = [value for value in values if value is not None]
    return finite if len(finite) == len(values) else []


def _field(record: EvaluationRecord, key: str) -> object:
    """A record's value of ``key``, also of a key its type does not name."""
    return cast(Mapping[str, object], record).get(key)


def _percent_series(records: list[EvaluationRecord], key: str, x: str = "iteration") -> Series:
    """``x`` and a fraction field of the records in percent, where both are present."""
    iterations, values = _series(records, key, x)
    return iterations, [100 * value for value in values]


def _save(figure: Figure, path: str | Path, dpi: float = DPI) -> None:
    save(figure, path, dpi)
