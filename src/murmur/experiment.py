"""Run an experiment on this machine: the simulator, or Hogwild's processes.

    config -> plan (training.plan) -> prepare (training.setup)
           -> the runner of the algorithm's family
           -> metrics.jsonl + summary.json (training.runs) -> RunResult

The distributed runtime (``murmur.distributed``) trains the same plans with runners of
its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from torch import nn

from murmur.config import Config
from murmur.data import Dataset
from murmur.errors import UsageError
from murmur.metrics.record_types import EvaluationRecord
from murmur.metrics.records import Outcome, RunResult
from murmur.procs.hogwild import run_hogwild
from murmur.sim.runners import run_layerwise, run_sgd
from murmur.sim.server import run_server
from murmur.training.data_plan import given_data_config
from murmur.training.folder_lock import lock_folder
from murmur.training.plan import Plan, plan
from murmur.training.runs import OnRecord, Runner, check_resumable, last_job, train_run
from murmur.training.setup import (
    HogwildSetup,
    LayerSetup,
    RoundsSetup,
    ServerSetup,
    Setup,
    prepare,
)


def simulate(setup: Setup, on_record: OnRecord, progress: bool) -> Outcome:
    """Train ``setup`` on this machine with the runner of its family."""
    if isinstance(setup, LayerSetup):
        return run_layerwise(setup, setup.solver, on_record, progress)
    if isinstance(setup, ServerSetup):
        return run_server(setup, setup.workers, on_record, progress)
    if isinstance(setup, HogwildSetup):
        return run_hogwild(setup, setup.workers, on_record, progress)
    if isinstance(setup, RoundsSetup):
        return run_sgd(setup, setup.algorithm, on_record, progress)
    raise TypeError(f"no runner trains a {type(setup).__name__}")


def run(
    config: Config | Plan,
    out_dir: str | Path | None = None,
    *,
    name: str = "",
    preset: str = "",
    progress: bool = False,
    setup: Setup | None = None,
    model: nn.Module | None = None,
    data: Dataset | None = None,
    on_record: OnRecord | None = None,
) -> RunResult:
    """Train one run on this machine; write its folder when ``out_dir`` is given.

    ``config``: the run's config, or its plan (``training.plan.plan(config)``) when the
    caller has already checked it; ``setup``: ``prepare(plan)`` when the caller has
    already built it too.

    ``model``: any ``torch.nn.Module`` to train instead of the network ``config.model``
    names (mini-batch algorithms; every agent starts from a copy of its parameters,
    the module itself is not changed). It reads the data's rows, (batch, features),
    and gives (batch, outputs): class scores, or regression targets. A module with
    buffers (batch norm) keeps each agent's running statistics, never exchanged
    (:mod:`murmur.models.statistics`); server and Hogwild runs refuse it with a
    UsageError. The run's config and folder say
    ``model.name = "custom"``; ``resume`` continues such a run only when given the
    same module again (``murmur run --resume`` cannot rebuild it and says so).

    ``data``: a Dataset (``murmur.data.from_arrays``, ``from_torch_dataset``) to train
    on instead of the one ``config.data`` names; the run's config says
    ``data.dataset = "arrays"`` with the arrays' SHA-256 in ``data.sha256``.

    ``on_record``: called with each evaluation's record as the run makes it, once the
    run has written it and the rules of ``[collapse]`` have judged it. An exception it
    raises ends the run there and reaches the caller (the run's folder says it failed).
    """
    if model is not None or data is not None:
        base = config.config if isinstance(config, Plan) else config
        if model is not None:
            base = dataclasses.replace(base, model=dataclasses.replace(base.model, name="custom"))
        if data is not None:
            base = given_data_config(base)
        setup = prepare(plan(base, module=model, data=data), model, data)
    elif setup is None:
        setup = prepare(config if isinstance(config, Plan) else plan(config))
    runner = simulate if on_record is None else _also_calling(on_record)
    return train_run(setup, out_dir, name=name, preset=preset, progress=progress, runner=runner)


def _also_calling(extra: OnRecord) -> Runner:
    """:func:`simulate`, handing each record to ``extra`` after the run's own handling."""

    def runner(setup: Setup, on_record: OnRecord, progress: bool) -> Outcome:
        def both(record: EvaluationRecord) -> None:
            on_record(record)
            extra(record)

        return simulate(setup, both, progress)

    return runner


def resume(
    run_dir: str | Path,
    *,
    progress: bool = False,
    model: nn.Module | None = None,
    data: Dataset | None = None,
    note: Callable[[str], None] | None = None,
) -> RunResult:
    """Continue the stopped run in ``run_dir`` from its checkpoint, to its end.

    Everything is checked before the folder is touched (UsageError otherwise); then
    ``note`` (if given) is told, in one line, how the last job in the folder ended where
    it did not finish (:func:`murmur.training.runs.last_job`).
    ``model``: the module a run of ``model.name = "custom"`` was started with;
    ``data``: the Dataset of a run of ``data.dataset = "arrays"``.
    """
    folder = Path(run_dir)
    lock = lock_folder(folder) if folder.is_dir() else None  # before anything is read
    try:
        config, checkpoint = check_resumable(folder)
        if model is not None and config.model.name != "custom":
            raise UsageError(
                f"{folder} holds a run of model.name = {config.model.name}, which builds its "
                "own network; resume it without a model"
            )
        setup = prepare(plan(config, module=model, data=data), model, data)
        said = last_job(folder)
        if note is not None and said is not None:
            note(f"murmur: {said}")
        return train_run(
            setup,
            folder,
            name=checkpoint["name"],
            preset=checkpoint["preset"],
            progress=progress,
            runner=simulate,
            resume=checkpoint,
        )
    finally:
        if lock is not None:
            lock.release()
