"""The lines a plot draws: one per seed group, the mean across its seeds with a band.

:func:`plot_groups` groups the runs of a plot as the report's tables do
(:func:`murmur.metrics.seed_groups.group_runs`: runs whose saved configs differ only
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
of the members and the band runs from the lowest to the highest member at each x.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from murmur.metrics.report import Run, run_label
from murmur.metrics.seed_groups import SeedGroup, group_runs

__all__ = ["Curve", "plot_groups", "group_label", "seed_curve"]

Values = Sequence[float] | np.ndarray
Series = tuple[Values, Values]
"""The x and y values of one run, in record order."""


@dataclass(frozen=True)
class Curve:
    """A line over ``x``: ``y`` the mean over ``seeds`` runs, ``low`` / ``high`` the
    lowest and highest of them (equal to ``y`` for one run)."""

    x: np.ndarray
    y: np.ndarray
    low: np.ndarray
    high: np.ndarray
    seeds: int
    measured: bool = True
    """Whether every point is a measurement of every member (one run, or seeds that
    share their x values); False where members were interpolated."""


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


def group_label(label: str, seeds: int) -> str:
    """A legend entry: the label, with ``(n seeds)`` for a curve over several."""
    return f"{label} ({seeds} seeds)" if seeds > 1 else label


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
    return Curve(
        grid,
        values.mean(axis=0),
        values.min(axis=0),
        values.max(axis=0),
        len(members),
        measured,
    )


def _clean(series: Series) -> tuple[np.ndarray, np.ndarray]:
    """Finite points sorted by x; of points at the same x the last one in record order."""
    x = np.asarray(series[0], dtype=float)
    y = np.asarray(series[1], dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    order = np.argsort(x, kind="stable")[::-1]  # the last of equal x first
    x, first = np.unique(x[order], return_index=True)
    return x, y[order][first]
