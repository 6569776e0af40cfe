"""PNG plots of finished runs: accuracy, messages and events per agent; for
layer-wise runs also training time vs nodes and accuracy vs mean degree.

Figures are drawn on the Agg canvas directly, without pyplot, so plotting
never opens a window, never changes the caller's matplotlib backend and
leaves no figure behind. Each run keeps its colour (its position in the list)
in every per-run plot, also when a plot skips some runs. A per-run plot with
no run to show still writes its file, with a note saying why it is empty.

The per-algorithm plots (time vs nodes, accuracy vs degree) draw one line per
algorithm across runs and are written only when there is something to compare:
some algorithm with runs at two or more x values. They return whether they
wrote their file.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from murmur.metrics.report import Run, run_label

__all__ = [
    "plot_accuracy",
    "plot_messages",
    "plot_events_per_agent",
    "plot_time_vs_nodes",
    "plot_accuracy_vs_degree",
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
    xlabel = x_axis_label(drawn)
    if xlabel == "layer":
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    _finish(
        axes,
        bool(drawn),
        "no evaluation records with test accuracy",
        xlabel,
        "test accuracy (%)",
        "Mean test accuracy (band: min to max over agents)",
    )
    _save(figure, path)


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
    xlabel = x_axis_label(drawn)
    if xlabel == "layer":
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
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

    def accuracy(summary: dict[str, Any]) -> float | None:
        value = summary.get("accuracy")
        mean = _finite(value.get("mean")) if isinstance(value, dict) else None
        return None if mean is None else 100 * mean

    return _plot_by_algorithm(
        runs,
        path,
        x_of=lambda summary: _finite(summary.get("mean_degree")),
        y_of=accuracy,
        xlabel="mean degree",
        ylabel="mean test accuracy (%)",
        title="Mean test accuracy vs mean degree",
        integer_x=False,
    )


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
    x_of: Callable[[dict[str, Any]], float | None],
    y_of: Callable[[dict[str, Any]], float | None],
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
    x_of: Callable[[dict[str, Any]], float | None],
    y_of: Callable[[dict[str, Any]], float | None],
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
    records: list[dict[str, Any]],
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
        per_agent = [a for a in map(_finite, record.get("test_accuracy") or []) if a is not None]
        statistics = []
        for key, reduce in (
            ("accuracy_mean", np.mean),
            ("accuracy_min", min),
            ("accuracy_max", max),
        ):
            value = _finite(record.get(key))
            if value is None and per_agent:
                value = float(reduce(per_agent))
            statistics.append(math.nan if value is None else 100 * value)
        rows.append([iteration, *statistics])
    table = np.array(rows, dtype=float).reshape(-1, 4)
    return table[:, 0], table[:, 1], table[:, 2], table[:, 3]


def _series(records: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
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
    counts = run.summary.get("events_per_agent")
    if not counts and run.records:
        counts = run.records[-1].get("events_per_agent")
    if not isinstance(counts, list):
        return []
    values = [_finite(count) for count in counts]
    return [] if None in values else values


def _finite(value: Any) -> float | None:
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
