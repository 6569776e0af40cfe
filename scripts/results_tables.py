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

A table may be tuned (:class:`Tuning`): its page then runs each member at steps chosen
on held-out data. ``murmur tune PRESET ... --out OUT/NAME-tune`` first chooses every
member's steps on a validation split, on one budget for all of them (sampler, trials
per member, seeds, iterations), in portable mode; then the page is ``murmur run
OUT/NAME-tune/tuned.toml --seeds S --portable``, and says above its table how the steps
were tuned and what each member chose; ``docs/results/NAME-tuning.md`` is the tune's
report. A tune that finished is not run again (the same command; one cut short, or
given more trials, resumes), with ``--fill`` too.
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
class Tuning:
    """How a table's steps are chosen before its runs: one ``murmur tune`` of every member
    on a validation split, on one budget for all of them."""

    trials: int
    """Trials per member (``--trials``)."""
    minutes_per_run: float
    """Minutes of one run of the page's iterations on one core of this project's machine
    (from the page's last remake), for the estimate that ``--list`` prints."""
    seeds: str = "0-1"
    """Each trial runs once per seed and scores their mean (``--seeds``)."""
    sampler: str = "tpe"
    max_bytes: str | None = "own"
    """``--max-bytes-vs-dsgd``: ``own`` (the default: each member's chosen steps send no
    more bytes than its preset's, so that tuning cannot turn a method that talks less
    into one that sends at every step), a percentage, or None (no limit)."""
    settings: tuple[str, ...] = ()
    """``--set`` of the tune alone (``run.iterations=1000`` for a shorter tune); the
    page's runs take the preset's values of these keys back."""


@dataclass(frozen=True)
class Table:
    """One results table: a preset, its settings, and what the table shows."""

    name: str
    preset: str
    settings: tuple[str, ...]
    title: str
    plots: tuple[str, ...] = ()
    """Plots of :mod:`murmur.reporting.plots` (``accuracy_vs_bytes``, ...) drawn from the
    runs into ``docs/results/NAME-PLOT.png`` and shown under the table."""
    tuning: Tuning | None = None
    """None: the page runs the preset's own steps."""


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
        tuning=Tuning(trials=8, minutes_per_run=1.0),
    ),
    Table(
        "talk-less-iid",
        "talk-less",
        ("data.partition=iid",),
        "Talking less on an i.i.d. split",
        tuning=Tuning(trials=8, minutes_per_run=1.0),
    ),
    Table(
        "talk-less-bytes",
        "talk-less-bytes",
        (),
        "Accuracy against bytes on the default split: BEER and CHOCO-SGD with top-k at 1, 5 "
        "and 20 %, BEER with rank-1 and rank-4 messages, MoTEF with top-k at 1 and 5 %, "
        "16-bit values with packed indices (BEER at 5 and 10 %, MoTEF at 5 %), BEER with "
        "triggers on both messages, LEAD at top-k 20 % (also with 16-bit values and packed "
        "indices), DETSGRAD with the scaled sign, DSGD and uncompressed gradient tracking",
        plots=("accuracy_vs_bytes", "accuracy_vs_messages"),
        tuning=Tuning(trials=8, minutes_per_run=1.6),
    ),
    Table(
        "lead-stability",
        "lead-stability",
        (),
        "LEAD with 16-bit values and packed indices at top-k 20, 10 and 5 %: at the steps "
        "tuned for 20 % in talk-less-bytes (a = 0.2935, gamma = 0.675) and at smaller "
        "consensus steps, on the default split; a sweep of the step that shows where it "
        "holds, so no member is tuned",
        plots=("consensus_distance", "accuracy"),
    ),
    Table(
        "lead-stability-letter",
        "lead-stability-letter",
        (),
        "LEAD with top-k 20 %, 16-bit values and packed indices on letter's 4 x 4 torus: "
        "its step a at gamma = 0.5 and its consensus step gamma at a = 0.3, from the point "
        "talk-less-bytes-letter's tune chose (a = 0.05, gamma = 0.5); a sweep of the steps "
        "that shows where it holds, so no member is tuned",
        plots=("consensus_distance", "accuracy"),
    ),
    Table(
        "talk-less-bytes-iid",
        "talk-less-bytes",
        ("data.partition=iid",),
        "Accuracy against bytes on an i.i.d. split: the members of talk-less-bytes",
        plots=("accuracy_vs_bytes",),
        tuning=Tuning(trials=8, minutes_per_run=1.6, seeds="0"),
    ),
    Table(
        "talk-less-bytes-letter",
        "talk-less-bytes",
        (
            "data.dataset=letter",
            "data.partition=dirichlet",
            "data.dirichlet_alpha=0.5",
            "topology.graph=torus",
            "topology.agents=16",
        ),
        "Accuracy against bytes on letter: 16 agents on a 4 x 4 torus, Dirichlet split "
        "(alpha = 0.5), the members of talk-less-bytes",
        plots=("accuracy_vs_bytes",),
        tuning=Tuning(trials=8, minutes_per_run=0.3),
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
        tuning=Tuning(trials=8, minutes_per_run=0.6),
    ),
    Table(
        "talk-less-letter",
        "talk-less-letter",
        (),
        "Talking less on letter: 16 agents on a 4 x 4 torus, Dirichlet split (alpha = 0.5)",
        tuning=Tuning(trials=8, minutes_per_run=0.2),
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
        tuning=Tuning(trials=6, minutes_per_run=6.0),
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
"""The tuned tables tune at the page's own iterations (3000), every member on seeds 0 and
1 (a point chosen on one seed may collapse on the next) with TPE: 8 trials per member
for the MLP's pages, 6 for the CNN's, whose runs cost about six times as much."""


def command(table: Table, seeds: str, out: Path) -> list[str]:
    """The ``murmur run`` that makes ``table``: of its preset, or of its tuned file."""
    sets = [item for setting in page_settings(table) for item in ("--set", setting)]
    return [
        *("murmur", "run", run_target(table, out), *sets),
        *("--seeds", seeds, "--portable", "--quiet", "--out", str(out / table.name)),
    ]


def run_target(table: Table, out: Path) -> str:
    """What ``table``'s runs run: its preset, or the ``tuned.toml`` its tune wrote."""
    if table.tuning is None:
        return table.preset
    return str(tune_folder(table, out) / "tuned.toml")


def page_settings(table: Table) -> tuple[str, ...]:
    """The ``--set`` of ``table``'s runs: its own, and for each key only its tune sets,
    the value the preset gives it."""
    if table.tuning is None:
        return table.settings
    own = {_key(setting) for setting in table.settings}
    tune_only = dict.fromkeys(_key(setting) for setting in table.tuning.settings)
    restored = [f"{key}={_preset_value(table, key)}" for key in tune_only if key not in own]
    return (*table.settings, *restored)


def _key(setting: str) -> str:
    return setting.partition("=")[0].strip()


def _preset_value(table: Table, key: str) -> str:
    """The value ``key`` (``section.name``) has in every member of ``table``, as TOML."""
    import tomli_w

    from murmur.config import load_experiment

    section, _, name = key.partition(".")
    runs = load_experiment(table.preset, list(table.settings)).runs
    values = {
        tomli_w.dumps({"v": config.to_dict()[section][name]}).removeprefix("v = ").strip()
        for _, config in runs
    }
    if len(values) != 1:
        raise SystemExit(f"{table.name}: its members differ in {key}; its tune cannot set it")
    return values.pop()


def tune_folder(table: Table, out: Path) -> Path:
    return out / f"{table.name}-tune"


def tune_command(table: Table, out: Path) -> list[str]:
    """The ``murmur tune`` that chooses ``table``'s steps, in portable mode."""
    if table.tuning is None:
        raise ValueError(f"{table.name} is not tuned")
    tuning = table.tuning
    settings = (*table.settings, *tuning.settings, "run.portable=true")
    sets = [item for setting in settings for item in ("--set", setting)]
    return [
        *("murmur", "tune", table.preset, *sets, "--seeds", tuning.seeds),
        *("--trials", str(tuning.trials), "--sampler", tuning.sampler),
        *(("--max-bytes-vs-dsgd", tuning.max_bytes) if tuning.max_bytes is not None else ()),
        *("--quiet", "--out", str(tune_folder(table, out))),
    ]


FINISHED = "finished-command.txt"
"""In a tune folder: the ``murmur tune`` command that last ran to its end there."""


def tune(table: Table, out: Path) -> bool:
    """Run ``table``'s tune unless the same command finished in its folder before (one
    cut short, or given more trials, resumes there); whether it ran."""
    argv = tune_command(table, out)
    finished = tune_folder(table, out) / FINISHED
    if finished.is_file() and finished.read_text().strip() == shlex.join(argv):
        return False
    status = murmur(argv)
    if status != 0:
        raise SystemExit(
            f"{table.name}: {shlex.join(argv)} exited with {status}; the same command resumes it"
        )
    finished.write_text(shlex.join(argv) + "\n")
    return True


def murmur(argv: list[str]) -> int:
    """Run the command ``argv`` (``murmur ...``) in a process of its own, from the
    repository; its exit status. Its output is dropped, its error lines shown."""
    executable = [sys.executable, "-m", "murmur", *argv[1:]]
    done = subprocess.run(executable, check=False, cwd=ROOT, stdout=subprocess.DEVNULL)
    return done.returncode


def make(table: Table, seeds: str, out: Path, *, run: bool = True) -> Path:
    """Tune ``table`` where it is tuned and run its command (unless ``run`` is false: the
    folders are read as they are), then write its markdown file; returns the file."""
    folder = out / table.name
    timing = folder / "wall-minutes.txt"
    if run:
        if table.tuning is not None:
            tune(table, out)
        started = time.perf_counter()
        argv = command(table, seeds, out)
        if (status := murmur(argv)) != 0:
            raise SystemExit(
                f"{table.name}: {shlex.join(argv)} exited with {status}; its page is left as "
                f"it was (--fill trains only its missing runs; remove {folder} to run all)"
            )
        timing.write_text(f"{(time.perf_counter() - started) / 60:.0f}\n")
    elif not folder.is_dir():
        raise SystemExit(f"{folder}: no such run folder; run the table first")
    minutes = f"{timing.read_text().strip()} min" if timing.is_file() else _run_minutes(folder)
    RESULTS.mkdir(parents=True, exist_ok=True)
    if table.tuning is not None:
        publish_report(table, out)
    target = RESULTS / f"{table.name}.md"
    target.write_text(page(table, seeds, out, minutes))
    return target


def page(table: Table, seeds: str, out: Path, minutes: str) -> str:
    """``docs/results/NAME.md``: the title, how the steps were tuned where they were, the
    short table, the plots, every figure and the commands that made them."""
    full = tables(table, seeds, out)
    drawn = "".join(f"![{name}]({path.name})\n\n" for name, path in draw(table, seeds, out))
    stopped = STOPPED_NOTE if "| stopped |" in full.splitlines()[0] else ""
    tuned = f"{tuning_note(table, out)}\n\n" if table.tuning is not None else ""
    made = f"`{shlex.join(command(table, seeds, DEFAULT_OUT))}` ({minutes}"
    if table.tuning is not None:
        tuned_by = shlex.join(tune_command(table, DEFAULT_OUT))
        runs_by = shlex.join(command(table, seeds, DEFAULT_OUT))
        made = f"`{tuned_by}`, then `{runs_by}` (its runs: {minutes}"
    return (
        f"{table.title}; seeds {seeds}, portable mode, mean ± sd across seeds.{stopped}\n\n"
        f"{tuned}{short(full)}\n{drawn}Every figure:\n\n{full}\n"
        f"Made by {made} on this machine; "
        f"`python scripts/results_tables.py --only {table.name}` remakes this file).\n"
    )


def tuning_note(table: Table, out: Path) -> str:
    """What a tuned table's page says above its table: how the steps were chosen, on what
    budget, each member's choice with its validation score, and where every trial is."""
    from murmur.config import load_experiment
    from murmur.tune.tuned_file import duration

    tuning = table.tuning
    if tuning is None:
        raise ValueError(f"{table.name} is not tuned")
    folder = tune_folder(table, out)
    report = folder / "tuning.md"
    if not report.is_file():
        raise SystemExit(f"{report}: no tuning report; run the table first")
    header, rows = _table(_first_table(report.read_text()))
    column = {name: header.index(name) for name in ("member", "chosen", "validation", "wall s")}
    configs = [config for _, config in load_experiment(str(folder / "tuned.toml")).runs]
    iterations = " or ".join(sorted({str(config.run.iterations) for config in configs}))
    seeds = ", ".join(str(seed) for seed in _seeds(tuning.seeds))
    seconds = sum(float(row[column["wall s"]]) for row in rows)
    chosen = "".join(f"\n- {_choice(row, column)}" for row in rows)
    return (
        "Steps tuned on held-out data: `murmur tune` chose each member's steps on a validation "
        f"split ({_split(configs)}, held out of the training rows class by class before the "
        "agents' split; the runs below train without them too), never on the test set, on "
        f"one budget for every member: sampler {tuning.sampler} (seeded), {tuning.trials} "
        f"trials per member, each trial one run of {iterations} iterations per seed ({seeds}) "
        f"scored by the mean of their validation scores{_limit_words(tuning)}; "
        f"{duration(seconds)} of trials on "
        f"this machine, in portable mode. The points chosen, with their validation scores:"
        f"\n{chosen}\n\n"
        f"Every trial, its point, score and state: [{table.name}-tuning.md]"
        f"({table.name}-tuning.md)."
    )


def _limit_words(tuning: Tuning) -> str:
    """The page's words for its tune's ``--max-bytes-vs-dsgd``."""
    if tuning.max_bytes is None:
        return ""
    if tuning.max_bytes == "own":
        return (
            ", no point sending more bytes than the member's own (preset) steps do "
            "(`--max-bytes-vs-dsgd own`)"
        )
    return f", no point sending more than {tuning.max_bytes} % of DSGD's bytes"


def _choice(row: list[str], column: dict[str, int]) -> str:
    """A member's chosen point and its validation score, from tuning.md's overview."""
    member, point = row[column["member"]], row[column["chosen"]]
    if point == "-":
        return f"{member}: no trial completed; its preset's steps"
    return f"{member}: {point} (validation {row[column['validation']]})"


def _split(configs: list[Any]) -> str:
    """The validation split of ``configs``, in words."""
    shares = sorted({config.data.validation for config in configs})
    if all(shares):
        return " or ".join(f"data.validation = {share:g}" for share in shares)
    paths = sorted({str(config.data.validation_path) for config in configs})
    return f"data.validation_path = {' or '.join(paths)}"


def _seeds(text: str) -> list[int]:
    from murmur.config import parse_seeds

    return list(parse_seeds(text))


IMAGE = re.compile(r"^!\[.*\]\(.*\)\n\n?", flags=re.M)
"""A line of tuning.md that shows a plot."""


def publish_report(table: Table, out: Path) -> Path:
    """Copy the tune's ``tuning.md`` to ``docs/results/NAME-tuning.md``, its plots left in
    the tune folder; returns the copy."""
    report = tune_folder(table, out) / "tuning.md"
    if not report.is_file():
        raise SystemExit(f"{report}: no tuning report; run the table first")
    shown = tune_folder(table, DEFAULT_OUT)
    target = RESULTS / f"{table.name}-tuning.md"
    below_heading = report.read_text().partition("\n")[2]
    target.write_text(
        f"# Tuning the steps of {table.name}\n{IMAGE.sub('', below_heading).rstrip()}\n\n"
        f"Written by `{shlex.join(tune_command(table, DEFAULT_OUT))}` into `{shown}`, "
        f"where the plot of each tuned key is; `python scripts/results_tables.py --only "
        f"{table.name}` remakes this copy.\n"
    )
    return target


def estimate(table: Table, seeds: str) -> str:
    """About how long a tuned table takes on one core: every trial of its tune run to its
    end (pruning stops many sooner), then its page's runs."""
    if table.tuning is None:
        raise ValueError(f"{table.name} is not tuned")
    tuning = table.tuning
    members, iterations = _size(table.preset, table.settings)
    tune_iterations = _size(table.preset, (*table.settings, *tuning.settings))[1]
    trials = members * tuning.trials * len(_seeds(tuning.seeds))
    runs = members * len(_seeds(seeds))
    tune_minutes = trials * tuning.minutes_per_run * tune_iterations / iterations
    run_minutes = runs * tuning.minutes_per_run
    return (
        f"about {_hours(tune_minutes + run_minutes)} on one core: the tune at most "
        f"{_hours(tune_minutes)} ({members} members x {tuning.trials} trials x "
        f"{len(_seeds(tuning.seeds))} seeds = {trials} runs of {tune_iterations} iterations), "
        f"the page {_hours(run_minutes)} ({runs} runs), at {tuning.minutes_per_run:g} min a "
        f"run of {iterations} iterations"
    )


def _size(preset: str, settings: tuple[str, ...]) -> tuple[int, int]:
    """The number of members of ``preset`` with ``settings``, and their most iterations."""
    from murmur.config import load_experiment

    runs = load_experiment(preset, list(settings)).runs
    return len(runs), max(config.run.iterations for _, config in runs)


def _hours(minutes: float) -> str:
    """``50 min``, ``2 h`` or ``6 h 48 min``."""
    hours, rest = divmod(round(minutes), 60)
    shown = [f"{hours} h"] * bool(hours) + [f"{rest} min"] * bool(rest or not hours)
    return " ".join(shown)


def readme_table(name: str, columns: list[str]) -> str:
    """The short table of ``docs/results/NAME.md`` with only ``columns`` (its headers;
    a column it lacks is taken from the file's "Every figure" table), written as the
    README writes figures (``+-``)."""
    text = (RESULTS / f"{name}.md").read_text()
    header, rows = _table(_first_table(text))
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


def _first_table(text: str) -> str:
    """The first markdown table of ``text``."""
    return next(block for block in text.split("\n\n") if block.startswith("|"))


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


def _runs(table: Table, seeds: str, out: Path, *extra: str) -> tuple[str, list[Any]]:
    """``table``'s experiment name and, for each of its runs, (label, config, folder)."""
    from murmur.config import load_experiment

    listed = ", ".join(map(str, _seeds(seeds)))
    settings = [*page_settings(table), f"run.seeds=[{listed}]", *extra]
    experiment = load_experiment(run_target(table, out), settings)
    runs = [
        (label, config, out / table.name / experiment.folder(index))
        for index, (label, config) in enumerate(experiment.runs)
    ]
    return experiment.name, runs


def fill(table: Table, seeds: str, out: Path) -> int:
    """Train, in this process and in portable mode, the runs of ``table`` whose folders
    hold no summary (removed to be remade, or never run); how many it trained. A tuned
    table's tune must have run (:func:`tune`)."""
    from murmur import portable
    from murmur.experiment import run
    from murmur.training.plan import plan

    folder = out / table.name
    name, runs = _runs(table, seeds, out, "run.portable=true")
    missing = [
        (label, config, where)
        for label, config, where in runs
        if not (where / "summary.json").is_file()
    ]
    for _, _, where in missing:
        if where.exists():
            raise SystemExit(f"{where} holds an unfinished run: remove it first")
    if missing:
        portable.pin()  # before anything computes; nothing to train leaves the process as it is
    for label, config, where in missing:
        print(f"{table.name}: training {where.relative_to(folder)}", file=sys.stderr)
        run(plan(config), where, name=label, preset=name, progress=False)
    return len(missing)


def draw(table: Table, seeds: str, out: Path) -> list[tuple[str, Path]]:
    """Draw ``table``'s plots from its finished runs (seeds as one line with a band)
    into docs/results; returns each plot's name and file."""
    if not table.plots:
        return []
    from murmur.reporting import plots
    from murmur.reporting.report import read_run

    places = [where for _, _, where in _runs(table, seeds, out)[1]]
    runs = [read_run(where) for where in places if (where / "summary.json").is_file()]
    finished = [run for run in runs if not run.failed]
    drawn = []
    for name in table.plots:
        path = RESULTS / f"{table.name}-{name}.png"
        getattr(plots, f"plot_{name}")(finished, path)
        drawn.append((name.replace("_", " "), path))
    return drawn


def tables(table: Table, seeds: str, out: Path) -> str:
    """The comparison's tables (``comparison.md``, by the current code) from its run
    folders, in the order of its members; a run that failed is named under "Failed:"."""
    from murmur.reporting.report import read_run
    from murmur.reporting.seed_table import comparison_markdown

    groups: dict[str, list] = {}
    failed = []
    folder = out / table.name
    for label, _, where in _runs(table, seeds, out)[1]:
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
            print("\n".join(listing(table, args.seeds, args.out)))
    return 0


def listing(table: Table, seeds: str, out: Path) -> list[str]:
    """What ``--list`` prints of ``table``: its commands and, for a tuned one, the time
    it takes."""
    commands = [command(table, seeds, out)]
    if table.tuning is not None:
        commands.insert(0, tune_command(table, out))
    lines = [f"{table.name}: {shlex.join(argv)}" for argv in commands]
    if table.tuning is not None:
        lines.append(f"{table.name}: {estimate(table, seeds)}")
    return lines


def _write_tables(chosen: list[Table], args: argparse.Namespace) -> None:
    """Train (all, or with ``--fill`` the missing runs, or none) and write the files."""
    for table in chosen:
        if args.fill:
            if table.tuning is not None:
                tune(table, args.out)
            trained = fill(table, args.seeds, args.out)
            written = make(table, args.seeds, args.out, run=False)
            print(f"{table.name}: {trained} runs trained; {written}")
        else:
            print(f"{table.name}: {make(table, args.seeds, args.out, run=not args.report_only)}")


if __name__ == "__main__":
    sys.exit(main())
