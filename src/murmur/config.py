"""Typed configuration: dataclass sections, TOML presets, ``--set`` overrides.

A run is described by eight sections::

    [run]        seed, iterations, eval_every, threads, checkpoint_every
    [data]       dataset, root, partition, labels_per_agent, dirichlet_alpha, batch_size,
                 allow_missing_classes, validation, validation_seed; a file of your
                 own: path, test_path, test_fraction, validation_path, label_column,
                 task, standardize, sha256
    [model]      name, hidden
    [topology]   graph, agents, degree, probability, rows, edges_file, varying, every
    [timing]     the virtual clock: compute speed, stragglers, latency, bandwidth
    [faults]     faults the simulator injects: drop (lost messages), link_down,
                 link_up (links that fail), crashes, crash_at, rejoin_at, rejoin_from
    [collapse]   the rules that stop a run early once it diverged or collapsed: enabled,
                 warmup, patience, chance_margin, loss_factor, consensus_*
    [algorithm]  name, then that algorithm's own parameters (the mini-batch ones: the
                 step, and the local optimizer: optimizer, momentum, weight_decay, ...)

Presets are TOML files shipped in ``murmur/presets``. A preset may start from
another one (``extends = "other"``) and may instead of one run name several
presets to run one after the other and compare (``compare = ["a", "b"]``; an
entry may also be a table ``{ preset = "a", label = "a-2", set = ["k=v"] }``).
Every value is type-checked, unknown keys are refused with the list of valid
ones, and the resolved config of each run is saved as ``config.toml``.

A config that lists ``run.seeds`` (``murmur run --seeds 0-4``) stands for one run
per seed: :func:`load_experiment` expands it, each run with its own ``run.seed``
and no ``run.seeds``, so that each saved ``config.toml`` repeats exactly its run.
"""

from __future__ import annotations

import dataclasses
import errno
import math
import stat
import tomllib
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import tomli_w

from murmur.errors import UsageError, shortened
from murmur.plugins import load_factory, load_installed, load_plugins, resolved
from murmur.registry import ALGORITHMS
from murmur.sections import (
    AlgorithmConfig,
    CollapseConfig,
    DataConfig,
    FaultsConfig,
    ModelConfig,
    RunConfig,
    TimingConfig,
    TopologyConfig,
)
from murmur.textfiles import read_utf8

FLOAT32_MAX = 3.4028234663852886e38
"""Largest float32: parameters and data are float32, so every number must fit."""

SECTIONS = ("run", "data", "model", "topology", "timing", "faults", "collapse", "algorithm")


@dataclass(frozen=True)
class Config:
    """A complete, validated description of one run."""

    run: RunConfig = field(default_factory=RunConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    topology: TopologyConfig = field(default_factory=TopologyConfig)
    timing: TimingConfig = field(default_factory=TimingConfig)
    faults: FaultsConfig = field(default_factory=FaultsConfig)
    collapse: CollapseConfig = field(default_factory=CollapseConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """The config as plain TOML-ready values, ``algorithm.name`` included."""
        out: dict[str, dict[str, Any]] = {}
        for name in SECTIONS:
            section = getattr(self, name)
            values = {f.name: _plain(getattr(section, f.name)) for f in dataclasses.fields(section)}
            if name == "algorithm":
                values = {"name": section.name, **values}
            out[name] = values
        return out

    def to_toml(self) -> str:
        return tomli_w.dumps(self.to_dict())

    def replace(self, **overrides: str) -> Config:
        """A copy with ``section.key`` overrides, e.g. ``replace(**{"run.seed": "3"})``."""
        return build_config(
            apply_overrides(self.to_dict(), [f"{k}={v}" for k, v in overrides.items()])
        )


@dataclass(frozen=True)
class Experiment:
    """What ``murmur run`` executes: one or more labelled runs of a preset.

    A run whose config lists ``run.seeds`` is expanded into one run per seed (its
    ``run.seed`` that seed, its ``run.seeds`` empty); ``seeds`` holds each run's seed
    where it came from such a list, None where not (empty: no run did).
    ``notes``: lines worth telling the user, e.g. a ``--set`` that only some members
    of a comparison have a key for.
    """

    name: str
    description: str
    runs: tuple[tuple[str, Config], ...]
    seeds: tuple[int | None, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def seeded(self) -> bool:
        """Whether some run was expanded from a list of seeds."""
        return any(seed is not None for seed in self.seeds)

    def folder(self, index: int) -> str:
        """Where run ``index`` is written, relative to the experiment's folder ("" for
        that folder itself): ``<label>`` for a member of a comparison, ``seed-<n>`` for
        a seed of one preset, ``<label>/seed-<n>`` for a seed of a member."""
        label = self.runs[index][0]
        seed = self.seeds[index] if self.seeds else None
        parts = [label] if len({name for name, _ in self.runs}) > 1 else []
        if seed is not None:
            parts.append(f"seed-{seed}")
        return "/".join(parts)


# ---------------------------------------------------------------- building


def build_config(raw: Mapping[str, Any]) -> Config:
    """Check a nested ``{section: {key: value}}`` mapping and build a Config."""
    unknown = sorted(set(raw) - set(SECTIONS))
    if unknown:
        raise UsageError(
            f"unknown config section '{unknown[0]}'; valid sections: {', '.join(SECTIONS)}"
        )
    for name, values in raw.items():
        if isinstance(values, list) and values and all(isinstance(v, Mapping) for v in values):
            raise UsageError(
                f"[[{name}]] is an array of tables; write the section once as [{name}]"
            )
        if not isinstance(values, Mapping):
            raise UsageError(f"[{name}] must be a table of key = value pairs, not {_shown(values)}")
    sections: dict[str, Any] = {}
    for name, cls in (
        ("run", RunConfig),
        ("data", DataConfig),
        ("model", ModelConfig),
        ("topology", TopologyConfig),
        ("timing", TimingConfig),
        ("faults", FaultsConfig),
        ("collapse", CollapseConfig),
    ):
        sections[name] = _build_section(name, cls, raw.get(name, {}))
    sections["model"], sections["run"] = _with_factory(sections["model"], sections["run"])
    sections["run"] = _with_plugins(sections["run"])
    if sections["model"].name == "factory":
        load_factory(sections["model"])
    algorithm = dict(raw.get("algorithm", {}))
    algorithm_name = algorithm.pop("name", None)
    if algorithm_name is None:
        raise UsageError("the config has no algorithm.name; set one, e.g. algorithm.name=detsgrad")
    sections["algorithm"] = _build_section(
        "algorithm", algorithm_config_class(str(algorithm_name)), algorithm
    )
    return Config(**sections)


def _with_factory(model: ModelConfig, run: RunConfig) -> tuple[ModelConfig, RunConfig]:
    """A factory's file made absolute (relative to the current directory) and its file
    or module added to the run's plugins, so that every process imports it."""
    if model.name != "factory":
        return model, run
    spec, function = model.factory_parts()
    spec = resolved(spec, Path.cwd())
    model = dataclasses.replace(model, factory=f"{spec}:{function}")
    plugins = tuple(resolved(given, Path.cwd()) for given in run.plugins)
    if spec not in plugins:
        run = dataclasses.replace(run, plugins=(*plugins, spec))
    return model, run


def _with_plugins(run: RunConfig) -> RunConfig:
    """``run`` with its plugins' paths made absolute (relative ones are relative to the
    current directory), once they are imported and checked against their digests."""
    specs = tuple(resolved(spec, Path.cwd()) for spec in run.plugins)
    load_plugins(specs, run.plugins_sha256)
    return run if specs == run.plugins else dataclasses.replace(run, plugins=specs)


def algorithm_config_class(name: str) -> type[AlgorithmConfig]:
    """The parameter dataclass of the algorithm called ``name`` (installed plugins
    imported first)."""
    load_installed()
    if name not in ALGORITHMS:
        raise UsageError(
            f"unknown algorithm.name '{name}'; valid names: {', '.join(sorted(ALGORITHMS))} "
            "(an algorithm of your own: --plugin FILE, or plugins in the TOML file)"
        )
    return ALGORITHMS[name].config


def _build_section(section: str, cls: type, values: Any) -> Any:
    if not isinstance(values, Mapping):
        raise UsageError(f"[{section}] must be a table of key = value pairs")
    hints = typing.get_type_hints(cls)
    valid = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in values.items():
        if key not in valid:
            where = f"{section}.{key}"
            if issubclass(cls, AlgorithmConfig):
                where += f" (for algorithm '{cls.name}')"
            raise UsageError(f"unknown key {where}; valid keys: {', '.join(valid) or 'none'}")
        kwargs[key] = _coerce(f"{section}.{key}", hints[key], value)
    return cls(**kwargs)


def _coerce(key: str, hint: Any, value: Any) -> Any:
    """Check ``value`` against the field type ``hint``; return it in that type."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        choices = typing.get_args(hint)
        if value not in choices:
            options = ", ".join(repr(c) for c in choices)
            raise UsageError(f"{key} must be one of {options}, not {_shown(value)}")
        return value
    if origin is tuple:
        (item,) = {a for a in typing.get_args(hint) if a is not Ellipsis}
        if not isinstance(value, list | tuple):
            raise UsageError(f"{key} must be a list, e.g. [100, 50], not {_shown(value)}")
        return tuple(_coerce(f"{key}[{i}]", item, v) for i, v in enumerate(value))
    if origin in (typing.Union, types.UnionType):
        for member in typing.get_args(hint):
            try:
                return _coerce(key, member, value)
            except UsageError:
                continue
        kinds = " or ".join(_describe(member) for member in typing.get_args(hint))
        raise UsageError(f"{key} must be {kinds}, not {_shown(value)}")
    if hint is bool:
        if not isinstance(value, bool):
            raise UsageError(f"{key} must be true or false, not {_shown(value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UsageError(f"{key} must be an integer, not {_shown(value)}")
        if not -(2**63) <= value < 2**63:
            raise UsageError(f"{key} must be an integer from -2**63 to 2**63 - 1, not {value}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise UsageError(f"{key} must be a number, not {_shown(value)}")
        if not math.isfinite(value) or abs(value) > FLOAT32_MAX:
            raise UsageError(
                f"{key} must be a finite number within float32's range "
                f"(magnitude at most {FLOAT32_MAX:.4g}), not {_shown(value)}"
            )
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise UsageError(f"{key} must be a string, not {_shown(value)}")
        if "\0" in value:
            raise UsageError(f"{key} must not hold a NUL character, not {_shown(value)}")
        return value
    raise TypeError(f"unsupported config field type {hint!r} for {key}")


def _describe(hint: Any) -> str:
    """How an error names the values of a field type: "a number", "'auto'"."""
    if typing.get_origin(hint) is Literal:
        return " or ".join(repr(choice) for choice in typing.get_args(hint))
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    return names.get(hint, str(hint))


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


# ---------------------------------------------------------------- overrides


def apply_overrides(raw: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Apply ``section.key=value`` strings to a raw nested mapping (values as TOML)."""
    result = {
        name: dict(values) if isinstance(values, Mapping) else values
        for name, values in raw.items()
    }
    explicit = set()
    for item in overrides:
        section, key, value = parse_override(item)
        values = result.setdefault(section, {})
        if not isinstance(values, dict):
            raise UsageError(
                f"[{section}] must be a table of key = value pairs, not {_shown(values)}"
            )
        values[key] = value
        explicit.add((section, key))
    if ("algorithm", "name") in explicit:
        # Switching algorithm keeps the parameters the new one shares (a, b, ...).
        valid = {
            f.name
            for f in dataclasses.fields(algorithm_config_class(str(result["algorithm"]["name"])))
        }
        result["algorithm"] = {
            key: value
            for key, value in result["algorithm"].items()
            if key == "name" or key in valid or ("algorithm", key) in explicit
        }
    return result


def parse_override(item: str) -> tuple[str, str, Any]:
    """Split ``section.key=value``; the value is read as TOML, else as a plain string."""
    name, sep, text = item.partition("=")
    section, dot, key = name.strip().partition(".")
    if not sep or not dot or not section or not key:
        raise UsageError(f"override '{item}' must look like section.key=value")
    if section not in SECTIONS:
        raise UsageError(
            f"unknown config section '{section}' in '{item}'; valid sections: {', '.join(SECTIONS)}"
        )
    text = text.strip()
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        value = text
    return section, key, value


# ---------------------------------------------------------------- presets


def preset_names() -> list[str]:
    """Names of the presets shipped with murmur, sorted."""
    folder = resources.files("murmur") / "presets"
    return sorted(p.name[: -len(".toml")] for p in folder.iterdir() if p.name.endswith(".toml"))


def read_preset(source: str) -> tuple[str, dict[str, Any]]:
    """Read a preset by name or a TOML file by path, as given on the command line;
    follows ``extends``.

    A name that looks like a path (it ends in ``.toml`` or holds a ``/``) is a file;
    a packaged preset's name is that preset even where a file or folder of the same
    name sits in the current directory (:func:`shadowed_path` says so); any other
    name is a file if there is one. Inside a preset or file, ``extends`` and
    ``compare`` name packaged presets, or files by a path-like name, read relative
    to the file that names them: never whatever the current directory holds.
    """
    return _read_preset(source, seen=(), within=None)


def shadowed_path(source: str) -> str | None:
    """One line for a command-line ``source`` that names a packaged preset and also a
    file or folder here, which it does not mean; None otherwise."""
    if _looks_like_path(source) or source not in preset_names():
        return None
    if _path_kind(Path(source), source) == "missing":
        return None
    return (
        f"'{source}' is the packaged preset; the {_path_kind(Path(source), source)} "
        f"./{source} here is not read (write ./{source} to use it)"
    )


def _looks_like_path(source: str) -> bool:
    """Whether a preset name is a path: it ends in .toml or names a folder."""
    return source.endswith(".toml") or "/" in source


def _read_preset(
    source: str, seen: tuple[tuple[str, str], ...], within: Path | None | Literal["preset"]
) -> tuple[str, dict[str, Any]]:
    """``seen``: (identity, as written) of the presets that extend this one, in order;
    ``within``: the file (or ``"preset"``: the packaged preset) whose ``extends`` or
    ``compare`` names ``source``, None on the command line."""
    if not source.strip():
        raise UsageError(
            f"unknown preset {_shown(source)}: a preset name cannot be empty; valid presets: "
            f"{', '.join(preset_names())} (or give a path to a .toml file)"
        )
    path = _preset_path(source, within)
    identity = str(path.resolve()) if path is not None else source
    if identity in (known for known, _ in seen):
        chain = " -> ".join(written for _, written in seen)
        raise UsageError(f"presets extend each other in a loop: {chain} -> {source}")
    if path is not None:
        name, text = path.stem, read_utf8(path, f"config file {source}")
    else:
        name, text = source, _packaged_text(source, within)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise UsageError(f"{source} is not valid TOML: {error}") from None
    raw["compare"] = _members_within(raw, source, path)
    if raw["compare"] is None:
        del raw["compare"]
    plugins = _plugins_within(raw, source, path)
    parent = raw.pop("extends", None)
    if parent is not None:
        if not isinstance(parent, str) or not parent or "\0" in parent:
            raise UsageError(f"{source}: 'extends' must be a preset name or a .toml path")
        _, base = _read_preset(parent, seen + ((identity, source),), path or "preset")
        base.pop("description", None)
        plugins = [*base.pop("plugins", []), *plugins]
        raw = _merge(base, raw)
    if plugins:
        raw["plugins"] = list(dict.fromkeys(plugins))
    return name, raw


def _plugins_within(raw: dict[str, Any], source: str, path: Path | None) -> list[str]:
    """The file's top-level ``plugins`` list, taken out of ``raw``, and its
    ``run.plugins`` and ``model.factory``, each file's path made absolute against the
    file's folder."""
    folder = path.parent if path is not None else Path.cwd()
    plugins = raw.pop("plugins", [])
    if not isinstance(plugins, list):
        raise UsageError(f"{source}: 'plugins' must be a list of .py files or module names")
    run = raw.get("run")
    if isinstance(run, Mapping) and isinstance(run.get("plugins"), list):
        raw["run"] = {**run, "plugins": [resolved(spec, folder) for spec in run["plugins"]]}
    model = raw.get("model")
    factory = model.get("factory") if isinstance(model, Mapping) else None
    if isinstance(factory, str) and ":" in factory and isinstance(model, Mapping):
        spec, _, function = factory.rpartition(":")
        raw["model"] = {**model, "factory": f"{resolved(spec, folder)}:{function}"}
    return [resolved(spec, folder) for spec in plugins]


def _fold_plugins(raw: dict[str, Any], plugins: Sequence[str]) -> dict[str, Any]:
    """``raw`` with ``plugins`` and its top-level ``plugins`` list added to its
    ``run.plugins`` (each once), imported already so that overrides may name what
    they register."""
    specs = [*plugins, *raw.pop("plugins", [])]
    run = raw.get("run", {})
    if not specs or not isinstance(run, Mapping):
        return raw
    listed = run.get("plugins", [])
    listed = listed if isinstance(listed, list) else []
    merged = list(dict.fromkeys(resolved(spec, Path.cwd()) for spec in [*specs, *listed]))
    load_plugins(merged)
    return {**raw, "run": {**run, "plugins": merged}}


def _preset_path(source: str, within: Path | None | Literal["preset"]) -> Path | None:
    """The file ``source`` names, or None where it names a packaged preset; UsageError
    for a folder or anything else that is not a file."""
    if within is not None and not _looks_like_path(source):
        return None  # inside a preset: a bare name is a packaged preset
    if within is None and not _looks_like_path(source) and source in preset_names():
        return None
    path = Path(source)
    if isinstance(within, Path) and not path.is_absolute():
        path = within.parent / path  # relative to the file that names it
    kind = _path_kind(path, source)
    if kind == "folder":
        raise UsageError(f"{source} is a folder, not a preset name or a .toml file")
    if kind == "other":
        raise UsageError(f"{source} is not a regular file, not a preset name or a .toml file")
    if kind == "missing" and not _looks_like_path(source):
        return None  # an unknown name: refused with the list of presets
    return path


def _packaged_text(source: str, within: Path | None | Literal["preset"]) -> str:
    """The text of the packaged preset ``source``; UsageError listing them otherwise."""
    if source not in preset_names():
        inside = " (inside a preset, write a file as ./name.toml)" if within is not None else ""
        raise UsageError(
            f"unknown preset {_shown(source)}; valid presets: {', '.join(preset_names())} "
            f"(or give a path to a .toml file){inside}"
        )
    return (resources.files("murmur") / "presets" / f"{source}.toml").read_text()


def _members_within(raw: dict[str, Any], source: str, path: Path | None) -> Any:
    """``raw``'s ``compare`` entries with each file's path made relative to the file
    that names it (entries that are not strings or tables are checked later)."""
    members = raw.get("compare")
    if not isinstance(members, list) or path is None:
        return members
    folder = path.parent

    def within_folder(member: object) -> object:
        entry = dict(member) if isinstance(member, Mapping) else {"preset": member}
        preset = entry.get("preset")
        if not isinstance(preset, str) or not _looks_like_path(preset):
            return member
        if not Path(preset).is_absolute():
            entry["preset"] = str(folder / preset)
        return entry

    return [within_folder(member) for member in members]


def _path_kind(path: Path, source: str) -> Literal["file", "folder", "other", "missing"]:
    """What ``source`` names on disk; a path too long to look up is a UsageError."""
    try:
        mode = path.stat().st_mode
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            raise UsageError(
                f"the path {_shown(source)} is too long ({len(source)} characters)"
            ) from None
        return "missing"
    if stat.S_ISDIR(mode):
        return "folder"
    return "file" if stat.S_ISREG(mode) else "other"


def _shown(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters, for one-line error messages."""
    return shortened(repr(value), limit)


def _merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    algorithm = top.get("algorithm", {})
    if "name" in algorithm and algorithm["name"] != merged.get("algorithm", {}).get("name"):
        merged.pop("algorithm", None)  # another algorithm: its own parameters only
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(dict(merged[key]), value)
        else:
            merged[key] = value
    return merged


def load_experiment(
    source: str, overrides: Sequence[str] = (), plugins: Sequence[str] = ()
) -> Experiment:
    """Resolve a preset name or TOML path plus overrides into validated runs;
    ``plugins`` (absolute paths or module names): more plugins for every run."""
    name, raw = read_preset(source)
    description = str(raw.pop("description", ""))
    members = raw.pop("compare", None)
    plugins = [*plugins, *raw.pop("plugins", [])]
    if members is None:
        config = build_config(apply_overrides(_fold_plugins(raw, plugins), overrides))
        return _expanded(Experiment(name, description, ((config.algorithm.name, config),)))
    if raw:
        raise UsageError(f"preset {name} has 'compare' and also sections {sorted(raw)}; keep one")
    if not isinstance(members, list) or not members:
        raise UsageError(f"preset {name}: 'compare' must be a non-empty list of presets")
    runs = []
    for member in members:
        preset, label, settings = _compare_member(name, member)
        _, member_raw = _read_preset(preset, seen=(), within="preset")
        member_raw.pop("description", None)
        runs.append((label, apply_overrides(_fold_plugins(member_raw, plugins), settings)))
    labels = [label for label, _ in runs]
    if len(set(labels)) != len(labels):
        raise UsageError(f"preset {name}: 'compare' labels must differ, got {labels}")
    configs, notes = _apply_to_members(runs, overrides)
    return _expanded(Experiment(name, description, tuple(configs), notes=tuple(notes)))


def _expanded(experiment: Experiment) -> Experiment:
    """``experiment`` with each run that lists ``run.seeds`` made one run per seed."""
    runs: list[tuple[str, Config]] = []
    seeds: list[int | None] = []
    for label, config in experiment.runs:
        if not config.run.seeds:
            runs.append((label, config))
            seeds.append(None)
        for seed in config.run.seeds:
            run = dataclasses.replace(config.run, seed=seed, seeds=())
            runs.append((label, dataclasses.replace(config, run=run)))
            seeds.append(seed)
    if all(seed is None for seed in seeds):
        return experiment
    return dataclasses.replace(experiment, runs=tuple(runs), seeds=tuple(seeds))


def parse_seeds(text: str) -> tuple[int, ...]:
    """The seeds of ``--seeds``: ``0-4`` (0 to 4), ``0,3,7``, or both, ``0-2,10``."""
    seeds: list[int] = []
    for item in text.split(","):
        first, dash, last = item.strip().partition("-")
        if not _is_seed(first) or (dash and not _is_seed(last)):
            raise UsageError(
                f"--seeds {_shown(text)}: write seeds as 0-4 (a range), 0,3,7 (a list) "
                "or both, 0-2,10: whole numbers from 0"
            )
        low, high = int(first), int(last) if dash else int(first)
        if high < low:
            raise UsageError(f"--seeds {_shown(text)}: the range {item.strip()} runs backwards")
        if len(seeds) + high - low >= MAX_SEEDS:
            raise UsageError(f"--seeds {_shown(text)}: at most {MAX_SEEDS} seeds")
        seeds.extend(range(low, high + 1))
    repeated = sorted({seed for seed in seeds if seeds.count(seed) > 1})
    if repeated:
        raise UsageError(f"--seeds {_shown(text)} names seed {repeated[0]} twice")
    return tuple(seeds)


MAX_SEEDS = 1000
"""The most seeds ``--seeds`` accepts: more is a typo (``0-10000``), not an experiment."""


def _is_seed(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) < 20 and int(text) < 2**63


def _compare_member(name: str, member: Any) -> tuple[str, str, list[str]]:
    """A ``compare`` entry: a preset name, or ``{preset, label, set = ["k=v", ...]}``."""
    if isinstance(member, str):
        return member, _default_label(member), []
    if not isinstance(member, Mapping) or "preset" not in member:
        raise UsageError(
            f"preset {name}: each 'compare' entry is a preset name or a table "
            f"{{ preset = ..., label = ..., set = [...] }}, not {_shown(member)}"
        )
    unknown = sorted(set(member) - {"preset", "label", "set"})
    if unknown:
        raise UsageError(
            f"preset {name}: unknown key '{unknown[0]}' in a 'compare' entry; "
            "valid keys: preset, label, set"
        )
    settings = member.get("set", [])
    if not isinstance(settings, list) or not all(isinstance(item, str) for item in settings):
        raise UsageError(f"preset {name}: 'set' in a 'compare' entry must be a list of strings")
    preset = str(member["preset"])
    label = str(member.get("label", _default_label(preset)))
    if not label or "/" in label or label.startswith("."):
        raise UsageError(f"preset {name}: compare label {_shown(label)} cannot name a folder")
    return preset, label, settings


def _default_label(preset: str) -> str:
    """A compare member's label when it gives none: the preset's name, or the file's."""
    return Path(preset).stem if _looks_like_path(preset) else preset


def _apply_to_members(
    runs: list[tuple[str, dict[str, Any]]], overrides: Sequence[str]
) -> tuple[list[tuple[str, Config]], list[str]]:
    """Apply each override to every member that has the key (algorithm keys differ);
    also a note for each override that some members have no key for."""
    configs = [(label, build_config(raw)) for label, raw in runs]
    notes = []
    for item in overrides:
        section, key, _ = parse_override(item)
        applied, skipped, first_error = [], [], None
        for index, (label, config) in enumerate(configs):
            try:
                configs[index] = (label, build_config(apply_overrides(config.to_dict(), [item])))
                applied.append(label)
            except UsageError as error:
                if section != "algorithm" or not str(error).startswith("unknown key"):
                    raise
                first_error = first_error or error
                skipped.append(label)
        if not applied and first_error is not None:
            raise first_error
        if skipped:
            verb = "has" if len(skipped) == 1 else "have"
            notes.append(
                f"--set {item.strip()} applies to {', '.join(applied)}; "
                f"{', '.join(skipped)} {verb} no such key"
            )
    return configs, notes


def same_config(saved: str, config: Config) -> bool:
    """Whether the TOML text ``saved`` (a run folder's config.toml, a checkpoint's
    copy) describes ``config``: the same text, or the same values once keys that a
    later murmur added take their defaults (so that older runs can be resumed)."""
    if saved == config.to_toml():
        return True
    try:
        return build_config(tomllib.loads(saved)) == config
    except (tomllib.TOMLDecodeError, UsageError):
        return False


def save_config(config: Config, path: Path) -> None:
    """Write the resolved config as TOML; ``murmur run path`` reproduces the run."""
    path.write_text(config.to_toml())
