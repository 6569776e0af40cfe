"""Reports made afterwards from run folders: a comparison table and report.md.

A run folder holds ``config.toml``, ``metrics.jsonl`` (one record per
evaluation) and ``summary.json`` (the run's result). Nothing here runs during
training; everything reads finished folders, so a report can be remade at any
time from the same runs.

:func:`read_run` refuses a file that lacks a field every run writes or holds a
field of the wrong type (see :mod:`murmur.reporting.run_schema`). Fields that an
algorithm does not produce (a centralized run sends no messages) may be
missing or null; they are shown as ``-``. A run that failed during training
(``"status": "failed"`` in its summary) is no row of the table: reports list
it with its error (see :func:`failed_line`). A run that a rule stopped early
(``"collapsed"`` or ``"diverged"``, :mod:`murmur.metrics.stops`) is a row that shows
its status where the final mean accuracy would stand ("collapsed at 400"), and
reports list it with the rule and its reason (see :func:`stopped_line`).

Layer-wise runs (SSFN, dSSFN) add fields such as ``layers``,
``train_accuracy``, ``virtual_seconds`` and ``mean_degree``; the table and
report gain their columns and plots only when some run has them, so tables of
SGD runs alone look as they always did.

Worker-based runs (a parameter server or shared memory: AsySG-con, sync-ps,
AsySG-incon) add ``workers``, ``staleness`` and, when they train to a target
training loss, ``iterations_to_target`` and ``virtual_seconds_to_target`` (in
the distributed runtime ``wall_seconds_to_target``, real seconds). Runs of the
distributed runtime that lost ranks list them (``failed_agents``,
``failed_workers``) in a "failed ranks" column.
The "events / messages / bytes vs DSGD %" columns compare each run with DSGD
(:mod:`murmur.reporting.versus_dsgd`) and appear when some run has a baseline.
Their columns (W, staleness, time to target and the speedups over the W = 1
run, see ``speedups``) and plots likewise appear only when some run has the
fields; nothing here looks at algorithm names.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from numbers import Real
from pathlib import Path
from typing import Any, ClassVar, Literal, cast

from murmur.errors import UsageError
from murmur.metrics.record_types import (
    AccuracySummary,
    EvaluationRecord,
    FailedSummary,
    RunSummary,
    SingleProcess,
)
from murmur.metrics.stops import status_text, stop_line, stop_of
from murmur.reporting.column_meanings import footer, short_header
from murmur.reporting.run_schema import check_record, check_summary
from murmur.reporting.versus_dsgd import SHOWN_QUANTITIES, Quantity, dsgd_baselines, versus_dsgd
from murmur.textfiles import read_utf8
from murmur.units import human_bytes

__all__ = [
    "FailedRun",
    "Run",
    "read_run",
    "failed_line",
    "stopped_line",
    "format_table",
    "run_label",
    "has_target",
    "speedups",
]

MISSING = "-"

_DAMAGED = "the file is damaged, remake the run"
"""How a message about a run file that cannot be read ends."""


@dataclass(frozen=True)
class Run:
    """A finished run read from its folder.

    ``summary`` is summary.json as written by the run, except that ``run_dir``
    is the folder it was read from (runs may have been moved or copied).
    ``records`` are the lines of metrics.jsonl in file order.
    """

    path: Path
    summary: RunSummary
    records: list[EvaluationRecord]
    failed: ClassVar[Literal[False]] = False
    """Whether the run stopped during training: a :class:`FailedRun` did."""


@dataclass(frozen=True)
class FailedRun:
    """A run that failed during training, read from its folder: its summary's
    ``error`` says why. ``summary`` is as in :class:`Run`; ``records`` are none, as
    reports only list it."""

    path: Path
    summary: FailedSummary
    records: list[EvaluationRecord]
    failed: ClassVar[Literal[True]] = True


def read_run(run_dir: str | Path) -> Run | FailedRun:
    """Read a run folder; a missing folder or summary, or a damaged file, is a UsageError.

    summary.json and every line of metrics.jsonl must hold the fields the
    report reads, as :mod:`murmur.reporting.run_schema` says. metrics.jsonl may
    be absent (a run that stopped before its first evaluation); its records
    are then empty.
    """
    path = Path(run_dir)
    if not path.is_dir():
        raise UsageError(f"run folder {path} does not exist; pass a folder written by `murmur run`")
    summary_path = path / "summary.json"
    if not summary_path.is_file():
        raise UsageError(
            f"{summary_path} is missing; {path} is not a finished run folder "
            "(summary.json is written when a run ends)"
        )
    summary = _summary(
        str(summary_path),
        _read_json_object(summary_path, read_utf8(summary_path, str(summary_path), _DAMAGED)),
    )
    summary["run_dir"] = str(path.resolve())
    if "status" in summary and summary["status"] == "failed":
        return FailedRun(path=path, summary=summary, records=[])
    return Run(path=path, summary=summary, records=read_records(path / "metrics.jsonl"))


def _summary(where: str, value: dict[str, Any]) -> RunSummary | FailedSummary:
    """summary.json's object as its type, once :func:`check_summary` accepts it: a
    failed run's summary, else a finished one's."""
    check_summary(where, value)
    if value.get("status") == "failed":
        return cast(FailedSummary, value)
    return cast(RunSummary, value)


def _record(where: str, value: dict[str, Any]) -> EvaluationRecord:
    """A line of metrics.jsonl as its type, once :func:`check_record` accepts it."""
    check_record(where, value)
    return cast(EvaluationRecord, value)


def failed_line(run: FailedRun) -> str:
    """How a report lists a run that failed: "failed: <name> (<folder>): <why>"."""
    return f"failed: {run_label(run.summary)} ({run.path}): {run.summary['error']}"


def stopped_line(summary: RunSummary) -> str | None:
    """How a report lists a run that a rule stopped early: "<name> (seed <n>, <folder>):
    collapsed at iteration 400 (chance): <why>"; None for a run that was not stopped."""
    stop = stop_of(summary)
    if stop is None:
        return None
    where = ", ".join(
        [*([f"seed {summary['seed']}"] if "seed" in summary else []), str(summary.get("run_dir"))]
    )
    return f"{run_label(summary)} ({where}): {stop_line(stop)}"


def read_records(metrics_path: Path) -> list[EvaluationRecord]:
    """The records of a metrics.jsonl, checked; none where the file is absent."""
    if not metrics_path.exists() and not metrics_path.is_symlink():
        return []
    if not metrics_path.is_file():
        raise UsageError(f"{metrics_path} is not a file of records; {_DAMAGED}")
    records = []
    for number, line in enumerate(
        read_utf8(metrics_path, str(metrics_path), _DAMAGED).split("\n"), start=1
    ):
        if line.strip():
            where = f"{metrics_path}, line {number}"
            records.append(_record(where, _read_json_object(metrics_path, line, number)))
    return records


def _read_json_object(file: Path, text: str, line: int | None = None) -> dict[str, Any]:
    where = str(file) if line is None else f"{file}, line {line}"
    value = _parse_json(where, text)
    if not isinstance(value, dict):
        raise UsageError(
            f"{where} holds a JSON {type(value).__name__}, expected an object; {_DAMAGED}"
        )
    return value


def _parse_json(where: str, text: str) -> Any:
    """The JSON value of ``text``; a UsageError naming ``where`` when it is not JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        problem = error.msg
    except ValueError:  # Python converts integers of at most 4300 digits
        problem = "a number has more than 4300 digits"
    except RecursionError:
        problem = "nested too deeply"
    raise UsageError(f"{where} is not valid JSON ({problem}); {_DAMAGED}")


def run_label(summary: RunSummary | FailedSummary) -> str:
    """The name a run goes by in tables and legends: its name, else its algorithm."""
    for label in (summary.get("name"), summary.get("algorithm")):
        if label:
            return str(label)
    return Path(str(summary.get("run_dir", "run"))).name


# Cell formatting: every function takes a raw summary value and returns text,
# MISSING for a value that is absent, null or not a number.


def as_number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, Real):
        return None
    return float(value)


def _text(value: object) -> str:
    return MISSING if value is None or value == "" else str(value)


def _count(value: object) -> str:
    number = as_number(value)
    return MISSING if number is None else str(round(number))


def _percent(fraction: object) -> str:
    number = as_number(fraction)
    return MISSING if number is None else f"{100 * number:.2f}"


def _seconds(value: object) -> str:
    number = as_number(value)
    return MISSING if number is None else f"{number:.1f}"


def _virtual_seconds(value: object) -> str:
    """Simulated seconds with three significant digits: virtual times are often tiny."""
    number = as_number(value)
    if number is None or not math.isfinite(number):
        return MISSING
    if number == 0:
        return "0.0"
    if abs(number) < 1e-3:
        return f"{number:.2e}"
    decimals = max(1, 2 - math.floor(math.log10(abs(number))))
    return f"{number:.{decimals}f}"


def _layers(value: object) -> str:
    """Layer widths, compact: "3 x 122" when all are equal, else "122,172,222"."""
    if not isinstance(value, list) or not value:
        return MISSING
    widths = [as_number(width) for width in value]
    finite = [width for width in widths if width is not None and math.isfinite(width)]
    if len(finite) != len(widths):
        return MISSING
    texts = [str(round(width)) for width in finite]
    if len(set(texts)) == 1:
        return f"{len(texts)} x {texts[0]}"
    return ",".join(texts)


def _accuracy(
    accuracy: AccuracySummary | None, statistic: Literal["mean", "min", "max"]
) -> float | None:
    """One statistic of a summary's ``accuracy`` (or ``train_accuracy``); None without it."""
    return accuracy.get(statistic) if isinstance(accuracy, dict) else None


def _staleness(value: object) -> str:
    """Mean and largest staleness of the applied gradients, "2.9 / 3"."""
    if not isinstance(value, dict):
        return MISSING
    mean, largest = as_number(value.get("mean")), as_number(value.get("max"))
    if mean is None and largest is None:
        return MISSING
    mean_text = MISSING if mean is None else f"{mean:.1f}"
    return f"{mean_text} / {_count(largest)}"


def _speedup(value: float | None) -> str:
    return MISSING if value is None or not math.isfinite(value) else f"{value:.2f}"


def has_target(summary: RunSummary) -> bool:
    """Whether a run trained to a target training loss (reached or not).

    True when it reports reaching one, or has the ``iterations_to_target``
    field with a positive ``target_loss`` (or none stated); a target loss of
    0 or null means the run had no target.
    """
    if summary.get("iterations_to_target") is not None:
        return True
    if summary.get("virtual_seconds_to_target") is not None:
        return True
    if summary.get("wall_seconds_to_target") is not None:
        return True
    if "iterations_to_target" not in summary:
        return False
    if "target_loss" not in summary:
        return True
    target = as_number(summary["target_loss"])
    return target is not None and target > 0


def _positive(value: object) -> float | None:
    number = as_number(value)
    return number if number is not None and math.isfinite(number) and number > 0 else None


def _speedup_group(summary: RunSummary) -> tuple[str, str, str]:
    """Runs whose speedups compare: the same algorithm, dataset and target loss."""
    return (
        str(summary.get("algorithm")),
        str(summary.get("dataset")),
        str(as_number(summary.get("target_loss"))),
    )


def speedups(summaries: list[RunSummary]) -> list[tuple[float | None, float | None]]:
    """(iteration speedup, time speedup) of each summary, None where there is none.

    Relative to the baseline: the first summary with ``workers`` == 1 of the
    same algorithm, dataset and target loss. With ``its`` the
    ``iterations_to_target`` and ``vs`` the ``virtual_seconds_to_target``,
    iteration speedup = W * its_1 / its_W (Lian et al. 2015) and time speedup =
    vs_1 / vs_W; runs of the distributed runtime have real seconds instead
    (``wall_seconds_to_target``), used when both runs have them and not virtual
    ones. None without a target, without a baseline, or when the run or the
    baseline did not reach the target (its value is null).
    """
    baselines: dict[tuple[str, str, str], RunSummary] = {}
    for summary in summaries:
        if has_target(summary) and as_number(summary.get("workers")) == 1:
            baselines.setdefault(_speedup_group(summary), summary)
    result: list[tuple[float | None, float | None]] = []
    for summary in summaries:
        baseline = baselines.get(_speedup_group(summary)) if has_target(summary) else None
        if baseline is None:
            result.append((None, None))
            continue
        workers = _positive(summary.get("workers"))
        iterations = _positive(summary.get("iterations_to_target"))
        base_iterations = _positive(baseline.get("iterations_to_target"))
        seconds, base_seconds = _seconds_to_target(summary, baseline)
        iteration_speedup = (
            workers * base_iterations / iterations
            if workers is not None and iterations is not None and base_iterations is not None
            else None
        )
        time_speedup = (
            base_seconds / seconds if seconds is not None and base_seconds is not None else None
        )
        result.append((iteration_speedup, time_speedup))
    return result


def _seconds_to_target(
    summary: RunSummary, baseline: RunSummary
) -> tuple[float | None, float | None]:
    """The two runs' seconds to target on the same clock: virtual, else real."""
    for key in ("virtual_seconds_to_target", "wall_seconds_to_target"):
        if key in summary and key in baseline:
            return _positive(summary.get(key)), _positive(baseline.get(key))
    return None, None


def _failed(summary: RunSummary) -> str:
    """The ranks a distributed run lost (agents or workers), or -."""
    failed = summary.get("failed_agents") or summary.get("failed_workers") or []
    return ", ".join(str(rank) for rank in failed) if failed else MISSING


@dataclass(frozen=True)
class _Column:
    header: str
    cell: Callable[[RunSummary], str]
    numeric: bool


def lost_share(summary: RunSummary) -> float | None:
    """The share of a run's point-to-point messages that were lost (``dropped_messages``
    over ``messages``): 0 for a run that sent messages and lost none (or ran without
    faults), None for a run that sent none."""
    messages = as_number(summary.get("messages"))
    if messages is None or messages <= 0:
        return None
    dropped = as_number(summary.get("dropped_messages"))
    return 0.0 if dropped is None else dropped / messages


def has_column(summaries: list[RunSummary], key: str) -> bool:
    """Whether any summary has a value for key: its optional column is then shown."""
    return any(summary.get(key) is not None for summary in summaries)


def _columns(summaries: list[RunSummary], with_folder: bool) -> list[_Column]:
    columns = [
        _Column("name", run_label, False),
        _Column("algorithm", lambda s: _text(s.get("algorithm")), False),
        _Column("dataset", lambda s: _text(s.get("dataset")), False),
        _Column("agents", lambda s: _count(s.get("agents")), True),
        _Column("topology", lambda s: _text(s.get("topology")), False),
        _Column("iterations", lambda s: _count(s.get("iterations")), True),
    ]
    if has_column(summaries, "mixing"):
        columns.append(_Column("mixing", mixing_text, False))
    if seeds_repeat_labels(summaries):
        columns.append(_Column("seed", lambda s: _count(s.get("seed")), True))
    if has_column(summaries, "layers"):
        columns.append(_Column("layers", lambda s: _layers(s.get("layers")), True))
    columns += _accuracy_columns(summaries)
    columns += [
        _Column("messages", lambda s: _count(s.get("messages")), True),
        _Column("bytes", lambda s: human_bytes(s.get("bytes")), True),
        *_versus_dsgd_columns(summaries),
        *(
            [_Column("lost msgs %", lambda s: _percent(lost_share(s)), True)]
            if has_column(summaries, "dropped_messages")
            else []
        ),
        _Column("wall s", lambda s: _seconds(s.get("wall_seconds")), True),
    ]
    if has_column(summaries, "virtual_seconds"):
        columns.append(
            _Column("virtual s", lambda s: _virtual_seconds(s.get("virtual_seconds")), True)
        )
    columns += _target_columns(summaries)
    if any(_failed(summary) != MISSING for summary in summaries):
        columns.append(_Column("failed ranks", _failed, False))
    columns += _worker_columns(summaries)
    if has_column(summaries, "single_process"):
        # Real parallel runs (hogwild) also train with one process for comparison.
        columns += [
            _Column("samples/s", lambda s: _count(s.get("samples_per_second")), True),
            _Column(
                "1-process samples/s",
                lambda s: _count(_single_process(s, "samples_per_second")),
                True,
            ),
            _Column(
                "1-process acc %",
                lambda s: _percent(_single_process(s, "accuracy")),
                True,
            ),
            _Column("speedup", lambda s: _speedup(as_number(s.get("speedup"))), True),
        ]
    if with_folder:
        columns.append(_Column("run folder", lambda s: shown_path(s.get("run_dir")), False))
    return columns


def shown_path(value: object) -> str:
    """A run's folder as a table shows it: relative to the current directory where it
    lies under it, else as it is; "-" for none."""
    if not isinstance(value, str) or not value:
        return MISSING
    path = Path(value)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return value


def mixing_text(summary: RunSummary) -> str:
    """The mixing matrix a run's agents averaged with and its steps, "metropolis, gamma
    0.075" or "laplacian, b 0.456"; on a time-varying topology whose graphs mix
    otherwise, what they mix with ("laplacian, each one_peer graph's pairs average
    (1/2)"); "-" for a run without one."""
    weights = summary.get("mixing")
    if not isinstance(weights, str):
        return MISSING
    per_graph = summary.get("mixing_per_graph")
    if isinstance(per_graph, str):
        return f"{weights}, {per_graph}"
    steps = summary.get("steps")
    chosen = steps.items() if isinstance(steps, dict) else []
    return ", ".join([weights, *(f"{name} {value:.3g}" for name, value in chosen)])


def seeds_repeat_labels(summaries: list[RunSummary]) -> bool:
    """Whether two runs of one label differ in seed: the table then has a "seed" column."""
    seeds: dict[str, set[object]] = {}
    for summary in summaries:
        seeds.setdefault(run_label(summary), set()).add(summary.get("seed"))
    return any(len(values) > 1 for values in seeds.values())


def last_k_accuracy(summary: RunSummary) -> float | None:
    """The agents' mean accuracy averaged over the run's last evaluations
    (``accuracy_last_k``, ``run.last_k`` of them); None where the summary has none."""
    last_k = cast(dict[str, Any], summary).get("accuracy_last_k")
    return as_number(last_k.get("mean")) if isinstance(last_k, dict) else None


def last_k_text(summaries: Sequence[RunSummary]) -> str:
    """The k of the runs' last-k accuracies, "5"; "k" where they differ or have none."""
    counts = {
        last_k.get("k")
        for summary in summaries
        if isinstance(last_k := cast(dict[str, Any], summary).get("accuracy_last_k"), dict)
    }
    if len(counts) == 1 and isinstance(k := counts.pop(), int):
        return str(k)
    return "k"


def validation_last_k_accuracy(summary: RunSummary) -> float | None:
    """The agents' mean validation accuracy averaged over the run's last evaluations
    (``validation_last_k``); None where the run held no validation split out."""
    last_k = cast(dict[str, Any], summary).get("validation_last_k")
    return as_number(last_k.get("mean")) if isinstance(last_k, dict) else None


def model_accuracy(summary: RunSummary) -> float | None:
    """The test accuracy of the agents' average model (``model_accuracy``); None without."""
    return as_number(cast(dict[str, Any], summary).get("model_accuracy"))


def _accuracy_columns(summaries: list[RunSummary]) -> list[_Column]:
    """Test accuracy over agents at the final evaluation; the last-k mean, the average
    model's and the mean training accuracy when some run has them."""
    columns = [
        _Column("final acc mean %", _final_mean, True),
        _Column("final acc min %", lambda s: _percent(_accuracy(s.get("accuracy"), "min")), True),
        _Column("final acc max %", lambda s: _percent(_accuracy(s.get("accuracy"), "max")), True),
    ]
    k = last_k_text(summaries)
    if any(last_k_accuracy(summary) is not None for summary in summaries):
        columns.append(_Column(f"last-{k} acc %", lambda s: _percent(last_k_accuracy(s)), True))
    if any(validation_last_k_accuracy(summary) is not None for summary in summaries):
        columns.append(
            _Column(f"last-{k} val acc %", lambda s: _percent(validation_last_k_accuracy(s)), True)
        )
    if any(model_accuracy(summary) is not None for summary in summaries):
        columns.append(_Column("avg model acc %", lambda s: _percent(model_accuracy(s)), True))
    if has_column(summaries, "train_accuracy"):
        columns.append(
            _Column(
                "train acc %",
                lambda s: _percent(_accuracy(s.get("train_accuracy"), "mean")),
                True,
            )
        )
    return columns


def target_text(summaries: Sequence[RunSummary]) -> str | None:
    """The target accuracy of the runs' ``to_accuracy`` as a percentage, "88"; None
    where no summary has one."""
    for summary in summaries:
        reached = summary.get("to_accuracy")
        if isinstance(reached, dict):
            return f"{100 * reached['accuracy']:g}"
    return None


def to_accuracy(key: str) -> Callable[[RunSummary], float | None]:
    """What a run had spent (``key`` of its ``to_accuracy``) when it reached the target
    accuracy; None where it did not."""

    def value(summary: RunSummary) -> float | None:
        reached = summary.get("to_accuracy")
        return as_number(reached.get(key)) if isinstance(reached, dict) else None

    return value


def bytes_to_target(summary: RunSummary) -> float | None:
    """The bytes a run had sent when it reached the target accuracy; None where it did
    not, or where it sends nothing at all (centralized SGD: no bytes to compare)."""
    if not (as_number(summary.get("bytes")) or 0) > 0:
        return None
    return to_accuracy("bytes")(summary)


def _target_columns(summaries: list[RunSummary]) -> list[_Column]:
    """Iterations, seconds and bytes to the target accuracy, where runs have one."""
    target = target_text(summaries)
    if target is None:
        return []
    columns = [
        _Column(f"its to {target} %", lambda s: _count(to_accuracy("iteration")(s)), True),
        _Column(f"s to {target} %", lambda s: _seconds(to_accuracy("wall_seconds")(s)), True),
    ]
    if has_column(summaries, "virtual_seconds"):
        virtual = to_accuracy("virtual_seconds")
        columns.append(
            _Column(f"virtual s to {target} %", lambda s: _virtual_seconds(virtual(s)), True)
        )
    if _compares_bytes(summaries):
        columns.append(
            _Column(f"bytes to {target} %", lambda s: human_bytes(bytes_to_target(s)), True)
        )
    return columns


def _compares_bytes(summaries: Sequence[RunSummary]) -> bool:
    """Whether some run sent bytes: bytes to a target then mean something."""
    return any((as_number(summary.get("bytes")) or 0) > 0 for summary in summaries)


def _final_mean(summary: RunSummary) -> str:
    """The final mean accuracy, or for a run stopped early its status: "collapsed at 400"."""
    stop = stop_of(summary)
    if stop is not None:
        return status_text(stop)
    return _percent(_accuracy(summary.get("accuracy"), "mean"))


def _single_process(
    summary: RunSummary, key: Literal["samples_per_second", "accuracy"]
) -> float | None:
    """A field of a run's comparison run with one process; None without one."""
    single: SingleProcess | None = summary.get("single_process")
    return single.get(key) if single else None


def _versus_dsgd_columns(summaries: list[RunSummary]) -> list[_Column]:
    """The "messages / bytes vs DSGD %" columns, when some run has a baseline."""
    if all(baseline is None for baseline in dsgd_baselines(summaries)):
        return []
    return [_versus_column(summaries, quantity) for quantity in SHOWN_QUANTITIES]


def _versus_column(summaries: list[RunSummary], quantity: Quantity) -> _Column:
    pairs = zip(summaries, versus_dsgd(summaries, quantity), strict=True)
    # Cells are looked up by the summary's identity: the baseline needs the whole table.
    by_run = {id(summary): share for summary, share in pairs}
    return _Column(f"{quantity} vs DSGD %", lambda s: _percent(by_run[id(s)]), True)


def gradients_applied(summary: RunSummary) -> int | None:
    """The gradients a server run applied (each worker's push that an update used), from
    its staleness histogram: a synchronous server's iteration applies W of them, an
    asynchronous one's one; None for a run without one."""
    staleness = summary.get("staleness")
    histogram = staleness.get("histogram") if isinstance(staleness, dict) else None
    if not isinstance(histogram, list):
        return None
    return sum(int(count) for count in histogram)


def _worker_columns(summaries: list[RunSummary]) -> list[_Column]:
    """Columns of worker-based runs: W, the gradients the server applied and their
    staleness, then time to target and speedups."""
    targets = any(has_target(summary) for summary in summaries)
    if not targets and not has_column(summaries, "staleness"):
        return []
    columns = [
        _Column("W", lambda s: _count(s.get("workers")), True),
        _Column("gradients", lambda s: _count(gradients_applied(s)), True),
        _Column("staleness mean/max", lambda s: _staleness(s.get("staleness")), True),
    ]
    if not targets:
        return columns
    # Cells are looked up by the summary's identity: speedups need the whole table.
    pairs = zip(summaries, speedups(summaries), strict=True)
    by_run = {id(summary): speedup for summary, speedup in pairs}
    return columns + [
        _Column("its to target", lambda s: _count(s.get("iterations_to_target")), True),
        _Column(
            "virtual s to target",
            lambda s: _virtual_seconds(s.get("virtual_seconds_to_target")),
            True,
        ),
        *(
            [_Column("s to target", lambda s: _seconds(s.get("wall_seconds_to_target")), True)]
            if has_column(summaries, "wall_seconds_to_target")
            else []
        ),
        _Column("iteration speedup", lambda s: _speedup(by_run[id(s)][0]), True),
        _Column("time speedup", lambda s: _speedup(by_run[id(s)][1]), True),
    ]


def format_table(
    summaries: list[RunSummary],
    markdown: bool = False,
    compact: bool = False,
    explain: bool = False,
) -> str:
    """One row per run summary: aligned columns for a terminal, or a Markdown table;
    ``compact``: only the terminal's columns
    (:data:`~murmur.reporting.column_meanings.COMPACT`); ``explain``: with the meaning
    of each column under it (:mod:`murmur.reporting.column_meanings` says what every
    column is). Accuracies and shares are percentages with two decimals.

    Optional columns appear only when some summary has their field: "mixing", "seed"
    (when two runs of one name differ in seed), "layers", the last-k, validation,
    average-model and training accuracies, the "vs DSGD" columns (when some run has a
    baseline, :mod:`murmur.reporting.versus_dsgd`), "lost msgs %", "virtual s", the
    way to a target accuracy (summaries with ``to_accuracy``,
    :mod:`murmur.reporting.to_target`), "failed ranks", and the worker columns (W,
    gradients, staleness, and with a target loss the way to it and the speedups over
    the W = 1 run, see ``speedups``). A run that a rule stopped early shows its status
    in "final acc mean %" ("collapsed at 400", :mod:`murmur.metrics.stops`). The plain
    form also shows each run's folder.
    """
    columns = _columns(summaries, with_folder=not markdown)
    rows = [[column.cell(summary) for column in columns] for summary in summaries]
    headers = [(column.header, column.numeric) for column in columns]
    return render_table(headers, rows, markdown, compact, explain)


def render_table(
    headers: Sequence[tuple[str, bool]],
    rows: list[list[str]],
    markdown: bool = False,
    compact: bool = False,
    explain: bool = False,
) -> str:
    """Rows of cells under ``headers`` ((text, numeric): numeric columns are aligned
    right): aligned columns for a terminal, or a Markdown table; ``explain``: followed
    by the meaning of each column (:func:`murmur.reporting.column_meanings.footer`);
    ``compact``: only
    the columns of :data:`~murmur.reporting.column_meanings.COMPACT`, under their short
    headers, and the run folder only for one row (a comparison names its folder under
    the table)."""
    if compact:
        # One time column: the simulator's virtual seconds where runs have them (wall
        # seconds of a simulation measure the simulator), else wall seconds.
        virtual = any(header == "virtual s" for header, _ in headers)
        shown = [
            (i, short)
            for i, (header, _) in enumerate(headers)
            if (short := short_header(header)) is not None
            and (header != "run folder" or len(rows) == 1)
            and (header != "wall s" or not virtual)
        ]
        headers = [(short, headers[i][1]) for i, short in shown]
        rows = [[row[i] for i, _ in shown] for row in rows]
    if markdown:
        table = _markdown_table(headers, rows)
    else:
        table = _plain_table(headers, rows)
    if not explain:
        return table
    return f"{table}\n\n{footer([header for header, _ in headers], markdown)}"


def _plain_table(headers: Sequence[tuple[str, bool]], rows: list[list[str]]) -> str:
    widths = [
        max([len(header), *(len(row[i]) for row in rows)]) for i, (header, _) in enumerate(headers)
    ]

    def line(cells: list[str]) -> str:
        padded = [
            cell.rjust(width) if numeric else cell.ljust(width)
            for cell, width, (_, numeric) in zip(cells, widths, headers, strict=True)
        ]
        return "  ".join(padded).rstrip()

    lines = [line([header for header, _ in headers]), "  ".join("-" * w for w in widths)]
    lines.extend(line(row) for row in rows)
    return "\n".join(lines)


def _markdown_table(headers: Sequence[tuple[str, bool]], rows: list[list[str]]) -> str:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    separator = "|" + "|".join("---:" if numeric else "---" for _, numeric in headers) + "|"
    lines = [line([header for header, _ in headers]), separator]
    lines.extend(line(row) for row in rows)
    return "\n".join(lines)
