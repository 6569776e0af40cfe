"""The lines a plot draws: one per seed group, the mean across its seeds with a band.

:func:`plot_groups` groups the runs of a plot as the report's tables do
(:func:`murmur.reporting.seed_groups.group_runs`: runs whose saved configs differ only
in ``run.seed`` and that carry the same label); a run without a seed in its summary
is a group of its own. Groups keep the order of their first run in the list, so a
line's colour is its group's position.

:func:`seed_curve` turns the (x, y) series of a group's runs into one
:class:`Curve`. A group of one run is that run's series. For several seeds the
curve lies on the x values any member has, within the range every member covers
(nothing is extrapolated: a member that stops early, at a target loss or on a
shorter clock, ends the curve). Each member is linearly interpolated onto those x
values (``numpy.interp``), which changes nothing where the members share their x
values (evaluations at the same iterations); where they do not (virtual or wall
time, bytes, messages) it puts every seed on the same grid. The curve is the mean
of the members and its band the 95 % confidence interval of that mean at each x,
mean ± t(0.975, n - 1) · sd / √n (Student's t, as the tables' "95 % CI").

:func:`group_lines` keeps a group's runs that a rule stopped early
(:mod:`murmur.metrics.stops`) out of that mean: the group's curve is over its
finished seeds ("dsgd (3 of 5 seeds)"), and each stopped run is a curve of its own
that ends where the run stopped, named once per group: "dsgd (collapsed at 400)" for
a run alone, "dsgd: 2 of 5 seeds collapsed (chance, at 400 and 500)" for seeds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

from murmur.metrics.stops import Stop, status_text, stop_of, stops_note
from murmur.reporting.report import Run, run_label
from murmur.reporting.seed_groups import SeedGroup, group_runs
from murmur.reporting.statistics import CONFIDENCE

__all__ = [
    "Curve",
    "GroupLine",
    "plot_groups",
    "group_label",
    "group_lines",
    "seed_curve",
    "stopped_label",
]

Values = Sequence[float] | np.ndarray
Series = tuple[Values, Values]
"""The x and y values of one run, in record order."""


@dataclass(frozen=True)
class Curve:
    """A line over ``x``: ``y`` the mean over ``seeds`` runs, ``low`` / ``high`` the 95 %
    confidence interval of that mean (equal to ``y`` for one run)."""

    x: np.ndarray
    y: np.ndarray
    low: np.ndarray
    high: np.ndarray
    seeds: int
    measured: bool = True
    """Whether every point is a measurement of every member (one run, or seeds that
    share their x values); False where members were interpolated."""
    stopped: bool = False
    """The curve of one run that a rule stopped early: it ends where the run stopped."""


@dataclass(frozen=True)
class GroupLine:
    """One line a plot draws for a seed group: its legend entry ("_nolegend_": none),
    its curve and the runs behind it (the finished seeds of a mean, or one run that
    stopped early)."""

    label: str
    curve: Curve
    runs: tuple[Run, ...]


def plot_groups(runs: Sequence[Run]) -> list[SeedGroup]:
    """``runs`` by seed group, in the order of each group's first run."""
    seeded = [run for run in runs if _has_seed(run)]
    position = {id(run): index for index, run in enumerate(runs)}
    groups = [(min(position[id(run)] for run in group.runs), group) for group in group_runs(seeded)]
    groups += [
        (index, SeedGroup(run_label(run.summary), (run,)))
        for index, run in enumerate(runs)
        if not _has_seed(run)
    ]
    return [group for _, group in sorted(groups, key=lambda pair: pair[0])]


def _has_seed(run: Run) -> bool:
    seed = run.summary.get("seed")
    return isinstance(seed, int) and not isinstance(seed, bool)


def group_label(label: str, seeds: int, of: int | None = None) -> str:
    """A legend entry: the label, with ``(n seeds)`` for a curve over several, and
    ``(n of m seeds)`` for a curve over n of a group's m seeds (the others stopped)."""
    if of is not None and of > seeds:
        return f"{label} ({seeds} of {of} seeds)"
    return f"{label} ({seeds} seeds)" if seeds > 1 else label


def stopped_label(group: SeedGroup) -> str:
    """The legend entry of a group's runs that stopped early: "dsgd (collapsed at 400)"
    for a run alone, "dsgd: 2 of 5 seeds collapsed (chance, at 400 and 500)" for seeds."""
    stops = _stops(group)
    if len(group.runs) == 1 and stops:
        return f"{group.label} ({status_text(stops[0])})"
    return f"{group.label}: {stops_note(stops, len(group.runs))}"


def group_lines(group: SeedGroup, series: Sequence[Series | None]) -> list[GroupLine]:
    """A group's lines from its runs' series (``series[i]`` of ``group.runs[i]``; None:
    the run has none): the curve over its finished seeds, then a curve for each run
    that stopped early, the first named by :func:`stopped_label`."""
    members = zip(group.runs, series, strict=True)
    pairs = [(run, member) for run, member in members if member is not None]
    done = [(run, member) for run, member in pairs if stop_of(run.summary) is None]
    lines = []
    curve = seed_curve([member for _, member in done])
    if curve is not None:
        of = len(group.runs) if _stops(group) else None
        runs = tuple(run for run, member in done if _clean(member)[0].size)
        lines.append(GroupLine(group_label(group.label, curve.seeds, of), curve, runs))
    for run, member in pairs:
        alone = seed_curve([member]) if stop_of(run.summary) is not None else None
        if alone is not None:
            named = any(line.curve.stopped for line in lines)
            label = "_nolegend_" if named else stopped_label(group)
            lines.append(GroupLine(label, replace(alone, stopped=True), (run,)))
    return lines


def _stops(group: SeedGroup) -> list[Stop]:
    return [stop for run in group.runs if (stop := stop_of(run.summary)) is not None]


def seed_curve(series: Sequence[Series]) -> Curve | None:
    """The curve of a group's series (see the module docstring); None when no member
    has a point, or when the members' x ranges do not overlap."""
    members = [member for member in map(_clean, series) if member[0].size]
    if not members:
        return None
    if len(members) == 1:
        x, y = members[0]
        return Curve(x, y, y, y, 1)
    start = max(float(x[0]) for x, _ in members)
    end = min(float(x[-1]) for x, _ in members)
    grid = np.unique(np.concatenate([x for x, _ in members]))
    grid = grid[(grid >= start) & (grid <= end)]
    if not grid.size:
        return None
    values = np.vstack([np.interp(grid, x, y) for x, y in members])
    measured = all(np.array_equal(x, grid) for x, _ in members)
    mean = values.mean(axis=0)
    count = len(members)
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, count - 1)) * values.std(axis=0, ddof=1)
    half /= np.sqrt(count)
    return Curve(grid, mean, mean - half, mean + half, count, measured)


def _clean(series: Series) -> tuple[np.ndarray, np.ndarray]:
    """Finite points sorted by x; of points at the same x the last one in record order."""
    x = np.asarray(series[0], dtype=float)
    y = np.asarray(series[1], dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    order = np.argsort(x, kind="stable")[::-1]  # the last of equal x first
    x, first = np.unique(x[order], return_index=True)
    return x, y[order][first]
