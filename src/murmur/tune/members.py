"""What a ``murmur tune`` command asks for, resolved and checked before anything runs:
the members of its experiment, each with its config, its validation split, what is
searched and how it is scored, and the settings of the search.

Tuning needs a validation split: a member whose config holds none
(``data.validation = 0`` and no ``data.validation_path``) holds out
:data:`DEFAULT_VALIDATION` of its training data, and the tuned file keeps that split,
so that the runs that report test figures train on the data the steps were tuned on.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from murmur.config import (
    Config,
    Experiment,
    load_experiment,
    parse_override,
    preset_names,
    read_preset,
)
from murmur.errors import UsageError
from murmur.registry import SearchRange
from murmur.training.plan import plan
from murmur.tune.bytes_limit import BytesLimit
from murmur.tune.objective import Objective, objective_of
from murmur.tune.space import RangeSetting, check_ends, narrowed, search_space

DEFAULT_VALIDATION = 0.1
"""The share of the training data held out for validation where a config holds none."""
DEFAULT_TRIALS = 12
"""Trials per member of a TPE search when ``--trials`` gives none."""

Sampler = Literal["tpe", "grid"]


@dataclass(frozen=True)
class Member:
    """One member of the experiment, ready to tune."""

    label: str
    preset: str
    """What the tuned file's entry names: a packaged preset, or a file's absolute path."""
    config: Config
    """Its config with its validation split, its steps as its preset sets them."""
    space: tuple[SearchRange, ...]
    objective: Objective

    def grid_size(self) -> int:
        """How many points ``--sampler grid`` tries: every combination of the grids."""
        return math.prod(len(searched.grid()) for searched in self.space)


@dataclass(frozen=True, kw_only=True)
class SearchSettings:
    """How each member is searched: what ``murmur tune`` reads from ``--sampler``,
    ``--trials``, ``--timeout``, ``--no-pruning`` and ``--max-bytes-vs-dsgd``."""

    sampler: Sampler = "tpe"
    """``tpe``: Optuna's TPE, seeded; ``grid``: every point of the ranges' grids."""
    trials: int | None = None
    """Trials per member; None: :data:`DEFAULT_TRIALS`, or the whole grid for ``grid``."""
    timeout: float | None = None
    """Seconds per member, of one command: no trial starts after them."""
    pruning: bool = True
    """Stop a trial that falls behind the median of the trials before it; False: every
    trial runs to its end."""
    max_bytes: BytesLimit | None = None
    """``--max-bytes-vs-dsgd``: a share of DSGD's bytes, ``own``, or None (no limit)."""


@dataclass(frozen=True)
class Search(SearchSettings):
    """A tune: its members, its seeds, and how they are searched (its settings)."""

    name: str
    """The experiment's name (the preset's, or the file's stem)."""
    members: tuple[Member, ...]
    seeds: tuple[int, ...]
    notes: tuple[str, ...] = ()
    """Lines to tell the user: the validation split tune chose, ``--set`` notes."""

    def trials_of(self, member: Member) -> int:
        """The trials ``member`` is given in all (those of earlier commands included)."""
        if self.trials is not None:
            return self.trials
        return member.grid_size() if self.sampler == "grid" else DEFAULT_TRIALS


def plan_search(
    target: str,
    overrides: Sequence[str] = (),
    *,
    members: Sequence[str] | None = None,
    seeds: Sequence[int] = (0,),
    ranges: Sequence[RangeSetting] = (),
    settings: SearchSettings = SearchSettings(),
    plugins: Sequence[str] = (),
) -> Search:
    """The checked tune of ``target`` (a preset, a comparison or a TOML file) with
    ``overrides`` and the ``plugins`` of ``--plugin`` (recorded in every trial's
    ``run.plugins``), of the members named ``members`` (None: all), over ``seeds``, each
    searched on ``ranges`` as ``settings`` say. UsageError, in one line, for anything
    it cannot run; nothing is trained or written."""
    if any(parse_override(item)[:2] == ("run", "seeds") for item in overrides):
        raise UsageError("murmur tune takes its seeds from --seeds; drop --set run.seeds")
    if settings.max_bytes == "own" and settings.sampler == "grid":
        raise UsageError(
            "--max-bytes-vs-dsgd own measures the member's own steps in its first trial, "
            "which a grid does not run; give a percentage of DSGD's bytes with --sampler grid"
        )
    experiment = load_experiment(target, overrides, plugins)
    if experiment.seeded:
        raise UsageError(f"{target} lists run.seeds; murmur tune takes its seeds from --seeds")
    chosen = _chosen(experiment, _member_presets(target, experiment), members)
    _check_ranges(chosen, ranges)
    notes = list(experiment.notes)
    resolved = []
    for label, preset, config in chosen:
        space = narrowed(search_space(config), ranges)
        held = _with_validation(config)
        check_ends(held, space)
        plan(held)  # the data, graph and memory of its runs, before any starts
        resolved.append(Member(label, preset, held, space, objective_of(held)))
    if any(
        member.config != config for member, (_, _, config) in zip(resolved, chosen, strict=True)
    ):
        notes.append(
            f"tuning holds out data.validation = {DEFAULT_VALIDATION:g} of the training data "
            "for validation (the tuned file keeps it); set data.validation to choose the share"
        )
    return Search(
        experiment.name,
        tuple(resolved),
        tuple(seeds),
        sampler=settings.sampler,
        trials=settings.trials,
        timeout=settings.timeout,
        pruning=settings.pruning,
        max_bytes=settings.max_bytes,
        notes=tuple(notes),
    )


def _member_presets(target: str, experiment: Experiment) -> list[str]:
    """What each run of ``experiment`` comes from, as the tuned file names it: the
    entries of the target's ``compare`` list, or the target itself."""
    _, raw = read_preset(target)
    entries = raw.get("compare")
    if entries is None:
        return [_named(target)]
    presets = [
        str(entry["preset"]) if isinstance(entry, Mapping) else str(entry) for entry in entries
    ]
    if len(presets) != len(experiment.runs):
        raise ValueError(
            f"{target}: {len(presets)} compare entries for {len(experiment.runs)} runs"
        )
    return [_named(preset) for preset in presets]


def _named(preset: str) -> str:
    """A packaged preset's name as it is; a file's absolute path (as ``read_preset``
    tells them apart)."""
    if not (preset.endswith(".toml") or "/" in preset) and preset in preset_names():
        return preset
    return str(Path(preset).resolve())


def _chosen(
    experiment: Experiment, presets: list[str], members: Sequence[str] | None
) -> list[tuple[str, str, Config]]:
    """The (label, preset, config) of each member ``members`` names (all: None), in the
    experiment's order; UsageError for a name that is none of them."""
    every = [
        (label, preset, config)
        for (label, config), preset in zip(experiment.runs, presets, strict=True)
    ]
    if members is None:
        return every
    labels = [label for label, _, _ in every]
    for name in members:
        if name not in labels:
            raise UsageError(
                f"unknown member {name!r} of {experiment.name}; its members: {', '.join(labels)}"
            )
    return [member for member in every if member[0] in members]


def _check_ranges(chosen: list[tuple[str, str, Config]], ranges: Sequence[RangeSetting]) -> None:
    """UsageError for a ``--range`` that no member tunes, or one given twice."""
    keys = [setting.key for setting in ranges]
    for key in keys:
        if keys.count(key) > 1:
            raise UsageError(f"--range algorithm.{key} is given twice; give each key once")
    tuned = {searched.key for _, _, config in chosen for searched in _space_or_none(config)}
    for setting in ranges:
        if setting.key not in tuned:
            raise UsageError(
                f"--range {setting}: no member tunes algorithm.{setting.key}; they tune "
                f"{', '.join(f'algorithm.{key}' for key in sorted(tuned)) or 'nothing'}"
            )


def _space_or_none(config: Config) -> tuple[SearchRange, ...]:
    try:
        return search_space(config)
    except UsageError:
        return ()


def _with_validation(config: Config) -> Config:
    """``config`` with :data:`DEFAULT_VALIDATION` held out where it holds no validation
    split; as it is otherwise."""
    data = config.data
    if data.validation > 0 or data.validation_path:
        return config
    return dataclasses.replace(
        config, data=dataclasses.replace(data, validation=DEFAULT_VALIDATION)
    )
