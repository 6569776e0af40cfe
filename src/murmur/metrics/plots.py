"""PNG plots of finished runs: accuracy, messages and events per agent,
accuracy against cumulative bytes and against cumulative messages; for
layer-wise runs also training time vs nodes and accuracy vs mean degree; for
worker-based runs also speedup vs workers and the staleness histogram.

Figures are drawn on the Agg canvas directly, without pyplot, so plotting
never opens a window, never changes the caller's matplotlib backend and
leaves no figure behind. Each run keeps its colour (its position in the list)
in every per-run plot, also when a plot skips some runs. A per-run plot with
no run to show still writes its file, with a note saying why it is empty.

The per-algorithm plots (time vs nodes, accuracy vs degree) draw one line per
algorithm across runs and are written only when there is something to compare:
some algorithm with runs at two or more x values. They return whether they
wrote their file, as do the speedup and staleness plots.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import SupportsFloat

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from murmur.metrics.record_types import EvaluationRecord, RunSummary
from murmur.metrics.report import Run, has_target, lost_share, run_label, speedups

__all__ = [
    "plot_accuracy",
    "plot_messages",
    "plot_events_per_agent",
    "plot_accuracy_vs_bytes",
    "plot_accuracy_vs_messages",
    "accuracy_against",
    "plot_time_vs_nodes",
    "plot_accuracy_vs_degree",
    "plot_accuracy_vs_lost",
    "plot_speedup_vs_workers",
    "plot_staleness",
    "speedup_lines",
    "x_axis_label",
]

DPI = 120
FIGURE_SIZE = (7.0, 4.2)
MAX_AGENT_TICKS = 32


def plot_accuracy(runs: Sequence[Run], path: str | Path) -> None:
    """Mean test accuracy (%) vs iteration or layer, one line per run, min-max band over agents."""
    figure, axes = _new_figure()
    drawn: list[Run] = []
    for index, run in enumerate(runs):
        iterations, mean, low, high = _accuracy_series(run.records)
        if not np.isfinite(mean).any():
            continue
        colour = _colour(index)
        axes.plot(iterations, mean, color=colour, marker=".", label=run_label(run.summary))
        band = np.isfinite(low) & np.isfinite(high)
        if band.any():
            axes.fill_between(
                iterations, low, high, where=band, color=colour, alpha=0.2, linewidth=0
            )
        drawn.append(run)
    xlabel = _progress_axis(axes, drawn)
    _finish(
        axes,
        bool(drawn),
        "no evaluation records with test accuracy",
        xlabel,
        "test accuracy (%)",
        "Mean test accuracy (band: min to max over agents)",
    )
    _save(figure, path)


def _progress_axis(axes, runs: Sequence[Run]) -> str:
    """The x label for ``runs`` (layer or iteration); layers get whole-number ticks."""
    xlabel = x_axis_label(runs)
    if xlabel == "layer":
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    return xlabel


def plot_messages(runs: Sequence[Run], path: str | Path) -> None:
    """Cumulative messages vs iteration (or layer), one line per run that sends any."""
    figure, axes = _new_figure()
    drawn: list[Run] = []
    for index, run in enumerate(runs):
        if run.summary.get("agents") == 1:
            continue
        iterations, messages = _series(run.records, "messages")
        if not iterations:
            continue
        axes.plot(
            iterations, messages, color=_colour(index), marker=".", label=run_label(run.summary)
        )
        drawn.append(run)
    xlabel = _progress_axis(axes, drawn)
    _finish(
        axes,
        bool(drawn),
        "no run with message counts",
        xlabel,
        "messages (cumulative)",
        "Messages sent",
    )
    _save(figure, path)


def plot_events_per_agent(runs: Sequence[Run], path: str | Path) -> None:
    """Final events per agent as grouped bars: one group per agent, one colour per run."""
    figure, axes = _new_figure()
    bars = []
    for index, run in enumerate(runs):
        counts = _final_events_per_agent(run) if run.summary.get("agents") != 1 else []
        if counts:
            bars.append((index, run, counts))
    width = 0.8 / max(len(bars), 1)
    for position, (index, run, counts) in enumerate(bars):
        agents = np.arange(len(counts))
        axes.bar(
            agents - 0.4 + width * (position + 0.5),
            counts,
            width=width,
            color=_colour(index),
            label=run_label(run.summary),
        )
    # Every agent gets a tick while they stay readable; beyond that, integer ticks only.
    agent_count = max((len(counts) for _, _, counts in bars), default=0)
    if 0 < agent_count <= MAX_AGENT_TICKS:
        axes.set_xticks(range(agent_count))
    elif bars:
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    _finish(
        axes,
        bool(bars),
        "no multi-agent run with events per agent",
        "agent",
        "events (total)",
        "Events per agent",
    )
    _save(figure, path)


def plot_accuracy_vs_bytes(runs: Sequence[Run], path: str | Path) -> None:
    """Mean test accuracy (%) vs cumulative bytes sent, log x axis, one line per run.

    A log axis cannot show 0 bytes: each line starts at the run's first
    evaluation with a positive byte count (an evaluation before any exchange
    is left out), and runs that never send a byte (centralized ones) are left
    out of the plot altogether; the legend names them.
    """
    _plot_accuracy_against(
        runs,
        path,
        key="bytes",
        xlabel="bytes sent (cumulative, log scale)",
        title="Mean test accuracy vs bytes sent",
        log_x=True,
    )


def plot_accuracy_vs_messages(runs: Sequence[Run], path: str | Path) -> None:
    """Mean test accuracy (%) vs cumulative point-to-point messages, one line per run.

    Runs that never send a message (centralized ones) are left out, as the
    legend says; the other runs keep their evaluations at 0 messages.
    """
    _plot_accuracy_against(
        runs,
        path,
        key="messages",
        xlabel="point-to-point messages (cumulative)",
        title="Mean test accuracy vs messages",
        log_x=False,
    )


def _plot_accuracy_against(
    runs: Sequence[Run],
    path: str | Path,
    key: str,
    xlabel: str,
    title: str,
    log_x: bool,
) -> None:
    """One accuracy line per run against its cumulative ``key``; runs that send none left out."""
    figure, axes = _new_figure()
    drawn, left_out = False, []
    for index, run in enumerate(runs):
        counts, accuracy = accuracy_against(run.records, key)
        if not any(count > 0 for count in counts):
            if counts:
                left_out.append(run_label(run.summary))
            continue
        if log_x:  # a log axis cannot show 0
            first = next(i for i, count in enumerate(counts) if count > 0)
            counts, accuracy = counts[first:], accuracy[first:]
        axes.plot(counts, accuracy, color=_colour(index), marker=".", label=run_label(run.summary))
        drawn = True
    if drawn and log_x:
        axes.set_xscale("log")
    if drawn and left_out:
        axes.plot([], [], " ", label=f"left out, no {key}: {', '.join(left_out)}")
    _finish(axes, drawn, f"no run with {key} and test accuracy", xlabel, "test accuracy (%)", title)
    _save(figure, path)


def accuracy_against(records: list[EvaluationRecord], key: str) -> tuple[list[float], list[float]]:
    """A record field's values and the mean test accuracy (%) where a record has both.

    The mean is ``accuracy_mean``, else the mean of the per-agent ``test_accuracy``.
    """
    counts, accuracy = [], []
    for record in records:
        count, mean = _finite(record.get(key)), _statistic(record, "accuracy_mean", np.mean)
        if count is not None and mean is not None:
            counts.append(count)
            accuracy.append(100 * mean)
    return counts, accuracy


def plot_time_vs_nodes(runs: Sequence[Run], path: str | Path) -> bool:
    """Training time on the virtual clock vs number of nodes, one line per algorithm.

    Uses each run's summary ``agents`` and ``virtual_seconds``; runs without
    them are left out. Writes path and returns True only when some algorithm
    has runs at two or more node counts; otherwise writes nothing, removes a
    stale path and returns False.
    """
    return _plot_by_algorithm(
        runs,
        path,
        x_of=lambda summary: _finite(summary.get("agents")),
        y_of=lambda summary: _finite(summary.get("virtual_seconds")),
        xlabel="nodes (agents)",
        ylabel="training time (virtual seconds)",
        title="Training time vs number of nodes (virtual clock)",
        integer_x=True,
    )


def plot_accuracy_vs_degree(runs: Sequence[Run], path: str | Path) -> bool:
    """Final mean test accuracy (%) vs mean graph degree, one line per algorithm.

    Uses each run's summary ``mean_degree`` and ``accuracy.mean``; runs
    without them are left out. Written, and True returned, under the same
    condition as plot_time_vs_nodes: some algorithm at two or more degrees.
    """
    return _plot_by_algorithm(
        runs,
        path,
        x_of=lambda summary: _finite(summary.get("mean_degree")),
        y_of=_mean_accuracy_percent,
        xlabel="mean degree",
        ylabel="mean test accuracy (%)",
        title="Mean test accuracy vs mean degree",
        integer_x=False,
    )


def plot_accuracy_vs_lost(runs: Sequence[Run], path: str | Path) -> bool:
    """Final mean test accuracy (%) vs the share of messages lost (%), one line per
    algorithm: how each stands up to ``faults.drop``.

    The share is measured, ``dropped_messages`` over ``messages`` (``lost_share``):
    a run without faults sits at 0 and runs that sent nothing are left out.
    Written, and True returned, under the same condition as plot_time_vs_nodes:
    some algorithm at two or more shares.
    """
    return _plot_by_algorithm(
        runs,
        path,
        x_of=lambda summary: _percent_of(lost_share(summary)),
        y_of=_mean_accuracy_percent,
        xlabel="messages lost (%)",
        ylabel="mean test accuracy (%)",
        title="Mean test accuracy vs messages lost",
        integer_x=False,
    )


def _percent_of(fraction: float | None) -> float | None:
    return None if fraction is None else 100 * fraction


def _mean_accuracy_percent(summary: RunSummary) -> float | None:
    value = summary.get("accuracy")
    mean = _finite(value.get("mean")) if isinstance(value, dict) else None
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
    algorithm, with the dataset / target added when the runs span several.
    """
    summaries = [run.summary for run in runs]
    entries = []
    for summary, (iteration, time) in zip(summaries, speedups(summaries), strict=True):
        workers = _finite(summary.get("workers"))
        if not has_target(summary) or workers is None:
            continue
        algorithm = str(summary.get("algorithm") or run_label(summary))
        target = _finite(summary.get("target_loss"))
        reached = _finite(summary.get("iterations_to_target")) is not None
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


def plot_speedup_vs_workers(runs: Sequence[Run], path: str | Path) -> bool:
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
    figure, axes = _new_figure()
    all_workers: set[float] = set()
    for index, (name, (points, not_reached)) in enumerate(lines.items()):
        if points:
            _speedup_line(axes, name, points, not_reached, _colour(index))
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
    _save(figure, path)
    return True


def plot_staleness(runs: Sequence[Run], path: str | Path) -> bool:
    """Staleness histogram of each run with one: share of applied gradients (%) per staleness.

    One line per run (its name as label), log y axis so that rare staleness
    values show; staleness values no gradient had are gaps. Written, and True
    returned, only when some run has a ``staleness`` histogram with counts;
    otherwise nothing is written, a stale path is removed and False is returned.
    """
    histograms = []
    for index, run in enumerate(runs):
        counts = _staleness_histogram(run.summary)
        if counts:
            histograms.append((index, run, counts))
    if not histograms:
        Path(path).unlink(missing_ok=True)
        return False
    figure, axes = _new_figure()
    for index, run, counts in histograms:
        total = sum(counts)
        shares = [100 * count / total if count > 0 else math.nan for count in counts]
        axes.plot(
            range(len(counts)),
            shares,
            color=_colour(index),
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
    _save(figure, path)
    return True


def _staleness_histogram(summary: RunSummary) -> list[float]:
    """A run's staleness counts (index = staleness); empty when absent, malformed or all 0."""
    staleness = summary.get("staleness")
    histogram = staleness.get("histogram") if isinstance(staleness, dict) else None
    if not isinstance(histogram, list):
        return []
    counts = [_finite(count) for count in histogram]
    valid = [count for count in counts if count is not None and count >= 0]
    if len(valid) != len(counts) or not sum(valid):
        return []
    return valid


def x_axis_label(runs: Sequence[Run]) -> str:
    """The x-axis label: "layer" if every run with records is layer-wise, else "iteration".

    A run is layer-wise when each of its records that has an iteration also
    has a numeric ``layer`` (SSFN-style runs record once per layer, with
    iteration equal to layer). Runs without records do not count; with none
    left the label is "iteration".
    """
    with_records = [
        [record for record in run.records if _finite(record.get("iteration")) is not None]
        for run in runs
    ]
    with_records = [records for records in with_records if records]
    layer_wise = all(
        _finite(record.get("layer")) is not None for records in with_records for record in records
    )
    return "layer" if with_records and layer_wise else "iteration"


def algorithm_points(
    runs: Sequence[Run],
    x_of: Callable[[RunSummary], float | None],
    y_of: Callable[[RunSummary], float | None],
) -> dict[str, list[tuple[float, float]]]:
    """(x, y) points of each run's summary, grouped into lines by algorithm.

    Runs where x_of or y_of gives None are left out. A line is named after the
    algorithm, with the dataset added when the points span several datasets
    (a line should not mix datasets). Lines keep the order of first appearance.
    """
    points = []
    for run in runs:
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


def _plot_by_algorithm(
    runs: Sequence[Run],
    path: str | Path,
    x_of: Callable[[RunSummary], float | None],
    y_of: Callable[[RunSummary], float | None],
    xlabel: str,
    ylabel: str,
    title: str,
    integer_x: bool,
) -> bool:
    """One line per algorithm through the mean y at each x, sorted by x.

    Where several runs share an x (seeds, other settings), the line goes
    through their mean and each run is also shown as a faint dot.
    """
    lines = algorithm_points(runs, x_of, y_of)
    if not any(len({x for x, _ in points}) >= 2 for points in lines.values()):
        Path(path).unlink(missing_ok=True)
        return False
    figure, axes = _new_figure()
    for index, (name, points) in enumerate(lines.items()):
        colour = _colour(index)
        xs, means = mean_line(points)
        axes.plot(xs, means, color=colour, marker="o", label=name)
        if len(points) > len(xs):
            axes.scatter(
                [x for x, _ in points], [y for _, y in points], color=colour, alpha=0.35, s=14
            )
    if integer_x:
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    _finish(axes, True, "", xlabel, ylabel, title)
    _save(figure, path)
    return True


def _accuracy_series(
    records: list[EvaluationRecord],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Iterations and mean/min/max accuracy in percent; NaN where a record lacks a value.

    Statistics the record does not carry are computed from its per-agent
    test_accuracy list.
    """
    rows = []
    for record in records:
        iteration = _finite(record.get("iteration"))
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
    value = _finite(record.get(key))
    if value is not None:
        return value
    per_agent = [a for a in map(_finite, record.get("test_accuracy") or []) if a is not None]
    return float(reduce(per_agent)) if per_agent else None


def _series(records: list[EvaluationRecord], key: str) -> tuple[list[float], list[float]]:
    """Iterations and values of one numeric record field, where both are present."""
    iterations, values = [], []
    for record in records:
        iteration, value = _finite(record.get("iteration")), _finite(record.get(key))
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
    values = [_finite(count) for count in counts]
    finite = [value for value in values if value is not None]
    return finite if len(finite) == len(values) else []


def _finite(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _colour(index: int) -> str:
    return f"C{index % 10}"


def _new_figure() -> tuple[Figure, Axes]:
    figure = Figure(figsize=FIGURE_SIZE)
    FigureCanvasAgg(figure)
    return figure, figure.add_subplot()


def _finish(axes: Axes, drawn: bool, empty_note: str, xlabel: str, ylabel: str, title: str) -> None:
    axes.set_title(title)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    if drawn:
        axes.grid(alpha=0.3)
        axes.legend(loc="best", fontsize="small")
    else:
        axes.text(0.5, 0.5, empty_note, ha="center", va="center", transform=axes.transAxes)
        axes.set_xticks([])
        axes.set_yticks([])


def _save(figure: Figure, path: str | Path) -> None:
    figure.tight_layout()
    figure.savefig(Path(path), dpi=DPI, format="png")
