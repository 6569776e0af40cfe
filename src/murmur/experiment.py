"""Run an experiment on this machine: the simulator, or Hogwild's processes.

    config -> prepare (training.setup) -> the runner of the algorithm's kind
           -> metrics.jsonl + summary.json (training.runs) -> RunResult

The distributed runtime (``murmur.distributed``) trains the same prepared runs with
runners of its own.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from torch import nn

from murmur.config import Config
from murmur.errors import UsageError
from murmur.metrics.records import RunResult
from murmur.procs.hogwild import run_hogwild
from murmur.registry import ALGORITHMS
from murmur.sim.runners import run_layerwise, run_sgd
from murmur.sim.server import run_server
from murmur.training.runs import Runner, check_resumable, check_run, train_run
from murmur.training.setup import Setup, prepare

RUNNERS: dict[str, Runner] = {
    "sgd": run_sgd,
    "layerwise": run_layerwise,
    "server": run_server,
    "hogwild": run_hogwild,
}
"""How each kind of algorithm (``AlgorithmSpec.kind``) is trained on this machine."""


def run(
    config: Config,
    out_dir: str | Path | None = None,
    *,
    name: str = "",
    preset: str = "",
    progress: bool = False,
    setup: Setup | None = None,
    model: nn.Module | None = None,
) -> RunResult:
    """Train one run on this machine; write its folder when ``out_dir`` is given.

    ``setup`` is ``prepare(config)`` when the caller has already built it.

    ``model``: any ``torch.nn.Module`` to train instead of the network ``config.model``
    names (mini-batch algorithms; every agent starts from a copy of its parameters,
    the module itself is not changed). It reads the data's rows, (batch, features),
    and gives (batch, outputs): class scores, or regression targets. It may have no
    buffers: batch norm's running statistics would have to be kept per agent, which
    murmur does not do (use ``track_running_stats=False``, GroupNorm or LayerNorm);
    such a module is refused with a UsageError. The run's config and folder say
    ``model.name = "custom"``; ``resume`` continues such a run only when given the
    same module again (``murmur run --resume`` cannot rebuild it and says so).
    """
    if model is not None:
        config = dataclasses.replace(config, model=dataclasses.replace(config.model, name="custom"))
        setup = prepare(config, model)
    runner = RUNNERS[ALGORITHMS[config.algorithm.name].kind]
    return train_run(
        config, out_dir, name=name, preset=preset, progress=progress, setup=setup, runner=runner
    )


def resume(
    run_dir: str | Path, *, progress: bool = False, model: nn.Module | None = None
) -> RunResult:
    """Continue the stopped run in ``run_dir`` from its checkpoint, to its end.

    Everything is checked before the folder is touched (UsageError otherwise).
    ``model``: the module a run of ``model.name = "custom"`` was started with.
    """
    folder = Path(run_dir)
    config, checkpoint = check_resumable(folder)
    if model is not None and config.model.name != "custom":
        raise UsageError(
            f"{folder} holds a run of model.name = {config.model.name}, which builds its own "
            "network; resume it without a model"
        )
    setup = check_run(config, model)
    runner = RUNNERS[ALGORITHMS[config.algorithm.name].kind]
    return train_run(
        config,
        folder,
        name=checkpoint["name"],
        preset=checkpoint["preset"],
        progress=progress,
        setup=setup,
        runner=runner,
        resume=checkpoint,
    )
