"""Run an experiment on this machine: the simulator, or Hogwild's processes.

    config -> prepare (training.setup) -> the runner of the algorithm's kind
           -> metrics.jsonl + summary.json (training.runs) -> RunResult

The distributed runtime (``murmur.dist``) trains the same prepared runs with
runners of its own.
"""

from __future__ import annotations

from pathlib import Path

from murmur.config import Config
from murmur.metrics.records import RunResult
from murmur.procs.hogwild import run_hogwild
from murmur.registry import ALGORITHMS
from murmur.sim.runners import run_layerwise, run_sgd
from murmur.sim.server import run_server
from murmur.training.runs import Runner, check_resumable, check_run, train_run
from murmur.training.setup import Setup

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
) -> RunResult:
    """Train one run on this machine; write its folder when ``out_dir`` is given.

    ``setup`` is ``prepare(config)`` when the caller has already built it.
    """
    runner = RUNNERS[ALGORITHMS[config.algorithm.name].kind]
    return train_run(
        config, out_dir, name=name, preset=preset, progress=progress, setup=setup, runner=runner
    )


def resume(run_dir: str | Path, *, progress: bool = False) -> RunResult:
    """Continue the stopped run in ``run_dir`` from its checkpoint, to its end.

    Everything is checked before the folder is touched (UsageError otherwise).
    """
    folder = Path(run_dir)
    config, checkpoint = check_resumable(folder)
    setup = check_run(config)
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
