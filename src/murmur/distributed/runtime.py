"""The distributed runtime's run entry: one process per agent, or per block of agents,
on torch.distributed (gloo). :func:`run_distributed` runs this process's rank of a run
(:func:`resume_distributed` continues a stopped one): it plans the run, prepares rank
0's folder, forms the process group (:mod:`murmur.distributed.group`), agrees with the
other ranks where a continued run starts, and hands the rank to its family's runner.

The runners: a block of synchronous SGD agents in :mod:`murmur.distributed.sgd_rank`;
dSSFN, one node per rank, in :mod:`murmur.distributed.layer_ranks`; AsySG-con, a
parameter server on rank 0 and one worker per other rank (WORLD_SIZE =
algorithm.workers + 1), in :mod:`murmur.distributed.server`. Rank 0 writes the run
folder (``experiment.run``), with real wall-clock times. ``murmur launch`` is
:mod:`murmur.distributed.launch`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.distributed as dist

from murmur.config import Config, TimingConfig, load_experiment, same_config
from murmur.distributed.checkpoints import (
    FOLDER,
    RankCheckpoints,
    Start,
    check_agents_per_rank,
    kept_checkpoints,
    rank_file,
    readable_iterations,
)
from murmur.distributed.failures import PeerFailure
from murmur.distributed.group import RankEnvironment, init_group
from murmur.distributed.layer_ranks import run_layerwise_rank
from murmur.distributed.server import newest_server_checkpoint, server_runner
from murmur.distributed.sgd_rank import Restored, agreed_sgd, train_rank
from murmur.distributed.transport import (
    DEFAULT_TIMEOUT,
)
from murmur.distributed.varying import exchange_span, links
from murmur.errors import UsageError
from murmur.metrics.records import Outcome, RunResult
from murmur.registry import ALGORITHMS
from murmur.training.checkpoint import header, read_checkpoint
from murmur.training.folder_lock import FolderLock, lock_folder, refuse_if_locked
from murmur.training.plan import Plan, check_world, plan
from murmur.training.runs import OnRecord, Runner, check_run_dir, finished, train_run
from murmur.training.setup import (
    LayerSetup,
    RoundsSetup,
    ServerSetup,
    Setup,
    prepare,
)


def run_distributed(
    config: Config | Plan,
    out_dir: str | Path | None = None,
    *,
    name: str = "",
    preset: str = "",
    progress: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    environ: Mapping[str, str] = os.environ,
    resume: bool = False,
    agents_per_rank: int = 1,
) -> RunResult:
    """Run this process's rank of ``config``; rank 0 writes ``out_dir``.

    ``config``: the run's config, or the plan ``murmur launch`` made of it for every
    rank (with its own ``agents_per_rank``). Every rank returns the gathered result;
    only rank 0's holds the run folder and the final parameters (agents, P). Raises
    UsageError for bad input (before any training), PeerFailure when a peer fails.

    ``resume``: continue the stopped run in ``out_dir`` from the newest iteration
    every rank saved (:mod:`murmur.distributed.checkpoints`). A rank that torchrun
    restarted after a failure (TORCHELASTIC_RESTART_COUNT > 0) continues the
    same way, or starts over when the ranks saved no iteration in common.

    ``agents_per_rank``: the block of consecutive agents each rank holds
    (WORLD_SIZE x agents_per_rank = topology.agents).
    """
    if timeout <= 0:
        raise UsageError(f"the timeout must be positive, not {timeout:g}")
    if isinstance(config, Plan):
        checked = config
    else:
        checked = plan(config, "distributed", agents_per_rank=agents_per_rank)
    if resume and out_dir is None:
        raise ValueError("a resumed run needs its run folder")
    env = RankEnvironment.from_environ(environ)
    check_world(checked.config, env.world, agents_per_rank=checked.agents_per_rank)
    start = _start(checked, env, resume, out_dir)
    if env.rank == 0:
        _note_timing(checked.config)
    setup = prepare(checked)
    saves = _rank_saves(checked, out_dir, env.rank, setup, name, preset)
    run_dir = Path(out_dir) if out_dir is not None and env.rank == 0 else None
    lock = _rank_zero_lock(run_dir)
    try:
        kept = _rank_zero_folder(checked, run_dir, start, saves)
        return _in_group(
            (checked, setup, saves), env, timeout, (start, kept, run_dir), (name, preset, progress)
        )
    finally:
        if lock is not None:
            lock.release()


def _in_group(
    run: tuple[Plan, Setup, RankCheckpoints],
    env: RankEnvironment,
    timeout: float,
    where: tuple[Start, _KeptFolder | None, Path | None],
    shown: tuple[str, str, bool],
) -> RunResult:
    """Join the process group and train this rank of ``run`` (its plan, setup and saves)
    from ``where`` (how it starts, rank 0's kept folder and its folder); ``shown``: the
    run's name, preset and whether rank 0 shows its progress."""
    checked, setup, saves = run
    start, kept, run_dir = where
    name, preset, progress = shown
    init_group(env, timeout)
    try:
        restored = agreed_sgd(checked, saves, env.rank, start)
        return train_run(
            setup,
            run_dir,
            name=name,
            preset=preset,
            progress=progress and env.rank == 0,
            runner=_rank_runner(checked, env.rank, timeout, saves, start, restored),
            resume=_resumed_folder(checked, kept, restored),
        )
    except PeerFailure as failure:
        raise PeerFailure(failure.ranks, f"rank {env.rank} stopped: {failure}") from None
    finally:
        dist.destroy_process_group()


def _rank_zero_lock(run_dir: Path | None) -> FolderLock | None:
    """Rank 0's hold on the lock of its folder (made for a new run), before any rank joins:
    a folder another job writes is refused in one line (None on the other ranks)."""
    if run_dir is None:
        return None
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create run folder {run_dir}: {error.strerror}") from None
    return lock_folder(run_dir)


def _note_timing(config: Config) -> None:
    """A note on stderr that the distributed runtime ignores ``[timing]``."""
    if config.timing != TimingConfig():
        print(
            "murmur: note: [timing] sets the simulator's virtual clock; a distributed run "
            "takes real time and ignores it",
            file=sys.stderr,
        )


def _start(checked: Plan, env: RankEnvironment, resume: bool, out_dir: str | Path | None) -> Start:
    """How this rank starts: afresh, resumed by the user, or restarted by torchrun (which
    continue from checkpoints only where the run saves them)."""
    saved = "distributed" in ALGORITHMS[checked.config.algorithm.name].capabilities.checkpoints
    if out_dir is None or not saved:
        return "new"
    return "resume" if resume else "restart" if env.attempt > 0 else "new"


def _rank_saves(
    checked: Plan, out_dir: str | Path | None, rank: int, setup: Setup, name: str, preset: str
) -> RankCheckpoints:
    """Where and how often this rank saves its part of the run."""
    config = checked.config
    return RankCheckpoints(
        every=config.run.checkpoint_every,
        path=Path(out_dir) / FOLDER if out_dir is not None else None,
        header=header(config, name, preset),
        records=lambda: 0,
        rank=rank,
        keep=kept_checkpoints(
            links(config, setup.graph),
            config.run.checkpoint_every,
            span=exchange_span(config, setup.graph),
        ),
    )


@dataclass(frozen=True)
class _KeptFolder:
    """Rank 0's folder of a run that continues: checked to be its own, and how many of its
    records it keeps where that is known before the ranks agree (the server's, from its
    checkpoint; dSSFN's rank 0 writes the restored layers' records again)."""

    records: int


def _rank_zero_folder(
    checked: Plan, run_dir: Path | None, start: Start, saves: RankCheckpoints
) -> _KeptFolder | None:
    """Rank 0's folder: checked to be empty for a new run (None); for one that continues,
    checked to be its own. None on the other ranks."""
    if run_dir is None:
        return None
    config = checked.config
    if start == "new" or not (run_dir / "config.toml").is_file():
        check_run_dir(run_dir)
        return None
    check_same_run(run_dir, config)
    if checked.kind == "server":  # the server writes them as it goes
        saved = newest_server_checkpoint(saves, config)
        return _KeptFolder(saved["state"]["records"] if saved is not None else 0)
    return _KeptFolder(0)


def _resumed_folder(
    checked: Plan, kept: _KeptFolder | None, restored: Restored | None
) -> dict[str, Any] | None:
    """What :func:`train_run` continues in rank 0's kept folder: the records it keeps, for
    an SGD run those up to the iteration every rank saved (:func:`agreed_sgd`)."""
    if kept is None:
        return None
    if checked.kind == "sgd":
        return {"records": restored.records if restored is not None else 0}
    return {"records": kept.records}


def _rank_runner(
    checked: Plan,
    rank: int,
    timeout: float,
    saves: RankCheckpoints,
    start: Start,
    restored: Restored | None = None,
) -> Runner:
    """The runner of this rank, by the run's family: a block of synchronous SGD agents,
    a dSSFN node, or the parameter server (rank 0) or a worker."""

    def train(setup: Setup, on_record: OnRecord, progress: bool) -> Outcome:
        if isinstance(setup, LayerSetup):
            return run_layerwise_rank(
                setup,
                setup.solver,
                on_record,
                progress,
                rank=rank,
                timeout=timeout,
                saves=saves,
                start=start,
            )
        if isinstance(setup, ServerSetup):
            serve = server_runner(rank, timeout, saves, start)
            return serve(setup, setup.workers, on_record, progress)
        if not isinstance(setup, RoundsSetup):
            raise TypeError(f"no rank trains a {type(setup).__name__}")
        return train_rank(
            setup,
            setup.algorithm,
            on_record,
            progress,
            rank=rank,
            timeout=timeout,
            saves=saves,
            restored=restored,
            block=checked.agents_per_rank,
        )

    return train


def resume_distributed(
    run_dir: Path,
    *,
    progress: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    environ: Mapping[str, str] = os.environ,
    agents_per_rank: int = 1,
    checked: Plan | None = None,
) -> RunResult:
    """Continue this process's rank of the stopped run in ``run_dir`` (``murmur run
    --resume DIR --runtime distributed``): its config.toml is the config, and every rank
    restores the newest iteration all ranks saved. ``agents_per_rank``: as the stopped
    run had it. ``checked``: the plan ``murmur launch --resume`` made of it."""
    config_file = run_dir / "config.toml"
    if not config_file.is_file():
        raise UsageError(f"{run_dir} has no config.toml: it is not a run folder")
    rank = RankEnvironment.from_environ(environ).rank
    if rank == 0:
        refuse_if_locked(run_dir)  # before the checkpoints another job may be writing
    config = load_experiment(str(config_file)).runs[0][1]
    if ALGORITHMS[config.algorithm.name].kind == "server":
        rank = 0  # only the server saves
    check_agents_per_rank(run_dir, config, agents_per_rank)
    folder = run_dir / FOLDER
    iterations = readable_iterations(folder, rank, config)
    if not iterations:
        raise UsageError(
            f"{run_dir} has no readable checkpoint of rank {rank} in {FOLDER}/ to resume from "
            "(a distributed run saves them only with run.checkpoint_every > 0)"
        )
    saved = read_checkpoint(rank_file(folder, rank, iterations[-1]), config, run_dir)
    return run_distributed(
        checked if checked is not None else config,
        run_dir,
        name=saved["name"],
        preset=saved["preset"],
        progress=progress,
        timeout=timeout,
        environ=environ,
        resume=True,
        agents_per_rank=agents_per_rank,
    )


def check_same_run(run_dir: Path, config: Config) -> None:
    """UsageError unless ``run_dir`` holds an unfinished run of ``config``, which a
    resumed or restarted rank 0 may continue."""
    if not same_config((run_dir / "config.toml").read_text(), config):
        raise UsageError(
            f"{run_dir} holds a run of another config; a restarted or resumed run "
            "continues only its own folder"
        )
    if finished(run_dir / "summary.json"):
        raise UsageError(f"{run_dir} holds a finished run; there is nothing to resume")
