"""Whether every run of a comparison stayed bounded: its consensus distance (the
agents' mean distance to their average model) around the middle and at the end of
the run, and the largest it reached in the second half, mean over seeds.

    python scripts/consensus_check.py runs/results/talk-less

"Around the middle" and "at the end" are medians of :data:`WINDOW` evaluations (those
nearest the middle iteration, and the last ones), so that one evaluation taken just
after a swing (local steps, an agent pulled to its own data) does not count as growth;
the largest value shows the swings. A run is called growing when its distance at the
end is more than 1.75 times that around the middle and more than 0.5; a member is
listed with how many of its seeds grew. A seed that a rule of ``[collapse]`` stopped
(summary status ``collapsed`` or ``diverged``) is in no mean: it is counted in the
last column, as the results pages show it. Exit status 1 when any finished run grew
or any run failed, 0 otherwise (a stopped seed is reported, not a failure of this
check: the page already shows it).

The medians and the test are those of the ``consensus-growing`` rule that stops runs
(:mod:`murmur.training.health`), with a lower growth: this flags what a finished run
did, the rule ends a run only at ``collapse.consensus_growth`` (3 times).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from murmur.training.health import consensus_medians, grew

GROWTH = 1.75
FLOOR = 0.5
"""Distances below this are consensus whatever their ratio."""
WINDOW = 5


def distances(run: Path) -> list[tuple[int, float]]:
    """(iteration, consensus distance) of each evaluation of a run folder."""
    lines = (run / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    return [(r["iteration"], r["consensus_distance"]) for r in records if "consensus_distance" in r]


def check(run: Path) -> tuple[float, float, float, bool]:
    """The distance around the middle and at the end, the largest in the second half,
    and whether the run grew."""
    curve = distances(run)
    iterations = [iteration for iteration, _ in curve]
    middle, end = consensus_medians(iterations, [value for _, value in curve], WINDOW)
    peak = max(value for iteration, value in curve if iteration >= iterations[-1] / 2)
    return middle, end, peak, grew(middle, end, GROWTH, FLOOR)


STOPPED = ("collapsed", "diverged")
"""The summary statuses of runs that a rule of ``[collapse]`` stopped."""


def _status(run: Path) -> str:
    """A run folder's summary status; "running" while it has no summary."""
    summary = run / "summary.json"
    return str(json.loads(summary.read_text()).get("status")) if summary.is_file() else "running"


def members(folder: Path) -> dict[str, list[Path]]:
    """Each member's seed folders (a comparison's LABEL/seed-N, or LABEL for one seed)."""
    found: dict[str, list[Path]] = {}
    for metrics in sorted(folder.glob("**/metrics.jsonl")):
        run = metrics.parent
        label = run.parent if run.name.startswith("seed-") else run
        found.setdefault(str(label.relative_to(folder)) or ".", []).append(run)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a comparison's run folder")
    folder = parser.parse_args(argv).folder
    if not folder.is_dir():
        print(f"consensus_check: {folder} is not a folder", file=sys.stderr)
        return 2
    print("| member | seeds | at the middle | at the end | largest, second half | grew |")
    print("|---|---:|---:|---:|---:|---:|")
    bad = False
    for label, runs in members(folder).items():
        statuses = [_status(run) for run in runs]
        finished = [
            run for run, status in zip(runs, statuses, strict=True) if status not in STOPPED
        ]
        failed = statuses.count("failed")
        stopped = sum(status in STOPPED for status in statuses)
        rows = [check(run) for run in finished]
        grew = sum(row[3] for row in rows)
        mean = [
            f"{statistics.fmean(row[i] for row in rows):.3g}" if rows else "-" for i in range(3)
        ]
        note = f"{grew}/{len(rows)}" + (f", {failed} failed" if failed else "")
        note += f", {stopped} stopped by a rule" if stopped else ""
        print(f"| {label} | {len(runs)} | {mean[0]} | {mean[1]} | {mean[2]} | {note} |")
        bad = bad or grew > 0 or failed > 0
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
