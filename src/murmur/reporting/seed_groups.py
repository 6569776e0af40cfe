"""Runs that differ only in their seed, grouped: what tables and plots aggregate.

Two finished runs belong to one group when they carry the same label (their
summary's name, else the algorithm) and their saved ``config.toml`` files are
equal once ``run.seed`` and ``run.seeds`` are left out. A run whose folder has no
readable ``config.toml`` is a group of its own. Groups keep the order in which
their first run comes; within a group runs are sorted by seed.

:func:`comparison_order` puts the run folders of a comparison in the order of its
members, as ``murmur run`` trained and printed them, so that every table and figure
lists them in one order.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

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


def comparison_order(run_dirs: Sequence[Path]) -> list[Path]:
    """``run_dirs`` (kept in their order otherwise) with each comparison's runs in the
    order of its members: by the preset their summary names (the order in which presets
    first come), then by the member's place in it; a run whose preset cannot be read, or
    that is none of its members, after those that are, in the order given."""
    presets: dict[str, int] = {}
    keys = []
    for index, run_dir in enumerate(run_dirs):
        preset, label = _preset_and_label(run_dir)
        place = presets.setdefault(preset, len(presets))
        members = _members(preset)
        keys.append((place, members.index(label) if label in members else len(members), index))
    return [run_dirs[key[2]] for key in sorted(keys)]


def _preset_and_label(run_dir: Path) -> tuple[str, str]:
    """The preset and label a run's summary.json names ("" where it cannot be read)."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return "", ""
    if not isinstance(summary, dict):
        return "", ""
    return str(summary.get("preset", "")), str(summary.get("name") or summary.get("algorithm"))


@cache
def _members(preset: str) -> tuple[str, ...]:
    """The labels of ``preset``'s members in its order (none where it cannot be read)."""
    from murmur.config import load_experiment  # the config is read only for reports

    if not preset:
        return ()
    try:
        runs = load_experiment(preset).runs
    except Exception:  # a moved or broken file, a plugin's preset: the given order
        return ()
    return tuple(dict.fromkeys(label for label, _ in runs))


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
