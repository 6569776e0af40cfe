"""PNG plots of finished runs: accuracy, messages and events per agent.

Figures are drawn on the Agg canvas directly, without pyplot, so plotting
never opens a window, never changes the caller's matplotlib backend and
leaves no figure behind. Each run keeps its colour (its position in the list)
in every plot, also when a plot skips some runs. A plot with no run to show
still writes its file, with a note saying why it is empty.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from murmur.metrics.report import Run, run_label

__all__ = ["plot_accuracy", "plot_messages", "plot_events_per_agent"]

DPI = 120
FIGURE_SIZE = (7.0, 4.2)
MAX_AGENT_TICKS = 32


def plot_accuracy(runs: Sequence[Run], path: str | Path) -> None:
    """Mean test accuracy (%) vs iteration, one line per run, min-max band over agents."""
    figure, axes = _new_figure()
    drawn = False
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
        drawn = True
    _finish(
        axes,
        drawn,
        "no evaluation records with test accuracy",
        "iteration",
        "test accuracy (%)",
        "Mean test accuracy (band: min to max over agents)",
    )
    _save(figure, path)


def plot_messages(runs: Sequence[Run], path: str | Path) -> None:
    """Cumulative point-to-point messages vs iteration, one line per run that sends any."""
    figure, axes = _new_figure()
    drawn = False
    for index, run in enumerate(runs):
        if run.summary.get("agents") == 1:
            continue
        iterations, messages = _series(run.records, "messages")
        if not iterations:
            continue
        axes.plot(
            iterations, messages, color=_colour(index), marker=".", label=run_label(run.summary)
        )
        drawn = True
    _finish(
        axes,
        drawn,
        "no run with message counts",
        "iteration",
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
