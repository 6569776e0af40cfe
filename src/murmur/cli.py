"""The ``murmur`` command: run | launch | presets | datasets | report | reproduce | tune.

Bad input ends with one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from murmur.errors import UsageError, one_line, shortened

REPRODUCIBLE = ("detsgrad", "asysg", "dssfn")
"""The papers ``murmur reproduce`` runs: the keys of :data:`murmur.reproduce.PAPERS`,
named here so that ``--help`` needs no import of the runs."""

if TYPE_CHECKING:
    from murmur.config import Config, Experiment
    from murmur.metrics.record_types import RunSummary
    from murmur.metrics.records import RunResult
    from murmur.training.setup import Setup


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="murmur",
        description="Train networks across many learners that talk rarely and asynchronously.",
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_run(commands)
    _add_launch(commands)
    presets = commands.add_parser(
        "presets", help="list the presets shipped with murmur, and the algorithms of plugins"
    )
    _add_plugins(presets)
    _add_datasets(commands)
    _add_report(commands)
    _add_tune(commands)
    return parser


def _add_run(commands: argparse._SubParsersAction[_Parser]) -> None:
    run = commands.add_parser(
        "run", help="run a preset or a TOML config in the simulator (or as one torchrun rank)"
    )
    run.add_argument(
        "preset",
        nargs="?",
        help="preset name or path to a .toml file (default: default)",
    )
    _add_overrides(run, "override one config value (repeatable), e.g. --set topology.agents=20")
    _add_plugins(run)
    run.add_argument(
        "--seeds",
        metavar="SEEDS",
        help="run every run once per seed, e.g. 0-4 or 0,3,7 (sets run.seeds), into "
        "OUT/seed-N (OUT/LABEL/seed-N for a comparison); tables give mean +- sd across seeds",
    )
    run.add_argument("--out", help="run folder (default: runs/PRESET-TIMESTAMP)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument(
        "--check",
        action="store_true",
        help="check the config, data, graph and memory estimate, print each run's plan "
        "(what was chosen automatically included), and stop: nothing is trained or written",
    )
    run.add_argument(
        "--plan",
        metavar="FILE",
        help="with --runtime distributed: the plan murmur launch made for every rank, "
        "instead of a preset",
    )
    run.add_argument(
        "--resume",
        metavar="DIR",
        help="continue the stopped run in DIR from its checkpoint.pt (saved every "
        "run.checkpoint_every iterations) with DIR's own config; takes no preset or --set "
        "(with --runtime distributed: this rank's part, from DIR/checkpoints/)",
    )
    run.add_argument(
        "--runtime",
        choices=("simulator", "distributed"),
        default="simulator",
        help="simulator: all agents in this process; distributed: this process is one rank "
        "of a torchrun job (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)",
    )
    _add_target(run)
    _add_rank_options(run)


def _add_launch(commands: argparse._SubParsersAction[_Parser]) -> None:
    launch = commands.add_parser(
        "launch", help="run a preset as one process per agent on this machine"
    )
    launch.add_argument(
        "--nproc", type=int, help="processes, one per agent (with --resume: from DIR's config)"
    )
    launch.add_argument("preset", nargs="?", help="preset name or path to a .toml file")
    _add_overrides(launch, "override one config value (repeatable)")
    _add_plugins(launch)
    launch.add_argument("--out", help="run folder (default: runs/PRESET-TIMESTAMP)")
    launch.add_argument(
        "--port",
        type=int,
        default=None,
        help="rendezvous port on 127.0.0.1 (default: a free one, chosen at the start)",
    )
    launch.add_argument("--quiet", action="store_true", help="no progress bar")
    launch.add_argument(
        "--resume",
        metavar="DIR",
        help="continue the stopped run in DIR from every rank's checkpoint (saved every "
        "run.checkpoint_every iterations) with DIR's own config; takes no preset or --set",
    )
    launch.add_argument(
        "--max-restarts",
        type=int,
        default=0,
        metavar="N",
        help="restart every rank up to N times after one fails; they continue from the "
        "newest checkpoint all ranks saved, or start over (default 0)",
    )
    _add_rank_options(launch)


def _add_datasets(commands: argparse._SubParsersAction[_Parser]) -> None:
    datasets = commands.add_parser(
        "datasets", help="list the datasets and their sizes, or describe a file of your own"
    )
    datasets.add_argument(
        "--file",
        metavar="PATH",
        help='an .npz or .csv for data.dataset = "file": print its sizes, classes and SHA-256',
    )
    datasets.add_argument(
        "--test-file", metavar="PATH", help="with a .csv: the .csv of its test split"
    )
    datasets.add_argument(
        "--label-column", metavar="NAME", help="the .csv column of the labels (default: label)"
    )
    datasets.add_argument(
        "--task",
        choices=("classification", "regression"),
        default="classification",
        help="what the labels are (default: classification)",
    )


PLOT_FORMATS = ("png", "pdf", "svg")
"""``murmur report --format``: murmur.reporting.canvas.FORMATS, named here so that the
parser does not load matplotlib."""


def _dots_per_inch(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text!r}")
    return value


def _target_percent(text: str) -> float:
    """``--target``: a test accuracy in percent, as a fraction."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 100:
        raise argparse.ArgumentTypeError(
            f"must be a percentage above 0 and at most 100, not {text!r}"
        )
    return value / 100


def _add_target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target",
        metavar="PERCENT",
        type=_target_percent,
        help='the test accuracy the tables\' "to N %%" columns measure the way to '
        "(iterations, seconds and bytes until the agents' mean first reached it; "
        "default: 95 %% of the table's best final mean accuracy, rounded down)",
    )


def _add_report(commands: argparse._SubParsersAction[_Parser]) -> None:
    report = commands.add_parser("report", help="tables and plots from run folders")
    report.add_argument("runs", nargs="+", help="run folders (or folders of runs)")
    report.add_argument(
        "--out",
        help="where report.md and the plots go (default: the one folder given, else ./report)",
    )
    report.add_argument(
        "--format",
        choices=PLOT_FORMATS,
        default=PLOT_FORMATS[0],
        help="the plots' file format (default: png)",
    )
    report.add_argument(
        "--dpi",
        type=_dots_per_inch,
        default=150.0,
        help="resolution of PNG plots in dots per inch (default: 150)",
    )
    _add_target(report)
    _add_figure_options(report)

    reproduce = commands.add_parser(
        "reproduce", help="re-run a paper's experiments on bundled data: report.md with verdicts"
    )
    reproduce.add_argument("paper", help=f"the paper: {', '.join(REPRODUCIBLE)}")
    reproduce.add_argument(
        "--quick", action="store_true", help="short runs (seconds): real but rough verdicts"
    )
    reproduce.add_argument(
        "--out",
        help="where the report, plots and runs go (default: runs/reproduce-PAPER-TIMESTAMP)",
    )
    reproduce.add_argument("--quiet", action="store_true", help="no estimate or progress bar")
    _add_portable(reproduce)


def _add_figure_options(report: argparse.ArgumentParser) -> None:
    """``murmur report``'s choice of runs, labels, colours and smoothing."""
    report.add_argument(
        "--only",
        metavar="LABEL",
        action="append",
        default=[],
        help="report only the runs of this label (repeatable; default: every run)",
    )
    report.add_argument(
        "--label",
        metavar="OLD=NEW",
        action="append",
        default=[],
        help="call the runs of label OLD NEW in the tables and legends (repeatable)",
    )
    report.add_argument(
        "--colour",
        metavar="NAME=COLOUR",
        action="append",
        default=[],
        help="draw the runs of a label or an algorithm in COLOUR (a name, #rrggbb or C0-C9; "
        "repeatable); by default every method keeps one colour in every report",
    )
    report.add_argument(
        "--smooth",
        metavar="N",
        type=int,
        default=1,
        help="draw each curve as the mean of the last N evaluations (default: 1, as measured)",
    )


def _add_tune(commands: argparse._SubParsersAction[_Parser]) -> None:
    tune = commands.add_parser(
        "tune",
        help="choose each member's steps on a validation split (Optuna); writes tuned.toml",
    )
    tune.add_argument(
        "target", help="preset name, comparison preset (e.g. default) or path to a .toml file"
    )
    _add_overrides(tune, "override one config value of every member (repeatable)")
    _add_plugins(tune)
    tune.add_argument(
        "--members",
        metavar="LABELS",
        help="tune only these members of a comparison, e.g. dsgd,detsgrad (default: all)",
    )
    tune.add_argument(
        "--seeds",
        default="0-1",
        metavar="SEEDS",
        help="each trial runs once per seed and scores their mean, e.g. 0-2 (default: 0-1: "
        "a point chosen on one seed may collapse on the next)",
    )
    tune.add_argument(
        "--trials",
        type=_positive_count,
        metavar="N",
        help="trials per member in all, earlier commands' included (default: 12 with tpe, "
        "the whole grid with grid)",
    )
    tune.add_argument(
        "--timeout",
        type=_seconds,
        metavar="SECONDS",
        help="per member: no trial starts after this many seconds of this command",
    )
    _add_tune_search(tune)
    tune.add_argument(
        "--out",
        help="the tune folder (default: runs/tune-TARGET-TIMESTAMP); the same command with "
        "the same --out resumes an interrupted tune",
    )
    tune.add_argument("--quiet", action="store_true", help="no line per trial")


def _add_tune_search(tune: argparse.ArgumentParser) -> None:
    """How ``murmur tune`` searches: sampler, ranges, bytes limit, pruning."""
    tune.add_argument(
        "--sampler",
        choices=("tpe", "grid"),
        default="tpe",
        help="tpe: Optuna's TPE, seeded (default); grid: every point of the declared grids",
    )
    tune.add_argument(
        "--range",
        dest="ranges",
        action="append",
        default=[],
        metavar="algorithm.KEY=LOW:HIGH",
        help="search KEY from LOW to HIGH instead of its declared range (repeatable), "
        "e.g. --range algorithm.a=0.01:0.5",
    )
    tune.add_argument(
        "--max-bytes-vs-dsgd",
        dest="max_bytes",
        metavar="LIMIT",
        help="choose no point that sends more bytes than this: own (no more than the "
        "member's own steps, tpe only) or a percentage of DSGD's bytes, e.g. 25 "
        "(default: no limit)",
    )
    tune.add_argument(
        "--no-pruning",
        action="store_true",
        help="run every trial to its end (default: prune trials that fall behind)",
    )


def _positive_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1, not {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text!r}")
    return value


def _add_overrides(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help=help,
    )


def _add_plugins(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--plugin",
        dest="plugins",
        action="append",
        default=[],
        metavar="FILE",
        help="import a plugin first: a .py file or a module that registers algorithms "
        "through murmur.extend (repeatable); every run records it in run.plugins; "
        "murmur presets --plugin FILE lists what it adds and from where",
    )


def _add_portable(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--portable",
        action="store_true",
        help="portable numbers: pin the CPU kernels (AVX2, MKL_CBWR=COMPATIBLE, oneDNN off, "
        "one thread) before anything computes, so that a seed gives the same numbers on any "
        "x86-64 machine, at some cost in speed (sets run.portable; MURMUR_PORTABLE=1 too)",
    )


def _add_rank_options(parser: argparse.ArgumentParser) -> None:
    """``--portable``, ``--agents-per-rank`` and ``--timeout``: ``run`` takes them, and
    ``launch`` hands them to each of its ranks."""
    _add_portable(parser)
    parser.add_argument(
        "--agents-per-rank",
        type=int,
        default=1,
        metavar="K",
        help="distributed runtime: each rank holds a block of K consecutive agents "
        "(ranks x K = topology.agents; synchronous SGD algorithms only; default 1)",
    )
    parser.add_argument(
        "--timeout",
        type=_seconds,
        default=60.0,
        metavar="SECONDS",
        help="distributed runtime: how long to wait for a peer to join, send or finish "
        "before stopping with its rank named (default 60)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):  # a path that is not UTF-8 is still printed
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    args = build_parser().parse_args(argv)
    try:
        _portable_first(args)
        return _command(args)
    except UsageError as error:
        _error_line(str(error))
        return 2
    except KeyboardInterrupt:
        print("murmur: interrupted", file=sys.stderr)
        return 130
    except OSError as error:  # a path the system refuses: too long, a loop of links, ...
        where = f": {_shown_path(error.filename)}" if error.filename is not None else ""
        _error_line(f"{error.strerror or error}{where}")
        return 2
    except (RuntimeError, MemoryError) as error:
        # A peer that failed, or memory that could not be had: the run's folder says so
        # in its summary.json, and one line here. Anything else is a bug: its traceback.
        line = _failure_line(error)
        if line is None:
            raise
        _error_line(line)
        return 1


_NO_MEMORY = ("can't allocate memory", "cannot allocate memory", "out of memory")
"""What torch's allocators say when the memory a tensor needs cannot be had."""


def _failure_line(error: BaseException) -> str | None:
    """Why a run stopped, in one line, when a peer failed or memory ran out; None for
    any other error."""
    from murmur.distributed.failures import PeerFailure

    if isinstance(error, PeerFailure):
        return str(error)
    text = str(error).strip()
    if isinstance(error, MemoryError) or any(words in text.lower() for words in _NO_MEMORY):
        first = text.splitlines()[0] if text else "no memory left"
        return (
            f"the run ran out of memory ({first}); make it smaller (fewer topology.agents, "
            "a smaller model or data.batch_size)"
        )
    return None


def _portable_first(args: argparse.Namespace) -> None:
    """Pin the CPU kernels first thing, before anything computes, where ``--portable``
    or ``MURMUR_PORTABLE=1`` asks for portable numbers (:mod:`murmur.portable`); a new
    run's config then says ``run.portable = true``. UsageError where they cannot be had."""
    if args.command not in ("run", "launch", "reproduce"):
        return
    from murmur import portable

    flag = getattr(args, "portable", False)
    if not (flag or portable.asked()):
        return
    if args.command == "reproduce":
        args.portable = True  # every run of the reproduction
        portable.pin()
        return
    given = args.resume is not None or getattr(args, "plan", None) is not None
    if flag and given:
        raise UsageError(
            "--portable sets run.portable of a new run; one of --resume or --plan keeps "
            "its own config's: drop --portable"
        )
    if not given:
        args.overrides = [*args.overrides, "run.portable=true"]
    portable.pin()


def _command(args: argparse.Namespace) -> int:
    """Run the command ``args`` names; UsageError for bad input."""
    _given_plugins(args)
    if args.command == "run":
        return _run_command(args)
    if args.command == "launch":
        return _launch(args)
    if args.command == "presets":
        return _presets(args.plugins)
    if args.command == "datasets":
        return _datasets() if args.file is None else _describe_file(args)
    if args.command == "reproduce":
        return _reproduce(
            args.paper, args.out, quick=args.quick, progress=not args.quiet, portable=args.portable
        )
    if args.command == "tune":
        return _tune(args)
    return _report(args)


def _given_plugins(args: argparse.Namespace) -> None:
    """Import the plugins of ``--plugin`` first (their paths made absolute), so that
    everything after may name what they register; refused with a run's own config."""
    given = getattr(args, "plugins", [])
    if not given:
        return
    if getattr(args, "resume", None) is not None or getattr(args, "plan", None) is not None:
        raise UsageError(
            "--resume and --plan import the run's own plugins (its run.plugins); drop --plugin"
        )
    from murmur.plugins import load_plugins, resolved

    args.plugins = [resolved(spec, Path.cwd()) for spec in given]
    load_plugins(args.plugins)


def _run_command(args: argparse.Namespace) -> int:
    """``murmur run``: in the simulator, or as one rank of a torchrun job."""
    if args.runtime != "distributed" and args.agents_per_rank != 1:
        raise UsageError(
            "--agents-per-rank sets the agents of each rank of --runtime distributed; "
            "the simulator holds every agent in one process: drop it"
        )
    if args.plan is not None and args.runtime != "distributed":
        raise UsageError("--plan is for the ranks of --runtime distributed; drop it")
    if args.seeds is not None:
        args.overrides = [*args.overrides, _seeds_override(args)]
    if args.resume is not None:
        return _resume(args)
    if args.runtime == "distributed":
        return _run_distributed(args)
    source = "default" if args.preset is None else args.preset
    return _run(
        source,
        args.overrides,
        args.out,
        progress=not args.quiet,
        check=args.check,
        plugins=args.plugins,
        target=args.target,
    )


def _seeds_override(args: argparse.Namespace) -> str:
    """``--seeds`` as the ``--set run.seeds=[...]`` it stands for; UsageError for bad text."""
    from murmur.config import parse_override, parse_seeds

    if args.resume is not None:
        raise UsageError(
            "--resume continues a run in its own folder with its own config.toml; drop --seeds"
        )
    seeds = parse_seeds(args.seeds)
    if any(parse_override(item)[:2] == ("run", "seeds") for item in args.overrides):
        raise UsageError("give the seeds once: --seeds or --set run.seeds, not both")
    return f"run.seeds=[{', '.join(map(str, seeds))}]"


def _launch(args: argparse.Namespace) -> int:
    """``murmur launch``: the run's ranks forked on this machine, each running ``main``."""
    from murmur.distributed.launch import RankOptions, launch

    if args.resume is not None and (args.preset or args.overrides or args.out):
        raise UsageError(
            "--resume continues a run in its own folder with its own config.toml; "
            "drop the preset, --set and --out"
        )
    return launch(
        args.nproc,
        args.preset,
        args.overrides,
        args.out,
        ranks=RankOptions(
            port=args.port,
            timeout=args.timeout,
            progress=not args.quiet,
            max_restarts=args.max_restarts,
        ),
        resume=args.resume,
        rank_main=main,
        agents_per_rank=args.agents_per_rank,
        plugins=args.plugins,
    )


def _error_line(message: str) -> None:
    """One write, so the lines of ranks sharing a terminal do not interleave."""
    sys.stderr.write(f"murmur: error: {one_line(message)}\n")
    sys.stderr.flush()


def _shown_path(path: Any, limit: int = 80) -> str:
    return shortened(str(path), limit)


def _run(
    source: str,
    overrides: list[str],
    out: str | None,
    progress: bool,
    check: bool = False,
    plugins: Sequence[str] = (),
    target: float | None = None,
) -> int:
    from murmur.config import load_experiment, shadowed_path
    from murmur.training.plan import plan
    from murmur.training.runs import check_run_dir, create_run_dir
    from murmur.training.setup import prepare

    note = shadowed_path(source)
    if note is not None:
        print(f"murmur: {note}", file=sys.stderr)
    experiment = load_experiment(source, overrides, plugins)
    if any(config.run.portable for _, config in experiment.runs):
        from murmur import portable

        portable.pin()  # before the plans compute; the other runs then compute pinned too
    for line in experiment.notes:
        print(f"murmur: {line}", file=sys.stderr)
    plans = [plan(config) for _, config in experiment.runs]  # all before any starts
    setups = [prepare(checked) for checked in plans]  # the data files and graphs too
    root = (
        Path(out) if out else Path("runs") / f"{experiment.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    check_run_dir(root)
    several = len(experiment.runs) > 1
    if check:
        for index, setup in enumerate(setups):
            print(_plan_line(_run_name(experiment, index), setup))
        print(f"checked: {len(setups)} run{'s' * several}; nothing was trained or written")
        return 0
    create_run_dir(root)  # before the first line: a folder that cannot be made is one error
    return _run_all(experiment, setups, root, (progress, target))


def _run_all(
    experiment: Experiment,
    setups: Sequence[Setup],
    root: Path,
    options: tuple[bool, float | None],
) -> int:
    """Train the runs of ``experiment`` one after the other; print the table. A run that
    fails on its input (its steps diverge) fails alone: its folder says why, the other
    runs go on, and the exit status is 2 once they are done. ``options``: whether to
    show progress, and the target accuracy of the tables (None: their default)."""
    from murmur.errors import RunFailed
    from murmur.experiment import run
    from murmur.reporting.seed_table import comparison_markdown, format_results
    from murmur.reporting.to_target import grouped_targets

    progress, target = options
    several = len(experiment.runs) > 1
    groups: dict[str, list[RunSummary]] = {}  # a member's runs, one per seed
    failed: list[str] = []
    for index, ((label, config), setup) in enumerate(zip(experiment.runs, setups, strict=True)):
        run_dir, name = root / experiment.folder(index), _run_name(experiment, index)
        if progress:
            print(f"{name}: {config.algorithm.name} on {config.data.dataset}", file=sys.stderr)
        try:
            result = run(
                setup.plan,
                run_dir,
                name=label,
                preset=experiment.name,
                progress=progress,
                setup=setup,
            )
        except RunFailed as error:
            if not several:
                raise
            failed.append(f"{name} failed: {error} ({run_dir})")
            _error_line(failed[-1])
            continue
        groups.setdefault(label, []).append(result.to_dict())
        _say_stopped(name, result)
        _warn_caps(label, groups[label][-1], config)
    shown = grouped_targets(list(groups.values()), target)
    if groups:
        print(format_results(shown, compact=True))
        _print_stopped([summary for group in groups.values() for summary in group])
        _print_estimated([summary for group in groups.values() for summary in group])
    if several:
        (root / "comparison.md").write_text(comparison_markdown(shown, failed))
        each = " and each seed's row" if experiment.seeded else ""
        print(f"\nruns in {root}; every column{each} in its comparison.md")
        print(f"plots: murmur report {root}")
    if failed:
        _error_line(f"{len(failed)} of {len(experiment.runs)} runs failed; the others finished")
        return 2
    return 0


def _print_stopped(summaries: Sequence[RunSummary]) -> None:
    """Under a table, each run that a rule stopped early, with its rule and reason."""
    from murmur.reporting.report import stopped_line
    from murmur.reporting.seed_table import STOPPED_HEADING

    lines = [line for summary in summaries if (line := stopped_line(summary)) is not None]
    if lines:
        print(f"\n{STOPPED_HEADING}\n" + "\n".join(f"- {line}" for line in lines))


def _print_estimated(summaries: list[RunSummary]) -> None:
    """Under the table, where some row has no DSGD run to compare with: what its "vs
    DSGD" figures are over instead."""
    from murmur.reporting.versus_dsgd import estimated, versus_dsgd_note

    if estimated(summaries):
        print(f"\n{versus_dsgd_note(summaries)}")


def _run_name(experiment: Experiment, index: int) -> str:
    """How progress lines and ``--check`` name run ``index``: its label, and its seed
    where it is one of a list of seeds."""
    label = experiment.runs[index][0]
    seed = experiment.seeds[index] if experiment.seeds else None
    return label if seed is None else f"{label} (seed {seed})"


def _resume(args: argparse.Namespace) -> int:
    """``murmur run --resume DIR``: the folder's config is the config."""
    from murmur.experiment import resume
    from murmur.reporting.report import format_table
    from murmur.reporting.to_target import targets_from_folders

    given = [
        name
        for name, used in (
            ("a preset", args.preset is not None),
            ("--set", bool(args.overrides)),
            ("--out", args.out is not None),
            ("--check", args.check),
        )
        if used
    ]
    if given:
        raise UsageError(
            f"--resume continues a run in its own folder with its own config.toml; drop {given[0]}"
        )
    if args.runtime == "distributed":
        from murmur.distributed.runtime import resume_distributed
        from murmur.training.plan import read_plan_file

        result = resume_distributed(
            Path(args.resume),
            progress=not args.quiet,
            timeout=args.timeout,
            agents_per_rank=args.agents_per_rank,
            checked=read_plan_file(Path(args.plan))[0] if args.plan is not None else None,
        )
        if result.run_dir is not None:
            _say_stopped(result.name, result)
            print(format_table(targets_from_folders([result.to_dict()], args.target), compact=True))
        return 0
    if not args.quiet:
        print(f"resuming {args.resume}", file=sys.stderr)
    result = resume(
        args.resume, progress=not args.quiet, note=lambda line: print(line, file=sys.stderr)
    )
    _say_stopped(result.name, result)
    print(format_table(targets_from_folders([result.to_dict()], args.target), compact=True))
    return 0


def _plan_line(label: str, setup: Setup) -> str:
    """What ``murmur run --check`` says one run would do, and what its plan chose."""
    from murmur.units import human_bytes

    config, graph = setup.config, setup.graph
    learners = (
        f"{graph.name} of {graph.agents} agents ({graph.num_edges} edges)"
        if graph.agents > 1
        else f"{len(setup.shards)} learner{'s' * (len(setup.shards) > 1)}"
    )
    return (
        f"{label}: {config.algorithm.name} on {config.data.dataset}, {learners}, "
        f"{config.run.iterations} iterations, about {human_bytes(setup.memory)} of memory; "
        f"{setup.plan.choices()}{_steps(setup.steps)}"
    )


def _steps(steps: dict[str, float]) -> str:
    """The chosen step sizes as ``--check`` prints them: ``, b = 0.6667``."""
    return "".join(f", {name} = {value:.4g}" for name, value in steps.items())


def _say_stopped(name: str, result: RunResult) -> None:
    """One line on stderr for a run that a rule of ``[collapse]`` stopped early: a
    result, not an error, so the exit status stays 0."""
    if result.stopped is not None:
        stop = result.stopped
        sys.stderr.write(
            f"murmur: {name} {result.status} at iteration {stop['iteration']}: {stop['reason']}\n"
        )


def _warn_caps(label: str, summary: RunSummary, config: Config) -> None:
    """A layer-wise run's layers that stopped at their cap, one line each on stderr."""
    from murmur.algorithms.ssfn import LayerwiseConfig
    from murmur.training.layer_loop import cap_warnings

    if isinstance(config.algorithm, LayerwiseConfig):
        for line in cap_warnings(summary, config.algorithm):
            sys.stderr.write(f"murmur: {label}: {line}\n")


def _run_distributed(args: argparse.Namespace) -> int:
    """One rank of a torchrun job; rank 0 writes the run folder and prints the table.
    The run is the plan ``murmur launch`` made (``--plan``), or the preset's."""
    from murmur.config import load_experiment
    from murmur.distributed.launch import default_run_dir, single_run
    from murmur.distributed.runtime import run_distributed
    from murmur.reporting.report import format_table
    from murmur.training.plan import Plan, read_plan_file

    config: Config | Plan
    if args.plan is not None:
        if args.preset is not None or args.overrides:
            raise UsageError("--plan holds the run's config; drop the preset and --set")
        config, label, preset = read_plan_file(Path(args.plan))
        root = Path(args.out) if args.out else default_run_dir(preset or label)
    else:
        experiment = load_experiment(
            "default" if args.preset is None else args.preset, args.overrides, args.plugins
        )
        label, config = single_run(experiment)
        preset = experiment.name
        root = Path(args.out) if args.out else default_run_dir(experiment.name)
    result = run_distributed(
        config,
        root,
        name=label,
        preset=preset,
        progress=not args.quiet,
        timeout=args.timeout,
        agents_per_rank=args.agents_per_rank,
    )
    if result.run_dir is not None:
        _say_stopped(label, result)
        print(format_table([result.to_dict()], compact=True))
        _warn_caps(label, result.to_dict(), config.config if isinstance(config, Plan) else config)
    return 0


def _presets(plugins: Sequence[str]) -> int:
    """The presets, then each algorithm a plugin registered (``--plugin`` or installed)."""
    from murmur.config import preset_names, read_preset
    from murmur.plugins import load_installed, loaded_plugins

    names = preset_names()
    width = max(len(name) for name in names)
    for name in names:
        _, raw = read_preset(name)
        print(f"{name:<{width}}  {raw.get('description', '')}")
    load_installed()
    for plugin in loaded_plugins():
        for line in plugin.summaries():
            print(line)
    return 0


def _datasets() -> int:
    from murmur.data import DATASETS

    width = max(len(name) for name in DATASETS)
    for name, info in DATASETS.items():
        about = "~" if info.sizes_vary else ""  # the whole set's; a copy holds its sample
        shape = f"{about}{info.train}/{info.test} x {info.features}, {info.classes or '-'} classes"
        print(f"{name:<{width}}  {info.source:<9}  {shape:<32}  {info.description}")
    own = "your own .npz or .csv"
    print(
        f"{'file':<{width}}  {'file':<9}  {own:<32}  --set data.dataset=file --set "
        "data.path=PATH (murmur datasets --file PATH describes it)"
    )
    return 0


def _describe_file(args: argparse.Namespace) -> int:
    """``murmur datasets --file PATH``: the sizes, classes and SHA-256 of a user's file,
    and the settings that train on it."""
    from murmur.data.user_files import read_file_data
    from murmur.sections import DataConfig

    settings = {"dataset": "file", "path": args.file}
    if args.task != "classification":
        settings["task"] = args.task
    if args.test_file is not None:
        settings["test_path"] = args.test_file
    if args.label_column is not None:
        settings["label_column"] = args.label_column
    loaded = read_file_data(DataConfig(**settings))
    dataset = loaded.dataset
    print(
        f"{args.file}: {dataset.x_train.shape[0]} training and {dataset.x_test.shape[0]} test "
        f"samples of {dataset.features} features"
    )
    if dataset.task == "classification":
        counts = dataset.y_train.bincount(minlength=dataset.num_classes).tolist()
        shown = ", ".join(f"{label}: {count}" for label, count in enumerate(counts))
        print(f"classes: {dataset.num_classes} (training samples of each: {shown})")
    else:
        print(f"regression: {dataset.outputs} target{'s' * (dataset.outputs > 1)} per sample")
    print(f"sha256: {loaded.sha256}")
    overrides = " ".join(f"--set data.{key}={value}" for key, value in settings.items())
    print(f"train on it: murmur run PRESET {overrides} --set data.sha256={loaded.sha256}")
    return 0


def _report(args: argparse.Namespace) -> int:
    """``murmur report``: report.md and its figures, and the compact table printed."""
    from murmur.reporting.palette import PlotStyle, parse_colours
    from murmur.reporting.report import Run, failed_line, read_run
    from murmur.reporting.report_files import Choice, write_report
    from murmur.reporting.seed_groups import group_runs
    from murmur.reporting.seed_table import format_results
    from murmur.reporting.to_target import grouped_targets

    folders: list[str] = args.runs
    style = PlotStyle(parse_colours(args.colour), args.smooth)
    choice = Choice(tuple(args.only), _renames(args.label))
    run_dirs = _report_folders(folders)
    out = args.out
    destination = Path(out) if out else Path(folders[0]) if len(folders) == 1 else Path("report")
    path = write_report(
        run_dirs,
        destination,
        fmt=args.format,
        dpi=args.dpi,
        target=args.target,
        style=style,
        choice=choice,
    )
    runs = choice.of([read_run(d) for d in run_dirs])
    groups = group_runs([run for run in runs if isinstance(run, Run)])
    summaries = grouped_targets(
        [[run.summary for run in group.runs] for group in groups], args.target
    )
    print(format_results(summaries, compact=True) if summaries else "no run finished")
    _print_stopped([summary for group in summaries for summary in group])
    for run in runs:
        if run.failed:
            print(failed_line(run))
    print(f"\nreport: {path}")
    return 0


def _report_folders(folders: Sequence[str]) -> list[Path]:
    """The run folders of ``murmur report``'s arguments: a run folder as it is, a folder
    of runs as its runs in the comparison's order."""
    from murmur.reporting.seed_groups import comparison_order

    run_dirs: list[Path] = []
    for folder in map(Path, folders):
        if (folder / "summary.json").is_file() or not folder.is_dir():
            run_dirs.append(folder)
        else:
            members = _run_folders(folder)
            if not members:
                raise UsageError(f"{folder} holds no run (no summary.json in it or its subfolders)")
            run_dirs.extend(comparison_order(members))
    return run_dirs


def _renames(items: Sequence[str]) -> dict[str, str]:
    """``--label OLD=NEW`` items as a mapping; a UsageError for an item without ``=``."""
    renames = {}
    for item in items:
        old, equals, new = item.partition("=")
        if not equals or not old.strip() or not new.strip():
            raise UsageError(f"--label takes OLD=NEW (a run's label and its new one), not {item!r}")
        renames[old.strip()] = new.strip()
    return renames


def _reproduce(paper: str, out: str | None, quick: bool, progress: bool, portable: bool) -> int:
    from murmur.reproduce import reproduce

    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = Path(out) if out else Path("runs") / f"reproduce-{paper}-{stamp}"
    path = reproduce(paper, target, quick=quick, progress=progress, portable=portable)
    print(f"report: {path}")
    return 0


def _tune(args: argparse.Namespace) -> int:
    """``murmur tune``: every check first, then the studies, tuned.toml and tuning.md."""
    from murmur.config import parse_seeds, shadowed_path
    from murmur.tune import (
        FILE,
        REPORT,
        SearchSettings,
        check_folder,
        parse_range,
        plan_search,
        tune,
    )
    from murmur.tune.bytes_limit import parse_bytes_limit
    from murmur.tune.report import overview

    note = shadowed_path(args.target)
    if note is not None:
        print(f"murmur: {note}", file=sys.stderr)
    search = plan_search(
        args.target,
        args.overrides,
        members=_member_labels(args.members) if args.members is not None else None,
        plugins=args.plugins,
        seeds=parse_seeds(args.seeds),
        ranges=[parse_range(text) for text in args.ranges],
        settings=SearchSettings(
            sampler=args.sampler,
            trials=args.trials,
            timeout=args.timeout,
            pruning=not args.no_pruning,
            max_bytes=parse_bytes_limit(args.max_bytes) if args.max_bytes is not None else None,
        ),
    )
    stamp = time.strftime("%Y%m%d-%H%M%S")
    root = Path(args.out) if args.out else Path("runs") / f"tune-{search.name}-{stamp}"
    check_folder(search, root)  # before the first line: a folder it cannot use is one error
    for line in search.notes:
        print(f"murmur: {line}", file=sys.stderr)
    results = tune(search, root, progress=not args.quiet)
    for result in results:
        if result.chosen is None:
            print(
                f"murmur: {result.member.label}: no trial completed"
                f"{' within the bytes limit' if search.max_bytes is not None else ''}; "
                f"{FILE} keeps its own steps",
                file=sys.stderr,
            )
    print("\n".join(overview(results)))
    print(f"\ntuned: {root / FILE}; report: {root / REPORT}")
    print(f"test figures: murmur run {root / FILE} --seeds 0-4")
    return 0


def _member_labels(text: str) -> list[str]:
    """The labels of ``--members a,b``; UsageError where it names none."""
    labels = [label.strip() for label in text.split(",") if label.strip()]
    if not labels:
        raise UsageError(f"--members {text!r} names no member; give labels, e.g. dsgd,detsgrad")
    return labels


def _run_folders(folder: Path) -> list[Path]:
    """The run folders (those with a summary.json) below ``folder``, at any depth (a
    comparison over seeds: LABEL/seed-N), in natural order; none inside a run folder."""
    found = []
    for parent, children, files in os.walk(folder):
        if "summary.json" in files and Path(parent) != folder:
            found.append(Path(parent))
            children.clear()
    return sorted(found, key=lambda path: [_natural(Path(part)) for part in path.parts])


def _natural(path: Path) -> list[tuple[int, int | str]]:
    """Sort key that puts ``workers-2`` before ``workers-16``."""
    return [
        (0, int(part)) if part.isdigit() else (1, part)
        for part in re.split(r"(\d+)", path.name)
        if part
    ]


if __name__ == "__main__":
    sys.exit(main())
