"""One run's folder and result: config.toml, metrics.jsonl, summary.json.

A runtime trains (a *runner*: the simulator's, a rank's, Hogwild's processes)
and hands back an :class:`~murmur.metrics.records.Outcome`; :func:`train_run`
writes the resolved config first, every record as it comes, and the
:class:`~murmur.metrics.records.RunResult` last. It holds each record to the rules of
``[collapse]`` (:mod:`murmur.training.health`): a run one of them stops ends at that
evaluation, and its summary says ``"status": "diverged"`` or ``"collapsed"`` and
``stopped`` beside every figure of a finished run. A run that fails (a lost peer, an
interrupt, a loss that is no longer a number where no rule applies) leaves a
``summary.json`` with ``"status": "failed"`` and the reason. A run never overwrites
another.

A finished mini-batch run also leaves its trained models, ``model.pt`` (the agents'
average, a plain ``state_dict``) and ``agents.pt`` (:mod:`murmur.training.model_file`).

With ``run.checkpoint_every`` the runner saves ``checkpoint.pt`` in the folder
(:mod:`murmur.training.checkpoint`); :func:`check_resumable` reads a folder
whose run was stopped, and :func:`train_run` continues it from its checkpoint:
the records after it are dropped, and the rest of the run writes what an
uninterrupted run would have.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from torch import nn

from murmur import portable
from murmur.config import Config, load_experiment, save_config
from murmur.errors import RunFailed, UsageError, one_line
from murmur.metrics.evaluation import accuracy_over_run, accuracy_summary, validation_over_run
from murmur.metrics.record_types import EvaluationRecord, FullExchange
from murmur.metrics.records import MetricsWriter, Outcome, RunResult, write_failure
from murmur.metrics.stops import STOPPED
from murmur.training.checkpoint import CHECKPOINT, Checkpoints, header, read_checkpoint
from murmur.training.folder_lock import (
    LOCK_FILE,
    FolderLock,
    holder,
    is_locked,
    lock_folder,
    refuse_if_locked,
)
from murmur.training.health import HealthWatch, Stop, health_watch
from murmur.training.model_file import write_model_files
from murmur.training.plan import plan
from murmur.training.setup import RoundsSetup, Setup, SgdSetup, prepare

OnRecord = Callable[[EvaluationRecord], None]
"""Takes each evaluation's record as the run makes it."""

Runner = Callable[[Setup, OnRecord, bool], Outcome]
"""Trains a prepared run: ``(setup, on_record, progress) -> Outcome``; each runtime's
runner builds what the run's family trains (``registry.Family.build``)."""


def train_run(
    setup: Setup,
    out_dir: str | Path | None = None,
    *,
    name: str = "",
    preset: str = "",
    progress: bool = False,
    runner: Runner,
    resume: dict[str, Any] | None = None,
) -> RunResult:
    """Train the prepared run ``setup`` (``prepare(plan)``) with ``runner``; write its
    folder when ``out_dir`` is given: ``out_dir`` itself if it is missing or empty,
    otherwise a new timestamped subfolder of it (:func:`free_folder`); the result's
    ``run_dir`` says which.

    ``resume``: the checkpoint (from :func:`check_resumable`) from which to continue
    the run whose folder is ``out_dir``.
    """
    started = time.perf_counter()
    run_dir, lock = _locked_folder(setup.config, out_dir, resume)
    try:
        return _train_into(run_dir, setup, (name, preset), runner, started, progress, resume)
    finally:
        if lock is not None:
            lock.release()


def _locked_folder(
    config: Config, out_dir: str | Path | None, resume: dict[str, Any] | None
) -> tuple[Path | None, FolderLock | None]:
    """The run's folder (None: none is written), created for a new run, and this
    process's hold on its lock (:mod:`murmur.training.folder_lock`)."""
    if out_dir is None:
        if resume is not None:
            raise ValueError("a resumed run needs its run folder")
        return None, None
    if resume is not None:
        run_dir = Path(out_dir)
        return run_dir, lock_folder(run_dir)
    run_dir = create_run_dir(free_folder(Path(out_dir), config.algorithm.name))
    return run_dir, lock_folder(run_dir)


def _train_into(
    run_dir: Path | None,
    setup: Setup,
    names: tuple[str, str],
    runner: Runner,
    started: float,
    progress: bool,
    resume: dict[str, Any] | None,
) -> RunResult:
    """:func:`train_run`'s work once its folder is held; ``names``: the run's name and
    preset."""
    config = setup.config
    name, preset = names
    writer = _open_folder(config, run_dir, resume)
    watch = health_watch(setup)
    checkpoints = Checkpoints(
        every=config.run.checkpoint_every,
        path=run_dir / CHECKPOINT if run_dir is not None else None,
        header=header(config, name, preset),
        records=lambda: len(writer.records),
        resumed=resume,
        kept=list(writer.records),
    )
    stop_requested = watch.stopping if watch is not None else setup.stop_requested
    run_setup = dataclasses.replace(
        setup, checkpoints=checkpoints, stop_requested=stop_requested, watched=watch is not None
    )
    try:
        outcome = runner(run_setup, _record_taker(writer, watch), progress)
    except BaseException as error:
        if run_dir is not None:
            seconds = time.perf_counter() - started
            _write_failure(run_dir, error, config, name, preset, len(writer.records), seconds)
        raise
    finally:
        writer.close()
    _add_extras(setup, outcome, run_dir)
    seconds = time.perf_counter() - started
    result = _result(config, outcome, name, preset, seconds, run_dir, writer.records)
    if watch is not None and watch.stopped is not None:
        result = _stopped(result, watch.stopped)
    if run_dir is not None:
        result.write(run_dir / "summary.json")
    return result


def _record_taker(writer: MetricsWriter, watch: HealthWatch | None) -> OnRecord:
    """What the runner hands each record to: ``writer`` writes it, and the rules of
    ``[collapse]`` (``watch``) judge it after those a resumed run kept; where no rule
    applies, a record whose test loss is no longer finite fails the run unwritten."""
    if watch is None:

        def checked(record: EvaluationRecord) -> None:
            check_finite_record(record)
            writer.write(record)

        return checked
    for kept in writer.records:
        watch.observe(kept)

    def judged(record: EvaluationRecord) -> None:
        writer.write(record)
        watch.observe(record)

    return judged


def _write_failure(
    run_dir: Path,
    error: BaseException,
    config: Config,
    name: str,
    preset: str,
    evaluations: int,
    wall_seconds: float,
) -> None:
    """summary.json of a run that ``error`` stopped after ``evaluations`` records."""
    write_failed_summary(
        run_dir, failure_reason(error), config, (name, preset), evaluations, wall_seconds
    )


def write_failed_summary(
    run_dir: Path,
    reason: str,
    config: Config,
    names: tuple[str, str],
    evaluations: int,
    wall_seconds: float,
) -> None:
    """summary.json of a run that stopped for ``reason`` after ``evaluations`` records;
    ``names``: the run's name and preset."""
    name, preset = names
    write_failure(
        run_dir / "summary.json",
        reason,
        name=name or config.algorithm.name,
        preset=preset,
        algorithm=config.algorithm.name,
        dataset=config.data.dataset,
        seed=config.run.seed,
        evaluations=evaluations,
        wall_seconds=wall_seconds,
        run_dir=str(run_dir.resolve()),
    )


def _add_extras(setup: Setup, outcome: Outcome, run_dir: Path | None) -> None:
    """Say in the summary what machine computed the run and what ``"auto"`` steps
    became; write a mini-batch run's final models (``model.pt``, ``agents.pt``) into
    its folder and say what the average model scores."""
    outcome.extra["machine"] = portable.machine()  # what the numbers were computed with
    if setup.steps:
        outcome.extra["steps"] = setup.steps
    weights = setup.config.algorithm.mixing_weights()
    if weights is not None:
        outcome.extra["mixing"] = weights
        per_graph = mixing_per_graph(setup.config, setup.steps)
        if per_graph is not None:
            outcome.extra["mixing_per_graph"] = per_graph
    exchange = full_exchange(setup, outcome.iterations)
    if exchange is not None:
        outcome.extra["full_exchange"] = exchange
    if isinstance(setup, SgdSetup) and outcome.parameters is not None:
        outcome.extra["model"] = write_model_files(
            run_dir,
            setup.problem.model.module,
            outcome.parameters,
            (setup.dataset.x_test, setup.dataset.y_test),
            setup.dataset.task == "classification",
            outcome.statistics,
        )


_PAIRINGS = ("matching", "edge", "one_peer")
"""Time-varying topologies whose every graph is a matching: each agent has at most one
neighbour."""


def mixing_per_graph(config: Config, steps: Mapping[str, float]) -> str | None:
    """What each graph of a time-varying topology mixes with, where it is not the run's
    graph's: on a matching, each pair averages (W_ij = 1/2) with Metropolis weights or
    an "auto" consensus step; elsewhere an "auto" step is chosen for each graph. None
    for a fixed graph, or steps given as numbers (every graph mixes with them)."""
    varying = config.topology.varying
    if varying == "none":
        return None
    auto = [name for name in steps if getattr(config.algorithm, name, None) == "auto"]
    if varying in _PAIRINGS and (auto or config.algorithm.mixing_weights() == "metropolis"):
        return f"each {varying} graph's pairs average (1/2)"
    if auto:
        return f"{', '.join(auto)} chosen for each graph"
    return None


def full_exchange(setup: Setup, iterations: int) -> FullExchange | None:
    """What DSGD would send in ``iterations`` of ``setup``'s run (all of them, or those
    it made before a rule stopped it): every agent its whole model to each of its
    neighbours at each iteration; None for a run that is not decentralized SGD on a
    fixed graph (one learner, a server, layer-wise training, a varying graph)."""
    if not isinstance(setup, RoundsSetup) or not setup.plan.decentralized:
        return None
    if setup.config.topology.varying != "none":
        return None
    links = int(setup.graph.degrees().sum())
    model_bytes = setup.initial.shape[1] * setup.initial.element_size()
    return {
        "events": iterations * setup.graph.agents,
        "messages": iterations * links,
        "bytes": iterations * links * model_bytes,
    }


def _open_folder(
    config: Config, run_dir: Path | None, resume: dict[str, Any] | None
) -> MetricsWriter:
    """The writer of the run's records into ``run_dir`` (None: none is written; also
    ``run.log``), which holds those a resumed run keeps: a new run's config is saved; a
    resumed one keeps its records up to the checkpoint."""
    kept: list[EvaluationRecord] = []
    if run_dir is not None and resume is None:
        save_config(config, run_dir / "config.toml")
    elif run_dir is not None and resume is not None:
        kept = keep_records(run_dir / "metrics.jsonl", resume["records"])
        for partial in run_dir.glob(f".{CHECKPOINT}.*"):  # a save the kill cut short
            partial.unlink()
    metrics = run_dir / "metrics.jsonl" if run_dir is not None else None
    return MetricsWriter(metrics, kept, log=config.run.log, resumed=resume is not None)


def _result(
    config: Config,
    outcome: Outcome,
    name: str,
    preset: str,
    wall_seconds: float,
    run_dir: Path | None,
    records: list[EvaluationRecord],
) -> RunResult:
    """What ``summary.json`` says of a finished run whose records are ``records``."""
    last = outcome.last_record
    accuracy = last.get("test_accuracy")
    losses = last.get("test_loss") or [float("nan")]
    return RunResult(
        name=name or config.algorithm.name,
        preset=preset,
        algorithm=config.algorithm.name,
        dataset=config.data.dataset,
        agents=outcome.agents,
        topology=outcome.topology,
        iterations=outcome.iterations,
        seed=config.run.seed,
        accuracy=accuracy_summary(accuracy),
        test_loss=sum(losses) / len(losses),
        events=sum(outcome.events_per_agent),
        events_per_agent=outcome.events_per_agent,
        messages=outcome.messages,
        bytes=outcome.bytes,
        communication_saving=outcome.communication_saving,
        consensus_distance=last.get("consensus_distance", 0.0),
        wall_seconds=wall_seconds,
        train_seconds=outcome.train_seconds,
        samples=outcome.samples,
        samples_per_second=outcome.samples / max(outcome.train_seconds, 1e-9),
        run_dir=str(run_dir.resolve()) if run_dir is not None else None,
        parameters=outcome.parameters,
        extra={
            **outcome.extra,
            **accuracy_over_run(records, config.run.last_k),
            **validation_over_run(records, config.run.last_k),
        },
        records=records,
    )


def _stopped(result: RunResult, stop: Stop) -> RunResult:
    """``result`` of a run that ``stop`` ended early: its status and why."""
    return dataclasses.replace(result, status=stop.status, stopped=stop.summary())


def check_finite_record(record: EvaluationRecord) -> None:
    """Fail a run whose test loss is no longer a number (its steps diverged) where no
    rule of ``[collapse]`` watches it: the distributed runtime's, or one with
    ``collapse.enabled = false``."""
    losses = record.get("test_loss")
    if isinstance(losses, list) and not all(
        isinstance(loss, float) and math.isfinite(loss) for loss in losses
    ):
        raise RunFailed(
            f"training diverged by iteration {record.get('iteration')} (the test loss is no "
            "longer finite); lower the steps (algorithm.a, or algorithm.b where it has one)"
        )


def last_job(run_dir: Path) -> str | None:
    """How the last job in ``run_dir`` ended, for a run that is resumed: the reason its
    failed summary gives, or that it left no summary and who it was (the lock file it
    left, :mod:`murmur.training.folder_lock`); None for a folder with neither, or one
    that a job is writing now."""
    if is_locked(run_dir):
        return None
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        summary = None
    if isinstance(summary, dict) and summary.get("status") == "failed":
        return f"the last job in {run_dir} failed: {summary.get('error', 'no reason given')}"
    if summary is not None:
        return None
    named = holder(run_dir)
    if named is None:
        return None
    return (
        f"the last job in {run_dir}, {named.describe()}, ended without a summary: it was "
        "killed, or its machine stopped"
    )


def failure_reason(error: BaseException) -> str:
    """One line for summary.json saying why a run stopped early."""
    if isinstance(error, KeyboardInterrupt):
        return "interrupted"
    if isinstance(error, UsageError):
        return one_line(str(error))
    return one_line(f"{type(error).__name__}: {error}")


def check_run(config: Config, module: nn.Module | None = None) -> Setup:
    """Plan and build the simulator run of ``config``: everything checked, nothing
    started (``module``: the network to train instead of the one ``config.model``
    names)."""
    return prepare(plan(config, module=module), module)


def check_resumable(run_dir: Path) -> tuple[Config, dict[str, Any]]:
    """The config and checked checkpoint of the stopped run in ``run_dir``; UsageError,
    in one line, for a folder that cannot be resumed. Nothing is written."""
    config_file = run_dir / "config.toml"
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir} is not a run folder; give the folder of a stopped run")
    if not config_file.is_file():
        members = sorted(path.parent.name for path in run_dir.glob(f"*/{config_file.name}"))
        if members:
            raise UsageError(
                f"{run_dir} holds the runs of a comparison ({', '.join(members)}); "
                f"resume each unfinished one, e.g. --resume {run_dir / members[0]}"
            )
        raise UsageError(f"{run_dir} has no config.toml: it is not a run folder")
    _check_unfinished(run_dir)
    experiment = load_experiment(str(config_file))
    config = experiment.runs[0][1]
    checkpoint = read_checkpoint(run_dir / CHECKPOINT, config)
    metrics = run_dir / "metrics.jsonl"
    lines = metrics.read_bytes().splitlines() if metrics.is_file() else []
    if len(lines) < checkpoint["records"]:
        raise UsageError(
            f"{metrics} holds {len(lines)} records but the checkpoint was saved after "
            f"{checkpoint['records']}; the folder is damaged"
        )
    for number, line in enumerate(lines[: checkpoint["records"]], start=1):
        try:
            json.loads(line)
        except ValueError:
            raise UsageError(
                f"{metrics}:{number} is not a JSON record; the folder is damaged"
            ) from None
    return config, checkpoint


def _check_unfinished(run_dir: Path) -> None:
    """UsageError where ``run_dir``'s summary says its run is over: there is nothing to
    resume."""
    status = run_status(run_dir / "summary.json")
    if status == "finished":
        raise UsageError(f"{run_dir} holds a finished run; there is nothing to resume")
    if status in STOPPED:
        raise UsageError(
            f"{run_dir} holds a run that a rule stopped ({status}); there is nothing to "
            "resume (run it again with collapse.enabled = false to train it to its end)"
        )


def run_status(summary: Path) -> str | None:
    """The ``status`` that ``summary`` (a run folder's summary.json) gives; None where it
    gives none or cannot be read."""
    try:
        status = json.loads(summary.read_text()).get("status")
    except (OSError, ValueError, AttributeError):
        return None
    return status if isinstance(status, str) else None


def finished(summary: Path) -> bool:
    """Whether ``summary`` (a run folder's summary.json) says the run is over: it
    finished, or a rule of ``[collapse]`` stopped it."""
    return run_status(summary) in ("finished", *STOPPED)


def keep_records(path: Path, count: int) -> list[EvaluationRecord]:
    """Keep the first ``count`` records of ``path`` (a resumed run writes the rest
    again); the file is replaced at once. Returns them."""
    lines = path.read_bytes().splitlines(keepends=True)[:count] if path.is_file() else []
    temporary = path.with_name(f".{path.name}.resume")
    with temporary.open("wb") as file:
        file.writelines(lines)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    return [json.loads(line) for line in lines]


def check_run_dir(path: Path) -> None:
    """Refuse a run folder that already holds something (a run never overwrites another),
    or that another job is writing."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"{path} is a file, not a folder; choose another --out")
    if path.exists():
        refuse_if_locked(path)
    if path.exists() and _holds_something(path):
        raise UsageError(f"{path} already exists and is not empty; choose another --out")


def _holds_something(path: Path) -> bool:
    """Whether the folder ``path`` holds anything but a lock file (this process's, or one
    left by a job that is gone)."""
    return any(entry.name != LOCK_FILE for entry in path.iterdir())


def free_folder(path: Path, stem: str) -> Path:
    """``path`` if it is free (missing or an empty folder); for a folder that holds
    something, a new timestamped subfolder of it, ``<stem>-YYYYmmdd-HHMMSS`` (``-2``,
    ``-3``, ... where that is taken too), as ``murmur run`` names its folders. A folder
    that another job is writing is refused in one line."""
    if path.is_dir():
        refuse_if_locked(path)
    if not path.is_dir() or not _holds_something(path):
        return path
    base = f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    candidate, number = path / base, 1
    while candidate.exists():
        number += 1
        candidate = path / f"{base}-{number}"
    return candidate


def create_run_dir(out_dir: str | Path) -> Path:
    path = Path(out_dir)
    check_run_dir(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create run folder {path}: {error.strerror}") from None
    return path
