"""The ``murmur`` command: run | presets | datasets | report.

Bad input ends with one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from murmur.errors import UsageError


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="murmur",
        description="Train networks across many learners that talk rarely and asynchronously.",
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = commands.add_parser("run", help="run a preset or a TOML config in the simulator")
    run.add_argument(
        "preset", nargs="?", default="default", help="preset name or path to a .toml file"
    )
    run.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override one config value (repeatable), e.g. --set topology.agents=20",
    )
    run.add_argument("--out", help="run folder (default: runs/PRESET-TIMESTAMP)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")

    commands.add_parser("presets", help="list the presets shipped with murmur")
    commands.add_parser("datasets", help="list the datasets and their sizes")

    report = commands.add_parser("report", help="tables and plots from run folders")
    report.add_argument("runs", nargs="+", help="run folders (or folders of runs)")
    report.add_argument(
        "--out",
        help="where report.md and the plots go (default: the one folder given, else ./report)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "run":
            return _run(args.preset, args.overrides, args.out, progress=not args.quiet)
        if args.command == "presets":
            return _presets()
        if args.command == "datasets":
            return _datasets()
        return _report(args.runs, args.out)
    except UsageError as error:
        print(f"murmur: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("murmur: interrupted", file=sys.stderr)
        return 130


def _run(source: str, overrides: list[str], out: str | None, progress: bool) -> int:
    from murmur.config import load_experiment
    from murmur.experiment import prepare, run
    from murmur.metrics.report import format_table

    experiment = load_experiment(source, overrides)
    setups = [prepare(config) for _, config in experiment.runs]  # all checked before any starts
    root = (
        Path(out) if out else Path("runs") / f"{experiment.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise UsageError(f"{root} already exists and is not empty; choose another --out")
    several = len(experiment.runs) > 1
    summaries = []
    for (label, config), setup in zip(experiment.runs, setups, strict=True):
        run_dir = root / label if several else root
        if progress:
            print(f"{label}: {config.algorithm.name} on {config.data.dataset}", file=sys.stderr)
        result = run(
            config, run_dir, name=label, preset=experiment.name, progress=progress, setup=setup
        )
        summaries.append(result.to_dict())
    table = format_table(summaries)
    print(table)
    if several:
        (root / "comparison.md").write_text(format_table(summaries, markdown=True) + "\n")
        print(f"\nruns in {root}; plots: murmur report {root}")
    return 0


def _presets() -> int:
    from murmur.config import preset_names, read_preset

    names = preset_names()
    width = max(len(name) for name in names)
    for name in names:
        _, raw = read_preset(name)
        print(f"{name:<{width}}  {raw.get('description', '')}")
    return 0


def _datasets() -> int:
    from murmur.data import DATASETS

    width = max(len(name) for name in DATASETS)
    for name, info in DATASETS.items():
        shape = f"{info.train}/{info.test} x {info.features}, {info.classes or '-'} classes"
        print(f"{name:<{width}}  {info.source:<9}  {shape:<32}  {info.description}")
    return 0


def _report(folders: list[str], out: str | None) -> int:
    from murmur.metrics.report import format_table, read_run, write_report

    run_dirs: list[Path] = []
    for folder in map(Path, folders):
        if (folder / "summary.json").is_file() or not folder.is_dir():
            run_dirs.append(folder)
        else:
            members = sorted((p.parent for p in folder.glob("*/summary.json")), key=_natural)
            if not members:
                raise UsageError(f"{folder} holds no run (no summary.json in it or its subfolders)")
            run_dirs.extend(members)
    target = Path(out) if out else Path(folders[0]) if len(folders) == 1 else Path("report")
    path = write_report(run_dirs, target)
    print(format_table([read_run(d).summary for d in run_dirs]))
    print(f"\nreport: {path}")
    return 0


def _natural(path: Path) -> list[tuple[int, int | str]]:
    """Sort key that puts ``workers-2`` before ``workers-16``."""
    return [
        (0, int(part)) if part.isdigit() else (1, part)
        for part in re.split(r"(\d+)", path.name)
        if part
    ]


if __name__ == "__main__":
    sys.exit(main())
