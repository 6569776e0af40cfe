"""``murmur report``: report.md with the run table and plots (PNG, PDF or SVG), from
run folders.

Reading the folders and formatting the table are :mod:`murmur.reporting.report`;
the plots are :mod:`murmur.reporting.plots` (matplotlib is loaded only here).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from murmur.errors import UsageError
from murmur.metrics.record_types import RunSummary
from murmur.metrics.stops import stop_of
from murmur.reporting import plots
from murmur.reporting.palette import PlotStyle
from murmur.reporting.report import (
    FailedRun,
    Run,
    as_number,
    failed_line,
    format_table,
    has_column,
    has_target,
    read_run,
    run_label,
    stopped_line,
)
from murmur.reporting.seed_groups import group_runs
from murmur.reporting.seed_table import STOPPED_HEADING, format_results
from murmur.reporting.to_target import with_targets
from murmur.reporting.versus_dsgd import versus_dsgd_note

_PLOTS: tuple[tuple[str, str, str], ...] = (
    ("Mean test accuracy", "accuracy", "plot_accuracy"),
    ("Messages", "messages", "plot_messages"),
    ("Events per agent", "events_per_agent", "plot_events_per_agent"),
    ("Mean test accuracy vs bytes sent", "accuracy_vs_bytes", "plot_accuracy_vs_bytes"),
    ("Mean test accuracy vs messages", "accuracy_vs_messages", "plot_accuracy_vs_messages"),
    ("Mean test accuracy vs wall time", "accuracy_vs_wall_time", "plot_accuracy_vs_wall_time"),
)
"""The plots of every report: (title, file name without the format's suffix, the
function of :mod:`murmur.reporting.plots` that draws it)."""
_OPTIONAL_PLOTS: tuple[tuple[str, str, str], ...] = (
    (
        "Mean test accuracy vs virtual time",
        "accuracy_vs_virtual_time",
        "plot_accuracy_vs_virtual_time",
    ),
    ("Training loss", "train_loss", "plot_train_loss"),
    ("Consensus distance", "consensus_distance", "plot_consensus_distance"),
    (
        "Training time vs number of nodes (virtual clock)",
        "time_vs_nodes",
        "plot_time_vs_nodes",
    ),
    ("Mean test accuracy vs mean degree", "accuracy_vs_degree", "plot_accuracy_vs_degree"),
    ("Mean test accuracy vs messages lost", "accuracy_vs_lost", "plot_accuracy_vs_lost"),
    (
        "Speedup vs number of workers (to the target training loss)",
        "speedup_vs_workers",
        "plot_speedup_vs_workers",
    ),
    ("Staleness of applied gradients", "staleness", "plot_staleness"),
)
"""Plots drawn only when the runs have their fields and vary along the x axis; each
says whether it wrote its file."""


_PROGRESS = (
    "The x axis is the iteration (every agent's step; layer-wise runs: the layer), or for "
    "parameter servers and shared memory the training samples their workers computed "
    "gradients on, since a synchronous server's iteration computes W gradients and an "
    "asynchronous one's one."
)
CAPTIONS: dict[str, str] = {
    "accuracy": (
        "Mean test accuracy over agents at each evaluation, one line per run or group of "
        "seeds, one colour per method (line styles tell a method's runs apart). "
        + _PROGRESS
        + " A run drawn alone has the band from its worst to its best agent and its "
        "agents' average model dotted."
    ),
    "messages": "Point-to-point messages sent by all agents together, cumulative. " + _PROGRESS,
    "events_per_agent": (
        "Broadcasts of each agent at the end of the run (a broadcast: one message to "
        "every neighbour; BEER broadcasts twice a step, its model's and its tracker's "
        "estimate)."
    ),
    "accuracy_vs_bytes": (
        "Mean test accuracy against the encoded bytes all agents had sent, log scale: "
        "the fair axis for methods that compress or skip messages. Runs that send no "
        "byte are left out, as the legend says."
    ),
    "accuracy_vs_messages": "Mean test accuracy against the point-to-point messages sent.",
    "accuracy_vs_wall_time": (
        "Mean test accuracy against wall-clock seconds: in the simulator, how long "
        "simulating took, not how long a deployment would take (see the virtual time)."
    ),
    "accuracy_vs_virtual_time": (
        "Mean test accuracy against the simulator's virtual clock ([timing]): compute and "
        "message times as a deployment would see them; one learner that computes every "
        "agent's batch alone takes longer per iteration."
    ),
    "train_loss": "Training loss, mean over the steps since the previous evaluation. " + _PROGRESS,
    "consensus_distance": "Mean squared distance of the agents' models to their average.",
}
"""What each figure of report.md draws, under it (by file name without suffix)."""
_SEED_LINES = {
    "accuracy",
    "messages",
    "accuracy_vs_bytes",
    "accuracy_vs_messages",
    "accuracy_vs_wall_time",
    "accuracy_vs_virtual_time",
    "train_loss",
    "consensus_distance",
}
"""The figures whose lines are means over seeds, with a band."""


@dataclass(frozen=True)
class Choice:
    """Which runs a report shows and what it calls them: ``only`` the runs of these
    labels (all when empty), ``labels`` new names for labels (old to new)."""

    only: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)

    def of(self, runs: Sequence[Run | FailedRun]) -> list[Run | FailedRun]:
        """The runs chosen, relabelled; a UsageError for a label no run has."""
        known = {run_label(run.summary) for run in runs}
        unknown = [name for name in (*self.only, *self.labels) if name not in known]
        if unknown:
            raise UsageError(
                f"no run is called {unknown[0]!r}; the runs are {', '.join(sorted(known))}"
            )
        chosen = [run for run in runs if not self.only or run_label(run.summary) in self.only]
        return [self._relabelled(run) for run in chosen]

    def _relabelled(self, run: Run | FailedRun) -> Run | FailedRun:
        name = self.labels.get(run_label(run.summary))
        if name is None:
            return run
        summary = dict(run.summary)
        summary["name"] = name
        return dataclasses.replace(run, summary=summary)  # type: ignore[arg-type]


def write_report(
    run_dirs: Sequence[str | Path],
    out_dir: str | Path,
    *,
    fmt: str = plots.FORMATS[0],
    dpi: float = plots.DPI,
    target: float | None = None,
    style: PlotStyle = plots.PLAIN,
    choice: Choice = Choice(),
) -> Path:
    """Write out_dir/report.md and its plots for the given run folders; return its path.

    The plots are ``fmt`` files (png, pdf or svg; PNGs at ``dpi`` dots per inch);
    another format or a dpi that is not a positive number is a UsageError. The tables'
    "to N %" columns measure the way to ``target`` (a fraction; None: the default of
    :mod:`murmur.reporting.to_target`). ``style``: the figures' colours and smoothing
    (:mod:`murmur.reporting.palette`); ``choice``: which runs, under which labels
    (:class:`Choice`).

    All runs are read before anything is written, so a bad folder leaves
    out_dir untouched. Re-running overwrites the report and plots.

    Runs that failed during training are left out of the table and plots and
    listed below the table with their error. Runs that a rule stopped early are rows
    that show their status, in no mean across seeds, and are listed below the table
    with the rule and its reason; their curves end where they stopped, at an x.
    Every report has the accuracy, messages and events plots and accuracy against
    cumulative bytes (log axis), messages and wall time. accuracy_vs_virtual_time,
    train_loss and consensus_distance are written (and linked) only when some run's
    records have virtual seconds, a training loss or (with several agents) a consensus
    distance;
    time_vs_nodes and accuracy_vs_degree only when some algorithm has runs at two or
    more node counts / mean degrees, accuracy_vs_lost when the runs lost two or
    more shares of their messages, speedup_vs_workers only when some algorithm has a
    W = 1 run and another W that reached the target, and staleness only when some
    run has a staleness histogram; otherwise a stale copy (in ``fmt``) from an
    earlier report in out_dir is removed. When every run failed, report.md says so
    and no plot is drawn (stale ones are removed). Runs that differ only in seed
    are drawn as one line or point per group (:mod:`murmur.reporting.plots`).
    """
    if not run_dirs:
        raise UsageError("no run folders given; pass one or more folders written by `murmur run`")
    _check_output(fmt, dpi)
    runs = choice.of([read_run(run_dir) for run_dir in run_dirs])
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UsageError(f"report folder {out} is a file; pass a folder path for the report")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create report folder {out}: {error.strerror}") from None

    plot_files = _write_plots([run for run in runs if not run.failed], out, (fmt, dpi), style)
    report_path = out / "report.md"
    report_path.write_text(_report_markdown(runs, out, plot_files, target), encoding="utf-8")
    return report_path


def _check_output(fmt: str, dpi: float) -> None:
    """A UsageError for a plot format or dpi the plots cannot be written with."""
    if fmt not in plots.FORMATS:
        raise UsageError(f"unknown plot format {fmt!r}; valid formats: {', '.join(plots.FORMATS)}")
    if isinstance(dpi, bool) or not isinstance(dpi, int | float) or not 0 < dpi < math.inf:
        raise UsageError(f"dpi must be a positive number, not {dpi!r}")


def _write_plots(
    runs: list[Run], out: Path, output: tuple[str, float], style: PlotStyle
) -> list[tuple[str, str]]:
    """Draw the plots of ``runs`` into out as files of ``output`` (format and dpi); the
    (title, file) of each plot written."""
    fmt, dpi = output
    if not runs:
        for _, stem, _ in (*_PLOTS, *_OPTIONAL_PLOTS):
            (out / f"{stem}.{fmt}").unlink(missing_ok=True)
        return []
    written = []
    for title, stem, plot in _PLOTS:
        getattr(plots, plot)(runs, out / f"{stem}.{fmt}", dpi=dpi, style=style)
        written.append((title, f"{stem}.{fmt}"))
    for title, stem, optional in _OPTIONAL_PLOTS:
        if getattr(plots, optional)(runs, out / f"{stem}.{fmt}", dpi=dpi, style=style):
            written.append((title, f"{stem}.{fmt}"))
    return written


def _plot_section(title: str, file: str, seeds: bool) -> list[str]:
    """A plot's part of report.md: its heading, the image (a link for a PDF) and its
    caption; ``seeds``: whether some line is a mean over seeds."""
    link = f"[{title} (PDF)]({file})" if file.endswith(".pdf") else f"![{title}]({file})"
    caption = CAPTIONS.get(Path(file).stem, "")
    if seeds and Path(file).stem in _SEED_LINES:
        caption += (
            " A line over several seeds is their mean, its band the 95 % interval of that "
            "mean (the legend says how many seeds)."
        )
    return [f"## {title}", "", link, "", *([caption.strip(), ""] if caption else [])]


def _report_markdown(
    runs: list[Run | FailedRun],
    out: Path,
    plot_files: list[tuple[str, str]],
    target: float | None = None,
) -> str:
    failed = [f"- {failed_line(run)}" for run in runs if run.failed]
    finished = [run for run in runs if isinstance(run, Run)]
    shown = dict(
        zip(
            map(id, finished),
            with_targets(
                [run.summary for run in finished], [run.records for run in finished], target
            ),
            strict=True,
        )
    )
    summaries = [shown[id(run)] for run in finished]
    groups = [[shown[id(run)] for run in group.runs] for group in group_runs(finished)]
    parts = ["# murmur report", "", _overview(summaries, len(failed), groups), "", "## Results", ""]
    if summaries:
        parts += [format_results(groups, markdown=True, explain=True), ""]
    if any(len(group) > 1 for group in groups):
        parts += ["### Each seed", "", format_table(summaries, markdown=True), ""]
    stopped = [f"- {line}" for summary in summaries if (line := stopped_line(summary))]
    if stopped:
        parts += [STOPPED_HEADING, "", *stopped, ""]
    if failed:
        parts += [*failed, ""]
    note = versus_dsgd_note(summaries)
    if note:
        parts += [note, ""]
    if any(has_target(summary) for summary in summaries):
        parts += [_target_note(summaries), ""]
    sampled = _sampled_note(summaries)
    if sampled:
        parts += [sampled, ""]
    seeds = any(len(group) > 1 for group in groups)
    for title, file in plot_files:
        parts += _plot_section(title, file, seeds)
    parts += ["## Configurations", ""]
    parts += [_config_line(run, out) for run in runs]
    return "\n".join(parts) + "\n"


def _overview(
    summaries: list[RunSummary], failed: int, groups: Sequence[Sequence[RunSummary]] = ()
) -> str:
    """The report's first sentences: how many runs finished and failed, what the numbers are."""
    failures = f"{failed} run{'s' if failed != 1 else ''} failed"
    if not summaries:
        return f"No run finished: {failures}, so there is no table and no plot."
    seconds = (
        "wall s is wall-clock time, virtual s is simulated time on the virtual clock."
        if has_column(summaries, "virtual_seconds")
        else "seconds are wall-clock."
    )
    count = len(summaries)
    overview = (
        f"{count} run{'s' if count != 1 else ''}. Accuracies are test accuracies over "
        f"agents at the final evaluation of each run; {seconds} Each column is "
        "explained under the table."
    )
    if any(len(group) > 1 for group in groups):
        overview += " " + _seeds_note(groups)
    stopped = sum(stop_of(summary) is not None for summary in summaries)
    if stopped:
        overview += " " + _stopped_note(stopped)
    if failed:
        listed = "is" if failed == 1 else "are"
        overview += (
            f" {failures} and {listed} listed below the table, left out of it and the plots."
        )
    return overview


def _seeds_note(groups: Sequence[Sequence[RunSummary]]) -> str:
    """What the table across seeds shows."""
    return (
        f"Runs that differ only in seed form {len(groups)} group{'s' * (len(groups) != 1)}, "
        "one row each: a figure is the mean ± the sample standard deviation across the "
        "group's finished seeds (seeds: how many in the group), and 95 % CI the 95 % "
        "confidence interval of the mean final accuracy, mean ± t(0.975, n - 1) · sd / √n "
        "(within 0 to 100 %); the rows of each seed follow the table."
    )


def _stopped_note(stopped: int) -> str:
    """What the report does with the runs that a rule stopped early."""
    runs = f"{stopped} run{'s' * (stopped != 1)}"
    return (
        f"{runs} stopped early (collapsed or diverged): a row shows a stopped run's status "
        "where its final mean accuracy would stand, every mean across seeds is over the "
        "finished seeds alone (how many: the mean's count and the stopped column), the "
        "stopped runs are listed below the table with their rule and its reason, and "
        "their curves end at an x where they stopped."
    )


def _sampled_note(summaries: list[RunSummary]) -> str:
    """Which runs measured a sample of their agents, and which agents (up to 20 shown)."""
    lines = []
    for summary in summaries:
        chosen = summary.get("measured_agents")
        if not isinstance(chosen, list):
            continue
        shown = ", ".join(str(agent) for agent in chosen[:20])
        more = f", ... ({len(chosen) - 20} more)" if len(chosen) > 20 else ""
        label = run_label(summary).replace("|", "\\|")
        lines.append(
            f"- {label}: accuracy over {len(chosen)} of its {summary.get('agents')} agents, "
            f"a fixed sample drawn from its seed (run.eval_agents): agents {shown}{more}; "
            "summary.json lists them all"
        )
    if not lines:
        return ""
    return "\n".join(["Runs that measured a sample of their agents:", "", *lines])


def _target_note(summaries: list[RunSummary]) -> str:
    targets = sorted(
        {
            target
            for summary in summaries
            if has_target(summary) and (target := as_number(summary.get("target_loss"))) is not None
        }
    )
    stated = f" ({', '.join(f'{target:g}' for target in targets)})" if targets else ""
    return (
        f"Runs with W workers train until the training loss reaches its target{stated}; "
        "its / virtual s to target are the server iterations / simulated seconds it took "
        '("-": not reached). Speedups are over the W = 1 run of the same algorithm, dataset '
        "and target: iteration speedup = W * its(1) / its(W), time speedup = "
        'virtual s(1) / virtual s(W); "-" without such a run or when either did not reach '
        "the target."
    )


def _config_line(run: Run | FailedRun, out: Path) -> str:
    label = run_label(run.summary).replace("|", "\\|")
    details = ", ".join(
        f"{key} {run.summary[key]}"
        for key in ("preset", "seed")
        if run.summary.get(key) is not None
    )
    suffix = f" ({details})" if details else ""
    config = run.path / "config.toml"
    if not config.is_file():
        return f"- **{label}**: no config.toml in {run.path}{suffix}"
    link = _link(config, out)
    target = f"<{link}>" if " " in link else link
    return f"- **{label}**: [{link}]({target}){suffix}"


def _link(file: Path, out: Path) -> str:
    """A path to file relative to the report folder, absolute where none exists."""
    try:
        relative = os.path.relpath(file.resolve(), out.resolve())
    except ValueError:  # different drives on Windows
        return file.resolve().as_posix()
    return Path(relative).as_posix()
