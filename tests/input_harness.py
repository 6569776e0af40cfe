"""Runs the murmur command in-process on generated input and checks the input rule.

The rule (docs/guides/running-experiments.md): bad input ends with exit status 2, exactly one line
``murmur: error: ...`` on stderr, no traceback and nothing left behind; good input
ends with exit status 0 and, for a real run, a complete run folder: its summary.json
says ``"status": "finished"``, or ``"diverged"`` or ``"collapsed"`` with ``stopped``
where a rule of ``[collapse]`` ended it early. A run that starts and then fails while
training may exit 2 with one line and keep its folder, whose summary.json says
``"status": "failed"`` with an ``"error"``.

:func:`invoke` calls :func:`murmur.cli.main` with stdout and stderr encoded as a
terminal would (stdout strict UTF-8, stderr with backslash escapes), Python
warnings recorded, a wall-clock limit, and torch's thread count and the working
directory restored afterwards. The ``check_*`` functions return the ways an
outcome breaks the rule; :func:`verdict` fails the example with a readable
message, or, when ``MURMUR_PROPERTY_FINDINGS`` names a file, appends the finding
to it (one JSON object a line) and lets the search go on, to list every distinct
violation of a long run.

Profiles (``HYPOTHESIS_PROFILE``): ``ci`` (the default) is derandomized and sized
to take about a minute; ``long`` draws random examples, 4 times as many (about
3,000 cases). ``MURMUR_PROPERTY_EXAMPLES=N`` sizes either to about N cases.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import time
import traceback
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch
from hypothesis import HealthCheck, settings

from murmur.cli import main

# ---------------------------------------------------------------- budget and profiles

CI_EXAMPLES = {
    "config-check": 250,
    "config-run": 40,
    "path-values": 30,
    "set-strings": 120,
    "toml-files": 120,
    "idx-files": 60,
    "edge-files": 90,
    "report-folders": 12,
}
"""Examples of each family in the ci profile; the long profile runs LONG_SCALE times as many."""
LONG_SCALE = 4

_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]
settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=_HEALTH,
    print_blob=False,
)
settings.register_profile(
    "long", derandomize=False, database=None, deadline=None, suppress_health_check=_HEALTH
)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
if PROFILE in ("ci", "long"):
    settings.load_profile(PROFILE)


def examples(family: str) -> int:
    """How many examples of ``family`` this session draws."""
    base = CI_EXAMPLES[family]
    wanted = os.environ.get("MURMUR_PROPERTY_EXAMPLES")
    if wanted:
        scale = int(wanted) / sum(CI_EXAMPLES.values())
    else:
        scale = LONG_SCALE if PROFILE == "long" else 1
    return max(1, round(base * scale))


def family_settings(family: str) -> settings:
    return settings(max_examples=examples(family))


CASES: Counter[str] = Counter()
"""Cases run by family: every call of murmur, for the terminal summary."""
EXITS: Counter[tuple[str, str]] = Counter()
"""Outcomes by family: exit 0, exit 2, traceback, timeout."""
FINDINGS: Counter[str] = Counter()
"""By family: violations recorded in findings mode, and timeouts."""
FAILED_RUNS: list[str] = []
"""The errors of runs that started and failed while training (their folders say so)."""
SECONDS: Counter[str] = Counter()
"""Seconds spent in murmur's calls, by family (hypothesis' own work left out)."""

# ---------------------------------------------------------------- running murmur


class _Timeout(BaseException):
    """Raised by the alarm inside a run that takes longer than its limit."""


@dataclass
class Outcome:
    argv: list[str]
    code: int | None
    stdout: str
    stderr: str
    error: str = ""
    """The traceback of an exception that escaped main, or ""."""
    signature: str = ""
    """Exception type and the innermost murmur frame, to tell violations apart."""
    warnings: list[str] = field(default_factory=list)
    timed_out: bool = False
    seconds: float = 0.0

    @property
    def stderr_lines(self) -> list[str]:
        """stderr split at newlines, as a terminal or a log shows it."""
        return self.stderr.removesuffix("\n").split("\n") if self.stderr else []


def _on_alarm(signum: int, frame: object) -> None:
    raise _Timeout


def invoke(family: str, argv: list[str], cwd: Path, limit: float = 60.0) -> Outcome:
    """``murmur ARGV`` in ``cwd``: its exit code, output, and any escaping exception."""
    CASES[family] += 1
    out_bytes, err_bytes = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(out_bytes, encoding="utf-8", errors="strict", write_through=True)
    err = io.TextIOWrapper(
        err_bytes, encoding="utf-8", errors="backslashreplace", write_through=True
    )
    threads = torch.get_num_threads()
    previous_dir = os.getcwd()
    previous_handler = signal.signal(signal.SIGALRM, _on_alarm)
    code: int | None = None
    error = signature = ""
    timed_out = False
    started = time.perf_counter()
    os.chdir(cwd)
    try:
        with (
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            warnings.catch_warnings(record=True) as caught,
        ):
            warnings.simplefilter("default")
            for quiet in (DeprecationWarning, PendingDeprecationWarning, ImportWarning):
                warnings.simplefilter("ignore", quiet)
            warnings.simplefilter("ignore", ResourceWarning)
            signal.setitimer(signal.ITIMER_REAL, limit)
            try:
                code = main(argv)
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else 1
                if exit_.code is None:
                    code = 0
            except _Timeout:
                timed_out = True
            except BaseException as exception:  # any escape is a finding
                error = traceback.format_exc()
                signature = _signature(exception)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.signal(signal.SIGALRM, previous_handler)
        os.chdir(previous_dir)
        torch.set_num_threads(threads)
        SECONDS[family] += time.perf_counter() - started
    shown = [f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})" for w in caught]
    ending = "timeout" if timed_out else "traceback" if error else f"exit {code}"
    EXITS[family, ending] += 1
    return Outcome(
        argv=list(argv),
        code=code,
        stdout=out_bytes.getvalue().decode("utf-8", "replace"),
        stderr=err_bytes.getvalue().decode("utf-8", "replace"),
        error=error,
        signature=signature,
        warnings=shown,
        timed_out=timed_out,
        seconds=time.perf_counter() - started,
    )


def _signature(exception: BaseException) -> str:
    frames = traceback.extract_tb(exception.__traceback__)
    inner = [f for f in frames if "/murmur/" in f.filename] or frames
    where = f"{Path(inner[-1].filename).name}:{inner[-1].name}" if inner else "?"
    return f"{type(exception).__name__} in {where}"


# ---------------------------------------------------------------- what is left behind


def snapshot(root: Path) -> set[str]:
    """Every path under ``root``, relative, to see what a command created."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def created(root: Path, before: set[str]) -> list[str]:
    return sorted(snapshot(root) - before)


ERROR_LINE = re.compile(r"murmur( [a-z]+)?: error: ")
"""murmur's own lines, and argparse's ("murmur run: error: ...") for a malformed command."""
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
"""Characters a terminal may take as a line break or an escape sequence."""


def _one_error_line(outcome: Outcome) -> list[str]:
    lines = outcome.stderr_lines
    problems = []
    if len(lines) != 1:
        problems.append(f"exit 2 with {len(lines)} lines on stderr, not 1")
    elif not ERROR_LINE.match(lines[0]):
        problems.append("exit 2 but the stderr line is not 'murmur: error: ...'")
    if outcome.warnings:
        problems.append(f"exit 2 and Python printed {len(outcome.warnings)} warning(s)")
    if any(CONTROL.search(line) for line in lines):
        problems.append("the error line holds control characters of the input, unescaped")
    return problems


def _common(outcome: Outcome) -> list[str] | None:
    """Problems every command shares; None when there is nothing more to check."""
    if outcome.error:
        return [f"traceback: {outcome.signature}"]
    if outcome.timed_out:
        return []  # noted by verdict, not a violation of the rule
    if "Traceback (most recent call last)" in outcome.stderr:
        return ["a traceback on stderr"]
    if outcome.code not in (0, 2):
        return [f"exit status {outcome.code}, not 0 or 2"]
    return None


def check_run(outcome: Outcome, root: Path, before: set[str], out: Path, check: bool) -> list[str]:
    """``murmur run`` (``check``: with --check) in ``root`` with ``--out out``."""
    problems = _common(outcome)
    if problems is not None:
        return problems
    new = created(root, before)
    relative = str(out.relative_to(root))
    outside = [p for p in new if p != relative and not p.startswith(relative + os.sep)]
    problems = [f"created {outside[:3]} outside --out"] if outside else []
    if outcome.code == 2:
        problems += _one_error_line(outcome)
        if out.exists():
            if check:
                problems.append("exit 2 with --check but a folder was left at --out")
            else:
                problems += _failed_folder(out)
    elif check:
        if out.exists():
            problems.append("--check exit 0 but it wrote the run folder")
    else:
        problems += _finished_folder(out)
    return problems


def _run_folders(out: Path) -> list[Path]:
    if (out / "summary.json").exists() or not out.is_dir():
        return [out]
    return sorted(p for p in out.iterdir() if p.is_dir()) or [out]


def _summary(folder: Path) -> dict | None:
    try:
        value = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _finished_folder(out: Path) -> list[str]:
    if not out.is_dir():
        return ["exit 0 but no run folder at --out"]
    problems = []
    for folder in _run_folders(out):
        missing = [
            name
            for name in ("config.toml", "metrics.jsonl", "summary.json")
            if not (folder / name).is_file()
        ]
        if missing:
            problems.append(f"exit 0 but {folder.name} lacks {', '.join(missing)}")
            continue
        summary = _summary(folder)
        status = None if summary is None else summary.get("status")
        if summary is None or status not in ("finished", *STOPPED):
            problems.append(f"exit 0 but summary.json status is {status!r}, not 'finished'")
        elif status in STOPPED and not isinstance(summary.get("stopped"), dict):
            problems.append(f"exit 0 and status {status!r} but summary.json has no 'stopped'")
    return problems


STOPPED = ("diverged", "collapsed")
"""The statuses of a run that a rule of ``[collapse]`` stopped early: a result."""


def _failed_folder(out: Path) -> list[str]:
    """A run that failed while training may leave its folder, saying so."""
    problems = []
    for folder in _run_folders(out):
        summary = _summary(folder) if folder.is_dir() else None
        if summary is None:
            problems.append(f"exit 2 left a folder ({folder.name}) without a readable summary.json")
        elif summary.get("status") == "finished":
            continue  # an earlier member of a comparison that finished
        elif summary.get("status") != "failed" or not isinstance(summary.get("error"), str):
            problems.append(f"exit 2 left a summary.json with status {summary.get('status')!r}")
        else:
            FAILED_RUNS.append(summary["error"])
    return problems


def check_report(outcome: Outcome, root: Path, before: set[str], out: Path) -> list[str]:
    """``murmur report ... --out out``: report.md on exit 0, nothing written on exit 2."""
    problems = _common(outcome)
    if problems is not None:
        return problems
    new = created(root, before)
    if outcome.code == 2:
        problems = _one_error_line(outcome)
        if new:
            problems.append(f"exit 2 but it wrote {new[:4]}")
        return problems
    if not (out / "report.md").is_file():
        return ["exit 0 but no report.md"]
    return []


# ---------------------------------------------------------------- verdicts


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def describe(outcome: Outcome, problems: list[str], root: Path, files: dict[str, bytes]) -> str:
    left = sorted(snapshot(root)) if root.exists() else []
    lines = [
        "input rule broken: " + "; ".join(problems),
        f"  argv: {[_short(a, 200) for a in outcome.argv]}",
        f"  exit code: {outcome.code}" + (" (timed out)" if outcome.timed_out else ""),
        "  stderr:",
        *(f"    {_short(line)}" for line in outcome.stderr_lines[:15]),
        f"  left in the folder: {left[:12]}",
    ]
    for name, content in files.items():
        lines.append(f"  file {name}: {_short(repr(content[:600]), 700)} ({len(content)} bytes)")
    if outcome.warnings:
        lines.append(f"  warnings: {outcome.warnings[:3]}")
    if outcome.error:
        lines += ["  traceback:", *("    " + line for line in outcome.error.splitlines()[-12:])]
    return "\n".join(lines)


def verdict(
    family: str,
    outcome: Outcome,
    problems: list[str],
    root: Path,
    files: dict[str, bytes] | None = None,
) -> None:
    """Fail the example on a violation; in findings mode, record it and go on."""
    files = files or {}
    if outcome.timed_out:
        _record(family, "timed out", outcome, root, files, violation=False)
    if not problems:
        return
    if os.environ.get("MURMUR_PROPERTY_FINDINGS"):
        _record(family, "; ".join(problems), outcome, root, files, violation=True)
        return
    raise AssertionError(describe(outcome, problems, root, files))


def _record(
    family: str,
    problem: str,
    outcome: Outcome,
    root: Path,
    files: dict[str, bytes],
    violation: bool,
) -> None:
    FINDINGS[family if violation else f"{family} ({problem})"] += 1
    path = os.environ.get("MURMUR_PROPERTY_FINDINGS")
    if not path:
        return
    entry = {
        "family": family,
        "violation": violation,
        "problem": problem,
        "signature": outcome.signature or problem,
        "argv": outcome.argv,
        "code": outcome.code,
        "stderr": outcome.stderr[-3000:],
        "traceback": outcome.error[-4000:],
        "left": sorted(snapshot(root))[:20] if root.exists() else [],
        "files": {name: repr(content[:2000]) for name, content in files.items()},
        "size": sum(len(a) for a in outcome.argv) + sum(len(c) for c in files.values()),
        "seconds": round(outcome.seconds, 2),
    }
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry) + "\n")


def summary_line() -> str:
    """What the terminal summary says about this session's cases."""
    total = sum(CASES.values())
    parts = ", ".join(f"{family} {count}" for family, count in sorted(CASES.items()))
    line = (
        f"input property cases: {total} ({parts}) in {sum(SECONDS.values()):.0f} s "
        f"of murmur calls, profile {PROFILE}"
    )
    endings: dict[str, list[str]] = {}
    for (family, ending), count in sorted(EXITS.items()):
        endings.setdefault(family, []).append(f"{ending}: {count}")
    line += "".join(f"\n  {family}: {', '.join(parts)}" for family, parts in endings.items())
    if FAILED_RUNS:
        line += f"\n  runs that failed while training, leaving a failed summary: {len(FAILED_RUNS)}"
    if FINDINGS:
        line += "\n  recorded: " + ", ".join(f"{k} {v}" for k, v in sorted(FINDINGS.items()))
    return line
