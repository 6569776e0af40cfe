"""``murmur tune TARGET``: each member's steps chosen on a validation split, by Optuna.

    plan_search (members.py: configs, validation split, ranges, all checked)
      -> one study per member in OUT/tune.db (study.py: trials, pruning, resuming)
           a trial: one run per seed at a point of the member's ranges (space.py),
           scored on the validation split (objective.py)
      -> OUT/tuned.toml (tuned_file.py): the comparison at the chosen steps
      -> OUT/tuning.md and its plots (report.py)

Papers tune each method on held-out data and report each at its best; so does this:
the test set is never read while tuning, and ``murmur run OUT/tuned.toml --seeds 0-4``
gives the test figures. Running the same command again with the same ``--out``
resumes a tune that was interrupted: finished trials are kept, only the budget left
runs.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import optuna

from murmur import portable
from murmur.errors import UsageError
from murmur.tune.members import (
    DEFAULT_TRIALS,
    DEFAULT_VALIDATION,
    Member,
    Search,
    SearchSettings,
    plan_search,
)
from murmur.tune.objective import Objective
from murmur.tune.report import REPORT, write_report
from murmur.tune.space import RangeSetting, parse_range
from murmur.tune.study import DATABASE, Tuned, check_resumable, open_storage, tune_member
from murmur.tune.tuned_file import FILE, tuned_config, write_tuned_file

__all__ = [
    "DATABASE",
    "DEFAULT_TRIALS",
    "DEFAULT_VALIDATION",
    "FILE",
    "REPORT",
    "Member",
    "Objective",
    "RangeSetting",
    "Search",
    "SearchSettings",
    "Tuned",
    "check_folder",
    "parse_range",
    "plan_search",
    "tune",
    "tuned_config",
]


def tune(search: Search, folder: Path, *, progress: bool = True) -> list[Tuned]:
    """Tune every member of ``search`` in ``folder`` (new, empty, or holding an earlier
    tune of the same search, which is resumed); write ``tuned.toml`` and ``tuning.md``
    there. UsageError before anything is written for a folder it cannot use."""
    if not check_folder(search, folder):
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise UsageError(f"cannot create tune folder {folder}: {error.strerror}") from None
    if any(member.config.run.portable for member in search.members):
        portable.pin()
    storage = open_storage(folder)
    results = []
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # murmur prints its own lines
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            for member in search.members:
                results.append(tune_member(storage, search, member, progress))
    except KeyboardInterrupt:
        print(f"murmur: the same command resumes the tune in {folder}", file=sys.stderr)
        raise
    finally:
        optuna.logging.set_verbosity(verbosity)
    write_tuned_file(search, results, folder)
    write_report(search, results, folder)
    return results


def check_folder(search: Search, folder: Path) -> bool:
    """Whether ``folder`` holds a tune of ``search`` to resume (False: it is free,
    missing or empty); UsageError where it is neither. Nothing is written."""
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{folder} is a file, not a folder; choose another --out")
    if not folder.is_dir() or not any(folder.iterdir()):
        return False
    if not (folder / DATABASE).is_file():
        raise UsageError(
            f"{folder} already exists and holds no tune ({DATABASE}); choose another --out"
        )
    check_resumable(open_storage(folder), search, folder)
    return True
