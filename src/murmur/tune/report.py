"""``tuning.md``: what a tune tried and chose, member by member, with one plot per
tuned key of the validation score against it (``LABEL-KEY.png`` beside it).

A plot draws each complete trial as a point, the chosen one as a star, and each
pruned trial at the last figure it reported, as an x: its run was stopped there, so
the figure is not a score. Failed trials have no figure and are in the table alone.
"""

from __future__ import annotations

import math
from pathlib import Path

from matplotlib.axes import Axes
from optuna.trial import FrozenTrial

from murmur.reporting.canvas import colour, finish, new_figure, save
from murmur.tune.bytes_limit import BYTES, describe_limit
from murmur.tune.members import Search
from murmur.tune.study import Tuned, point_text, state_of, trial_seconds, within_limit
from murmur.tune.tuned_file import FILE, member_lines

REPORT = "tuning.md"


def write_report(search: Search, results: list[Tuned], folder: Path) -> Path:
    """Write ``folder/tuning.md`` and its plots; returns its path."""
    lines = [f"# Tuning {search.name}", "", *_preamble(search), "", *overview(results)]
    for result in results:
        lines += ["", *_member_section(search, result, folder)]
    path = folder / REPORT
    path.write_text("\n".join(lines) + "\n")
    return path


def _preamble(search: Search) -> list[str]:
    seeds = f"seed{'s' * (len(search.seeds) > 1)} {', '.join(map(str, search.seeds))}"
    objective = search.members[0].objective.name if search.members else "validation score"
    pruning = (
        "trials that fell behind the median of the earlier ones at the same evaluation were pruned"
        if search.pruning
        else "no trial was pruned for falling behind"
    )
    limit = (
        f" Bytes limit (`--max-bytes-vs-dsgd`): {describe_limit(search.max_bytes)}; a trial "
        "that sent more (its runs' bytes over DSGD's, mean over seeds) is not chosen."
        if search.max_bytes is not None
        else ""
    )
    return [
        f"Each member's steps were chosen on its validation split, never on the test set: "
        f"the objective is its {objective}, the mean over {seeds}. "
        f"Sampler: {search.sampler}; {pruning}; a run that a rule of `[collapse]` stopped "
        f"scores nothing (pruned), nor does a run that failed.{limit}",
        "",
        f"`{FILE}` runs each member at its chosen steps, on the same data split; its test "
        f"figures: `murmur run {FILE} --seeds 0-4`.",
    ]


def overview(results: list[Tuned]) -> list[str]:
    """A table of each member's chosen point, its score and its trials."""
    rows = [
        "| member | chosen | validation | trials | complete | pruned | failed | wall s |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for result in results:
        chosen = result.chosen
        shown = "-"
        if chosen is not None:
            shown = result.member.objective.shown(float(chosen.value or 0.0))
        rows.append(
            f"| {result.member.label} | {point_text(chosen) if chosen is not None else '-'} | "
            f"{shown} | {len(result.trials)} | {result.count('complete')} | "
            f"{result.count('pruned')} | {result.count('failed')} | {result.seconds:.1f} |"
        )
    return rows


def _member_section(search: Search, result: Tuned, folder: Path) -> list[str]:
    member = result.member
    lines = [
        f"## {member.label}",
        "",
        *(f"- {line.strip()}" for line in member_lines(search, result)),
    ]
    keys = [searched.key for searched in member.space]
    sent = any(BYTES in trial.user_attrs for trial in result.trials)
    lines += [
        "",
        f"| trial | {' | '.join(keys)} | validation |{' bytes vs DSGD |' * sent} state | seconds |",
        f"|---:|{'---:|' * len(keys)}---:|{'---:|' * sent}---|---:|",
    ]
    for trial in result.trials:
        values = " | ".join(
            f"{trial.params[key]:.4g}" if key in trial.params else "-" for key in keys
        )
        mark = (
            " (chosen)"
            if result.chosen is not None and trial.number == result.chosen.number
            else ""
        )
        sent_cell = f" {_bytes(trial)} |" if sent else ""
        lines.append(
            f"| {trial.number} | {values} | {_score(result, trial)} |{sent_cell} "
            f"{_state(result, trial)}{mark} | {trial_seconds(trial):.1f} |"
        )
    for key in keys:
        name = f"{member.label}-{key}.png"
        plot_key(result, key, folder / name)
        lines += ["", f"![{member.label}: validation against algorithm.{key}]({name})"]
    return lines


def _score(result: Tuned, trial: FrozenTrial) -> str:
    """A complete trial's score; nothing for the others, whose runs did not end."""
    if state_of(trial) != "complete" or trial.value is None:
        return "-"
    return result.member.objective.shown(float(trial.value))


def _bytes(trial: FrozenTrial) -> str:
    """A trial's bytes over DSGD's, as a percentage (a pruned trial's: up to its stop)."""
    share = trial.user_attrs.get(BYTES)
    return f"{100 * float(share):.2f} %" if isinstance(share, int | float) else "-"


def _state(result: Tuned, trial: FrozenTrial) -> str:
    state = state_of(trial)
    if state == "complete" and not within_limit(trial):
        limit = float(trial.user_attrs.get("bytes_limit", 0.0))
        return f"complete, over the bytes limit ({100 * limit:.2f} % of DSGD's)"
    if state == "pruned":
        last = _last_reported(trial)
        figure = f" (last figure {result.member.objective.shown(last)})" if last is not None else ""
        return f"pruned: {trial.user_attrs.get('stopped', '')}{figure}".replace("|", "/")
    if state == "failed":
        return f"failed: {trial.user_attrs.get('failure', '')}".replace("|", "/")
    return state


def plot_key(result: Tuned, key: str, path: Path) -> None:
    """The validation score of ``result``'s trials against ``key``."""
    figure, axes = new_figure()
    member = result.member
    percent = member.objective.task == "classification"
    scale = 100.0 if percent else 1.0
    complete = _points(result.trials, key, "complete", scale)
    stopped = _points(result.trials, key, "pruned", scale)
    _scatter(axes, complete, 0, "o", "complete trials")
    _scatter(axes, stopped, 7, "x", "pruned (last figure reported)")
    chosen = result.chosen
    if chosen is not None and key in chosen.params:
        axes.scatter(
            [chosen.params[key]],
            [scale * float(chosen.value or 0.0)],
            marker="*",
            s=220,
            color=colour(3),
            label="chosen",
            zorder=3,
        )
    searched = next(searched for searched in member.space if searched.key == key)
    if searched.log:
        axes.set_xscale("log")
        axes.set_xlim(searched.low / 1.2, searched.high * 1.2)
    else:
        margin = 0.05 * (searched.high - searched.low)
        axes.set_xlim(searched.low - margin, searched.high + margin)
    finish(
        axes,
        bool(complete[0] or stopped[0]),
        "no trial reported a figure",
        f"algorithm.{key}",
        "validation accuracy (%)" if percent else "validation loss",
        f"{member.label}: validation against algorithm.{key}",
    )
    save(figure, path)


def _points(
    trials: tuple[FrozenTrial, ...], key: str, state: str, scale: float
) -> tuple[list[float], list[float]]:
    """The (key, figure) of the trials in ``state``: a complete trial's score, a pruned
    one's last reported figure."""
    xs, ys = [], []
    for trial in trials:
        if state_of(trial) != state or key not in trial.params:
            continue
        figure = trial.value if state == "complete" else _last_reported(trial)
        if figure is None or not math.isfinite(figure):
            continue
        xs.append(float(trial.params[key]))
        ys.append(scale * float(figure))
    return xs, ys


def _last_reported(trial: FrozenTrial) -> float | None:
    if not trial.intermediate_values:
        return None
    return trial.intermediate_values[max(trial.intermediate_values)]


def _scatter(
    axes: Axes, points: tuple[list[float], list[float]], index: int, marker: str, label: str
) -> None:
    if points[0]:
        axes.scatter(*points, marker=marker, color=colour(index), label=label, zorder=2)
