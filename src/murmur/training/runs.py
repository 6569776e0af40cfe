"""One run's folder and result: config.toml, metrics.jsonl, summary.json.

A runtime trains (a *runner*: the simulator's, a rank's, Hogwild's processes)
and hands back an :class:`~murmur.metrics.records.Outcome`; :func:`train_run`
writes the resolved config first, every record as it comes, and the
:class:`~murmur.metrics.records.RunResult` last; a run that stops early (a
diverging step, a lost peer, an interrupt) leaves a ``summary.json`` with
``"status": "failed"`` and the reason. A run never overwrites another.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from murmur.config import Config, save_config
from murmur.errors import RunFailed, UsageError, one_line
from murmur.metrics.evaluation import accuracy_summary
from murmur.metrics.records import MetricsWriter, Outcome, RunResult, write_failure
from murmur.registry import ALGORITHMS
from murmur.training.setup import Setup, build_context, prepare

Runner = Callable[[Setup, Any, Callable[[dict[str, Any]], None], bool], Outcome]
"""Trains a prepared run: ``(setup, algorithm, on_record, progress) -> Outcome``."""


def train_run(
    config: Config,
    out_dir: str | Path | None = None,
    *,
    name: str = "",
    preset: str = "",
    progress: bool = False,
    setup: Setup | None = None,
    runner: Runner,
) -> RunResult:
    """Train one run with ``runner``; write its folder when ``out_dir`` is given.

    ``setup`` is ``prepare(config)`` when the caller has already built it.
    """
    started = time.perf_counter()
    setup = setup if setup is not None else prepare(config)
    spec = ALGORITHMS[config.algorithm.name]
    algorithm = spec.build(config.algorithm, setup.graph, build_context(setup))
    run_dir = create_run_dir(out_dir) if out_dir is not None else None
    if run_dir is not None:
        save_config(config, run_dir / "config.toml")
    writer = MetricsWriter(run_dir / "metrics.jsonl" if run_dir is not None else None)

    def on_record(record: dict[str, Any]) -> None:
        check_finite_record(record)
        writer.write(record)

    try:
        outcome = runner(setup, algorithm, on_record, progress)
    except BaseException as error:
        if run_dir is not None:
            write_failure(
                run_dir / "summary.json",
                failure_reason(error),
                name=name or config.algorithm.name,
                preset=preset,
                algorithm=config.algorithm.name,
                dataset=config.data.dataset,
                seed=config.run.seed,
                evaluations=len(writer.records),
                wall_seconds=time.perf_counter() - started,
                run_dir=str(run_dir.resolve()),
            )
        raise
    finally:
        writer.close()
    last = outcome.last_record
    accuracy = last.get("test_accuracy")
    losses = last.get("test_loss") or [float("nan")]
    result = RunResult(
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
        wall_seconds=time.perf_counter() - started,
        train_seconds=outcome.train_seconds,
        samples=outcome.samples,
        samples_per_second=outcome.samples / max(outcome.train_seconds, 1e-9),
        run_dir=str(run_dir.resolve()) if run_dir is not None else None,
        parameters=outcome.parameters,
        extra=outcome.extra,
    )
    if run_dir is not None:
        result.write(run_dir / "summary.json")
    return result


def check_finite_record(record: dict[str, Any]) -> None:
    """Stop a run whose test loss is no longer a number: its steps diverged."""
    losses = record.get("test_loss")
    if isinstance(losses, list) and not all(
        isinstance(loss, float) and math.isfinite(loss) for loss in losses
    ):
        raise RunFailed(
            f"training diverged by iteration {record.get('iteration')} (the test loss is no "
            "longer finite); lower the steps (algorithm.a, or algorithm.b where it has one)"
        )


def failure_reason(error: BaseException) -> str:
    """One line for summary.json saying why a run stopped early."""
    if isinstance(error, KeyboardInterrupt):
        return "interrupted"
    if isinstance(error, UsageError):
        return one_line(str(error))
    return one_line(f"{type(error).__name__}: {error}")


def check_run(config: Config) -> Setup:
    """Build and check everything a run needs, algorithm included; start nothing.

    What this accepts can still fail only while training (a diverging step);
    the algorithm built to check it is dropped, ``train_run`` builds its own.
    """
    setup = prepare(config)
    spec = ALGORITHMS[config.algorithm.name]
    spec.build(config.algorithm, setup.graph, build_context(setup))
    return setup


def check_run_dir(path: Path) -> None:
    """Refuse a run folder that already holds something: a run never overwrites another."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"{path} is a file, not a folder; choose another --out")
    if path.exists() and any(path.iterdir()):
        raise UsageError(f"{path} already exists and is not empty; choose another --out")


def create_run_dir(out_dir: str | Path) -> Path:
    path = Path(out_dir)
    check_run_dir(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create run folder {path}: {error.strerror}") from None
    return path
