"""Runs that differ only in their seed, grouped: what tables and plots aggregate.

Two finished runs belong to one group when they carry the same label (their
summary's name, else the algorithm) and their saved ``config.toml`` files are
equal once ``run.seed`` and ``run.seeds`` are left out. A run whose folder has no
readable ``config.toml`` is a group of its own. Groups keep the order in which
their first run comes; within a group runs are sorted by seed.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass

from murmur.reporting.report import Run, run_label


@dataclass(frozen=True)
class SeedGroup:
    """The runs of one configuration over several seeds."""

    label: str
    runs: tuple[Run, ...]

    @property
    def seeds(self) -> list[int]:
        return [int(run.summary["seed"]) for run in self.runs]


def group_runs(runs: Sequence[Run]) -> list[SeedGroup]:
    """``runs`` grouped by configuration, seeds apart; see the module docstring."""
    groups: dict[str, list[Run]] = {}
    labels: dict[str, str] = {}
    for run in runs:
        label = run_label(run.summary)
        key = json.dumps([label, _config_without_seed(run)], sort_keys=True, default=str)
        groups.setdefault(key, []).append(run)
        labels[key] = label
    return [
        SeedGroup(labels[key], tuple(sorted(members, key=lambda run: int(run.summary["seed"]))))
        for key, members in groups.items()
    ]


def _config_without_seed(run: Run) -> object:
    """The run's saved config without its seeds; its folder where it has none."""
    try:
        config = tomllib.loads((run.path / "config.toml").read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return str(run.path.resolve())
    section = config.get("run")
    if isinstance(section, dict):
        section.pop("seed", None)
        section.pop("seeds", None)
    return config
