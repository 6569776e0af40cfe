"""Regenerate the results tables of the docs: every one over several seeds, in portable
mode, so that any x86-64 machine prints the same numbers.

    python scripts/results_tables.py                  # every table (hours on 2 cores)
    python scripts/results_tables.py --only default   # one of them
    python scripts/results_tables.py --list           # their names and commands
    python scripts/results_tables.py --only talk-less --fill   # only its missing runs

Each table is one ``murmur run PRESET --seeds S --portable`` whose comparison table
(mean +- sd across seeds) is written, with the command and its wall time, to
``docs/results/NAME.md``. The README and the manual's pages show parts of those files
where a table follows a marker line ``<!-- results-table: NAME [NAME ...] -->``: the
table keeps the columns its header names and takes every row of the named files'
short tables, remade by this script each time it writes a file (``--embed`` alone
remakes them). The run folders stay in ``--out`` (default ``runs/results``) for
``murmur report``.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
PAGES = (ROOT / "README.md", ROOT / "docs")
"""Where marked tables are looked for: the README and every page of the manual."""
MARKED = re.compile(r"<!-- results-table: ([\w .-]+?) -->\n((?:\|.*\n?)+)")
"""A marker line and the table under it."""
DEFAULT_OUT = Path("runs") / "results"
"""Where the run folders go unless ``--out`` says otherwise."""


@dataclass(frozen=True)
class Table:
    """One results table: a preset, its settings, and what the table shows."""

    name: str
    preset: str
    settings: tuple[str, ...]
    title: str
    plots: tuple[str, ...] = ()
    """Plots of :mod:`murmur.metrics.plots` (``accuracy_vs_bytes``, ...) drawn from the
    runs into ``docs/results/NAME-PLOT.png`` and shown under the table."""


TABLES = (
    Table(
        "default",
        "default",
        (),
        "The default experiment: mnist5k, 10 agents on a ring, one digit per agent, "
        "MLP 784-100-10, 3000 iterations of 32 samples per agent",
    ),
    Table(
        "default-iid",
        "default",
        ("data.partition=iid",),
        "The default experiment on an i.i.d. split",
    ),
    Table(
        "talk-less",
        "talk-less",
        (),
        "Talking less: DSGD (on DETSGRAD's Laplacian weights and on the Metropolis weights "
        "of CHOCO-SGD, SPARQ-SGD and BEER), DETSGRAD, DETSGRAD-GT, CHOCO-SGD, SPARQ-SGD and "
        "BEER on the default split",
    ),
    Table(
        "talk-less-iid",
        "talk-less",
        ("data.partition=iid",),
        "Talking less on an i.i.d. split",
    ),
    Table(
        "talk-less-bytes",
        "talk-less-bytes",
        (),
        "Accuracy against bytes on the default split: BEER and CHOCO-SGD with top-k at 1, 5 "
        "and 20 %, BEER with rank-1 and rank-4 messages, DETSGRAD with the scaled sign, "
        "DSGD and uncompressed gradient tracking",
        plots=("accuracy_vs_bytes",),
    ),
    Table(
        "talk-less-digits",
        "talk-less",
        (
            "data.dataset=digits",
            "topology.agents=20",
            "topology.graph=erdos_renyi",
            "topology.probability=0.3",
            "data.labels_per_agent=2",
        ),
        "Talking less on digits: 20 agents on an Erdos-Renyi graph (p = 0.3), two labels per agent",
    ),
    Table(
        "talk-less-letter",
        "talk-less-letter",
        (),
        "Talking less on letter: 16 agents on a 4 x 4 torus, Dirichlet split (alpha = 0.5)",
    ),
    Table(
        "faults-drop",
        "faults-drop",
        (),
        "Lost messages: DSGD and DETSGRAD on the default experiment with 0, 10, 30 and 50 % "
        "of messages dropped",
    ),
    Table(
        "faults-links",
        "faults-links",
        (),
        "Failing links and crashed agents: DSGD and DETSGRAD on the default experiment",
    ),
    Table(
        "faults-resend",
        "faults-resend",
        (),
        "Lost messages sent again: gradient tracking at 0 and 30 % loss, and DSGD, DETSGRAD, "
        "DETSGRAD-GT and gradient tracking at 30 % loss with faults.resend",
    ),
    Table(
        "cnn",
        "default",
        ("model.name=cnn",),
        "The default experiment with the LeNet-5 CNN (61,706 parameters)",
    ),
    Table(
        "matching",
        "matching",
        (),
        "DSGD on 16 agents: a fixed ring against one random matching per step, "
        "combine-then-adapt and adapt-then-combine",
    ),
    *(
        Table(
            f"ssfn-{dataset}",
            f"ssfn-compare-{dataset}",
            (),
            f"SSFN, synchronous and asynchronous dSSFN on {dataset} (20 nodes on a ring, "
            "i.i.d. split)",
        )
        for dataset in ("vowel", "satimage", "letter", "mnist5k")
    ),
    Table(
        "asysg-speedup",
        "asysg-speedup",
        (),
        "AsySG-con speed-up: iterations and virtual time to training loss 0.25 for W = 1 to 32",
    ),
)


def command(table: Table, seeds: str, out: Path) -> list[str]:
    """The ``murmur run`` that makes ``table``."""
    sets = [item for setting in table.settings for item in ("--set", setting)]
    return [
        *("murmur", "run", table.preset, *sets),
        *("--seeds", seeds, "--portable", "--quiet", "--out", str(out / table.name)),
    ]


def make(table: Table, seeds: str, out: Path, *, run: bool = True) -> Path:
    """Run ``table``'s command (unless ``run`` is false: its run folders are read as they
    are) and write its markdown file from the folders; returns the file."""
    argv = command(table, seeds, out)
    folder = out / table.name
    timing = folder / "wall-minutes.txt"
    if run:
        started = time.perf_counter()
        executable = [sys.executable, "-m", "murmur", *argv[1:]]
        subprocess.run(executable, check=False, cwd=ROOT, stdout=subprocess.DEVNULL)
        timing.write_text(f"{(time.perf_counter() - started) / 60:.0f}\n")
    elif not folder.is_dir():
        raise SystemExit(f"{folder}: no such run folder; run the table first")
    minutes = f"{timing.read_text().strip()} min" if timing.is_file() else _run_minutes(folder)
    RESULTS.mkdir(parents=True, exist_ok=True)
    target = RESULTS / f"{table.name}.md"
    full = tables(table, seeds, folder)
    shown = shlex.join(command(table, seeds, DEFAULT_OUT))
    drawn = "".join(f"![{name}]({path.name})\n\n" for name, path in draw(table, seeds, folder))
    stopped = STOPPED_NOTE if "| stopped |" in full.splitlines()[0] else ""
    target.write_text(
        f"{table.title}; seeds {seeds}, portable mode, mean ± sd across seeds.{stopped}\n\n"
        f"{short(full)}\n{drawn}Every figure:\n\n{full}\n"
        f"Made by `{shown}` ({minutes} on this machine; "
        f"`python scripts/results_tables.py --only {table.name}` remakes this file).\n"
    )
    return target


def readme_table(name: str, columns: list[str]) -> str:
    """The short table of ``docs/results/NAME.md`` with only ``columns`` (its headers;
    a column it lacks is taken from the file's "Every figure" table), written as the
    README writes figures (``+-``)."""
    text = (RESULTS / f"{name}.md").read_text()
    header, rows = _table(text.split("\n\n")[1])
    every = text.partition("Every figure:\n\n")[2].split("\n\n")[0]
    full_header, full_rows = _table(every) if every else ([], [])
    missing = [column for column in columns if column not in header + full_header]
    if missing:
        raise SystemExit(f"{name}: no column {missing}; it has {header + full_header}")
    full = {row[0]: row for row in full_rows}
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = [
            row[header.index(column)]
            if column in header
            else full[row[0]][full_header.index(column)]
            for column in columns
        ]
        lines.append("| " + " | ".join(cell.replace("±", "+-") for cell in cells) + " |")
    return "\n".join(lines)


def _table(block: str) -> tuple[list[str], list[list[str]]]:
    """A markdown table's header and rows, as stripped cells."""
    lines = [line for line in block.splitlines() if line.startswith("|")]
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    return cells[0], cells[2:]


def marked_table(names: list[str], columns: list[str]) -> str:
    """The rows of every named file's short table, in order, with only ``columns``."""
    parts = [readme_table(name, columns).splitlines() for name in names]
    return "\n".join(parts[0][:2] + [row for part in parts for row in part[2:]])


def embedded(text: str) -> str:
    """``text`` with every table under a results-table marker remade from
    ``docs/results``, its header's columns kept."""

    def remake(match: re.Match[str]) -> str:
        header = match.group(2).splitlines()[0]
        columns = [cell.strip() for cell in header.strip().strip("|").split("|")]
        table = marked_table(match.group(1).split(), columns)
        return f"<!-- results-table: {match.group(1)} -->\n{table}\n"

    return MARKED.sub(remake, text)


def marked_pages() -> list[Path]:
    """The README and every page of the manual."""
    return [
        page
        for where in PAGES
        for page in ([where] if where.is_file() else sorted(where.rglob("*.md")))
    ]


def embed() -> list[Path]:
    """Remake every marked table of the README and the manual; the pages changed."""
    changed = []
    for page in marked_pages():
        text = page.read_text(encoding="utf-8")
        remade = embedded(text)
        if remade != text:
            page.write_text(remade, encoding="utf-8")
            changed.append(page)
    return changed


def _run_minutes(folder: Path) -> str:
    """The runs' own wall minutes, summed, for a table remade in parts (``--fill``)."""
    import json

    seconds = sum(
        float(json.loads(path.read_text()).get("wall_seconds", 0.0))
        for path in folder.rglob("summary.json")
    )
    return f"{seconds / 60:.0f} min of its runs' own time"


STOPPED_NOTE = (
    " Seeds that a rule stopped early (collapsed or diverged) are in no mean: a figure is"
    " over the finished seeds, and the stopped column says what happened to the others."
)
"""What a page whose runs include some stopped early adds to its first line."""
SHORT = (
    "name",
    "seeds",
    "final acc mean %",
    "stopped",
    "final acc min %",
    "final acc max %",
    "messages",
    "messages vs DSGD %",
    "bytes vs DSGD %",
    "lost msgs %",
    "virtual s",
    "its to target",
    "virtual s to target",
    "iteration speedup",
    "time speedup",
    "reached",
)
"""The columns of the short table, where the full one has them."""
READABLE = {
    "final acc mean %": "mean acc %",
    "final acc min %": "worst agent %",
    "final acc max %": "best agent %",
}
"""The short table's names of the final evaluation's columns."""


def short(markdown: str) -> str:
    """The first table of ``markdown`` with only the :data:`SHORT` columns, whose
    headers are the README's."""
    lines = markdown.splitlines()
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    kept = [i for i, name in enumerate(header) if name in SHORT]
    rows = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows.append("| " + " | ".join(cells[i] for i in kept) + " |")
    names = [READABLE.get(header[i], header[i]) for i in kept]
    rule = "|" + "|".join("---" if i == 0 else "---:" for i in range(len(kept))) + "|"
    return "\n".join(["| " + " | ".join(names) + " |", rule, *rows]) + "\n"


def _runs(table: Table, seeds: str, folder: Path, *extra: str) -> tuple[str, list[Any]]:
    """``table``'s experiment name and, for each of its runs, (label, config, folder)."""
    from murmur.config import load_experiment, parse_seeds

    listed = ", ".join(map(str, parse_seeds(seeds)))
    experiment = load_experiment(table.preset, [*table.settings, f"run.seeds=[{listed}]", *extra])
    runs = [
        (label, config, folder / experiment.folder(index))
        for index, (label, config) in enumerate(experiment.runs)
    ]
    return experiment.name, runs


def fill(table: Table, seeds: str, folder: Path) -> int:
    """Train, in this process and in portable mode, the runs of ``table`` whose folders
    hold no summary (removed to be remade, or never run); how many it trained."""
    from murmur import portable
    from murmur.experiment import run
    from murmur.training.plan import plan

    portable.pin()
    name, runs = _runs(table, seeds, folder, "run.portable=true")
    trained = 0
    for label, config, where in runs:
        if (where / "summary.json").is_file():
            continue
        if where.exists():
            raise SystemExit(f"{where} holds an unfinished run: remove it first")
        print(f"{table.name}: training {where.relative_to(folder)}", file=sys.stderr)
        run(plan(config), where, name=label, preset=name, progress=False)
        trained += 1
    return trained


def draw(table: Table, seeds: str, folder: Path) -> list[tuple[str, Path]]:
    """Draw ``table``'s plots from its finished runs (seeds as one line with a band)
    into docs/results; returns each plot's name and file."""
    if not table.plots:
        return []
    from murmur.metrics import plots
    from murmur.metrics.report import read_run

    places = [where for _, _, where in _runs(table, seeds, folder)[1]]
    runs = [read_run(where) for where in places if (where / "summary.json").is_file()]
    finished = [run for run in runs if not run.failed]
    drawn = []
    for name in table.plots:
        path = RESULTS / f"{table.name}-{name}.png"
        getattr(plots, f"plot_{name}")(finished, path)
        drawn.append((name.replace("_", " "), path))
    return drawn


def tables(table: Table, seeds: str, folder: Path) -> str:
    """The comparison's tables (``comparison.md``, by the current code) from its run
    folders, in the order of its members; a run that failed is named under "Failed:"."""
    from murmur.metrics.report import read_run
    from murmur.metrics.seed_table import comparison_markdown

    groups: dict[str, list] = {}
    failed = []
    for label, _, where in _runs(table, seeds, folder)[1]:
        if not (where / "summary.json").is_file():
            failed.append(f"{where.relative_to(folder)}: did not run")
            continue
        done = read_run(where)
        if done.failed:
            failed.append(f"{where.relative_to(folder)} failed: {done.summary['error']}")
        else:
            groups.setdefault(label, []).append(done.summary)
    return comparison_markdown(list(groups.values()), failed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=[t.name for t in TABLES])
    parser.add_argument("--seeds", default="0-4", help="seeds of every table (default 0-4)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--list", action="store_true", help="print the tables' commands")
    parser.add_argument(
        "--readme",
        metavar="COLUMN",
        nargs="+",
        help="print the short table of each --only file with these columns, for the README",
    )
    parser.add_argument(
        "--embed",
        action="store_true",
        help="train nothing: remake the marked tables of the README and the manual",
    )
    parser.add_argument(
        "--fill",
        action="store_true",
        help="train only the runs whose folders in --out are missing, then write the files",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="train nothing: write the files again from the run folders already in --out",
    )
    args = parser.parse_args(argv)
    chosen = [table for table in TABLES if not args.only or table.name in args.only]
    if not (args.embed or args.readme or args.list):
        _write_tables(chosen, args)
    if not (args.readme or args.list):
        for page in embed():
            print(f"remade the marked tables of {page.relative_to(ROOT)}")
        return 0
    for table in chosen:
        if args.readme:
            print(readme_table(table.name, args.readme))
        else:
            print(f"{table.name}: {shlex.join(command(table, args.seeds, args.out))}")
    return 0


def _write_tables(chosen: list[Table], args: argparse.Namespace) -> None:
    """Train (all, or with ``--fill`` the missing runs, or none) and write the files."""
    for table in chosen:
        if args.fill:
            trained = fill(table, args.seeds, args.out / table.name)
            written = make(table, args.seeds, args.out, run=False)
            print(f"{table.name}: {trained} runs trained; {written}")
        else:
            print(f"{table.name}: {make(table, args.seeds, args.out, run=not args.report_only)}")


if __name__ == "__main__":
    sys.exit(main())
