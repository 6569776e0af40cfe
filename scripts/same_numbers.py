"""Whether two run folders hold the same numbers: every ``summary.json`` and
``metrics.jsonl`` under the first, against the file at the same place under the second,
field by field, except the fields that measure the machine rather than the run (wall
clock, throughput, the folder's own path, the machine's description).

    python scripts/same_numbers.py runs/before runs/after

A change that should not change results (a refactoring, a move of code) is checked by
running the same commands before and after it into two folders and comparing them.
Prints one line per difference and a count; exit status 0 when every number is equal
and the two folders hold the same files, 1 otherwise, 2 for a folder that is not there.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

CLOCK = ("wall", "seconds", "per_second", "elapsed", "time", "run_dir", "machine", "started")
"""A field whose name contains one of these measures the machine or names the folder;
``virtual_seconds`` (the simulated clock) is compared all the same."""
KEPT = ("virtual_seconds", "virtual_time")


def ignored(key: str) -> bool:
    """Whether a field of this name is left out of the comparison."""
    return key not in KEPT and any(part in key for part in CLOCK)


def differences(before: Any, after: Any, where: str) -> list[str]:
    """Where ``before`` and ``after`` (parsed JSON) differ, outside the ignored fields."""
    if isinstance(before, dict) and isinstance(after, dict):
        keys = sorted((set(before) | set(after)) - {k for k in {*before, *after} if ignored(k)})
        return [d for k in keys for d in differences(before.get(k), after.get(k), f"{where}.{k}")]
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return [
            d
            for i, pair in enumerate(zip(before, after, strict=True))
            for d in differences(*pair, f"{where}[{i}]")
        ]
    return [] if before == after else [f"{where}: {before!r} != {after!r}"]


def records(path: Path) -> list[Any]:
    """A ``summary.json`` as one record, a ``metrics.jsonl`` as its lines."""
    if path.suffix == ".json":
        return [json.loads(path.read_text())]
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def compared(before: Path, after: Path) -> list[str]:
    """Every difference between the two folders' records, and files only one holds."""
    names = ("summary.json", "metrics.jsonl")
    found = {
        path.relative_to(folder)
        for folder in (before, after)
        for name in names
        for path in folder.rglob(name)
    }
    lines = []
    for relative in sorted(found):
        one, two = before / relative, after / relative
        if not (one.is_file() and two.is_file()):
            lines.append(f"{relative}: only in {before if one.is_file() else after}")
            continue
        lines += differences(records(one), records(two), str(relative))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    for folder in (args.before, args.after):
        if not folder.is_dir():
            print(f"same_numbers: {folder} is not a folder", file=sys.stderr)
            return 2
    lines = compared(args.before, args.after)
    print("\n".join(lines[:50]) + ("\n" if lines else ""), end="")
    print(f"same_numbers: {len(lines)} differences")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
