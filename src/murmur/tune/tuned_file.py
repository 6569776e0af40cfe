"""``tuned.toml``: a comparison file that runs each member at the steps its tune chose.

Each member is an entry of ``compare``: its own preset (a packaged one by name, a
file by its absolute path), its label, and ``set``: every key where the config tuned
differs from that preset's, the validation split and the chosen steps among them, so
that ``murmur run tuned.toml --seeds 0-4`` trains on exactly the data the steps were
tuned on. The members' plugins (``--plugin``) are the file's own top-level
``plugins``, imported before any member is read. TOML comments above say what was
searched and the validation score that chose each point. The file is read back once
written, and each member's config must be the one tuned.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomli_w

from murmur.config import SECTIONS, Config, load_experiment
from murmur.tune.bytes_limit import BYTES, describe_limit
from murmur.tune.members import Search
from murmur.tune.space import describe, with_point
from murmur.tune.study import Tuned, point_text

FILE = "tuned.toml"


def tuned_config(tuned: Tuned) -> Config:
    """The member's config at its chosen point (at its own steps where none was chosen)."""
    config = tuned.member.config
    return with_point(config, tuned.chosen.params) if tuned.chosen is not None else config


def write_tuned_file(search: Search, results: list[Tuned], folder: Path) -> Path:
    """Write ``folder/tuned.toml`` for ``results``; returns its path."""
    path = folder / FILE
    entries = [_entry(result) for result in results]
    lines = [*_header(search, results, path), ""]
    plugins = sorted({plugin for result in results for plugin in result.member.config.run.plugins})
    if plugins:
        lines.append(f"plugins = {_value(plugins)}")
    lines.append(f"description = {_value(_description(search))}")
    lines.append("compare = [")
    lines += [f"    {entry}," for entry in entries]
    lines.append("]")
    path.write_text("\n".join(lines) + "\n")
    _check_reads_back(path, results)
    return path


def _entry(result: Tuned) -> str:
    """The member's ``compare`` entry, an inline table."""
    member = result.member
    settings = differences(load_experiment(member.preset).runs[0][1], tuned_config(result))
    shown = "".join(f"        {_value(setting)},\n" for setting in settings)
    return (
        f"{{ preset = {_value(member.preset)}, label = {_value(member.label)}, set = [\n"
        f"{shown}    ] }}"
    )


def differences(base: Config, config: Config) -> list[str]:
    """``section.key=value`` for each key where ``config`` differs from ``base`` (all of
    ``[algorithm]`` where the algorithm differs), ``run.seeds`` and the plugins aside
    (the file names those at its top)."""
    old, new = base.to_dict(), config.to_dict()
    other_algorithm = old["algorithm"]["name"] != new["algorithm"]["name"]
    settings = []
    for section in SECTIONS:
        for key, value in new[section].items():
            if section == "run" and key in ("seeds", "plugins", "plugins_sha256"):
                continue
            if old[section].get(key) != value or (section == "algorithm" and other_algorithm):
                settings.append(f"{section}.{key}={_value(value)}")
    return settings


def _value(value: Any) -> str:
    """``value`` as TOML writes it, a list on one line."""
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    return tomli_w.dumps({"v": value}).removeprefix("v = ").rstrip("\n")


def _description(search: Search) -> str:
    labels = ", ".join(member.label for member in search.members)
    return f"{search.name}, each member at the steps murmur tune chose on validation: {labels}"


def _header(search: Search, results: list[Tuned], path: Path) -> list[str]:
    """The comments atop the file: how the steps were chosen, member by member."""
    seeds = ", ".join(map(str, search.seeds))
    timeout = f"{search.timeout:g} s" if search.timeout is not None else "none"
    lines = [
        f"# Steps chosen by murmur tune {search.name} on a validation split (the test set was "
        "not read).",
        f"# Test figures: murmur run {path} --seeds 0-4",
        f"# sampler: {search.sampler} (seed 0), pruning: "
        f"{'median' if search.pruning else 'none'}, seeds: {seeds}, timeout per member: "
        f"{timeout}, bytes limit: {describe_limit(search.max_bytes)}",
    ]
    for result in results:
        lines += ["#", *(f"# {line}" for line in member_lines(search, result))]
    return lines


def member_lines(search: Search, result: Tuned) -> list[str]:
    """What a member searched and what chose its point, a few lines."""
    member = result.member
    data = member.config.data
    split = (
        f"data.validation = {data.validation:g}"
        if data.validation
        else f"data.validation_path = {data.validation_path}"
    )
    counts = ", ".join(
        f"{result.count(state)} {state}" for state in ("complete", "pruned", "failed")
    )
    lines = [
        f"{member.label}: {'; '.join(describe(searched) for searched in member.space)}; "
        f"validation split {split}",
        f"  trials: {len(result.trials)} of a budget of {search.trials_of(member)} ({counts}), "
        f"{duration(result.seconds)} of runs",
    ]
    chosen = result.chosen
    if chosen is None:
        within = " within the bytes limit" if search.max_bytes is not None else ""
        lines.append(f"  no trial completed{within}: its own steps are kept")
    else:
        score = member.objective.shown(float(chosen.value or 0.0))
        share = chosen.user_attrs.get(BYTES)
        sent = f", {100 * float(share):.2f} % of DSGD's bytes" if share is not None else ""
        lines.append(
            f"  chosen: {point_text(chosen)} (trial {chosen.number}), validation {score}{sent}"
        )
    return lines


def duration(seconds: float) -> str:
    """``42.1 s``, ``3 min 12 s`` or ``1 h 4 min``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s"
    return f"{minutes // 60} h {minutes % 60} min"


def _check_reads_back(path: Path, results: list[Tuned]) -> None:
    """Load ``path`` as ``murmur run`` would; each member's config must be the one tuned."""
    runs = load_experiment(str(path)).runs
    for (label, config), result in zip(runs, results, strict=True):
        if label != result.member.label or config != tuned_config(result):
            raise RuntimeError(f"{path}: member {label} does not read back as tuned")
