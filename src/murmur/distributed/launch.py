"""``murmur launch``: the ranks of one run forked on this machine, on loopback, every input
checked first (:mod:`murmur.distributed.local_ranks`)."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch

from murmur import portable
from murmur.config import Config, Experiment, load_experiment, shadowed_path
from murmur.distributed.checkpoints import check_agents_per_rank, check_resumable_ranks
from murmur.distributed.group import loopback_interface
from murmur.distributed.local_ranks import run_ranks
from murmur.distributed.runtime import check_same_run
from murmur.distributed.transport import DEFAULT_TIMEOUT
from murmur.errors import UsageError
from murmur.registry import ALGORITHMS, FAMILIES
from murmur.training.folder_lock import lock_folder, refuse_if_locked
from murmur.training.plan import (
    Plan,
    check_capabilities,
    distributed_checkpointed_names,
    plan,
    write_plan_file,
)
from murmur.training.runs import check_run_dir, last_job, write_failed_summary
from murmur.training.setup import prepare

LOOPBACK = "127.0.0.1"


@dataclasses.dataclass(frozen=True)
class RankOptions:
    """How the ranks of a launch are run, whatever run they hold: the port of their
    process group, their patience, their printing and their restarts."""

    port: int | None = None
    """The loopback port rank 0 listens on for the process group (None: a free one)."""
    timeout: float = DEFAULT_TIMEOUT
    """Seconds each rank waits for a peer: to join, for each step's messages, to finish."""
    progress: bool = True
    """Whether the ranks print their progress (False: ``--quiet``)."""
    max_restarts: int = 0
    """How many times every rank is restarted after one fails; the restarted ranks
    continue from their checkpoints (:mod:`murmur.distributed.checkpoints`)."""


def launch(
    nproc: int | None,
    source: str | None,
    overrides: Sequence[str],
    out: str | None,
    *,
    ranks: RankOptions,
    resume: str | None = None,
    agents_per_rank: int = 1,
    rank_main: Callable[[list[str]], int],
    plugins: Sequence[str] = (),
) -> int:
    """Start ``nproc`` ranks of ``source`` on this machine, forked from this process
    (:mod:`murmur.distributed.local_ranks`), bound to loopback, run as ``ranks`` says.

    Everything that can be wrong with the input is checked first; returns 0,
    or the exit status of the first rank that failed.
    ``resume``: the folder of a stopped run to continue, with its own config
    (``source``, ``overrides`` and ``out`` are then None or empty).
    ``agents_per_rank``: each rank holds a block of that many agents.
    ``rank_main``: what each forked rank runs with its ``murmur run`` arguments (the
    command line's ``main``). ``plugins``: plugins of every run besides its config's
    (``--plugin``), recorded in the plan every rank imports.
    """
    _check_arguments(nproc, agents_per_rank, ranks)
    torch.set_num_threads(1)  # see _prepare_here
    if resume is not None:
        checked, done = check_resumable_launch(Path(resume), nproc, agents_per_rank)
        if ranks.progress:
            unit = FAMILIES[checked.kind].unit
            print(f"resuming {resume} from {unit} {done}", file=sys.stderr)
        note = last_job(Path(resume))
        if note is not None:
            print(f"murmur: {note}", file=sys.stderr)
        rank_argv, name, preset = ["--resume", resume], "", ""
    else:
        checked, rank_argv, name, preset = _planned(
            nproc, source, overrides, out, agents_per_rank, plugins
        )
    check_restarts(checked, ranks.max_restarts)
    port = ranks.port if ranks.port is not None else free_port(LOOPBACK)
    check_port_free(LOOPBACK, port)
    rank_environment(checked)
    run_dir = Path(resume) if resume is not None else _out_of(rank_argv)
    with tempfile.TemporaryDirectory(prefix="murmur-launch-") as folder, _held(run_dir):
        plan_file = Path(folder) / "plan.json"
        write_plan_file(plan_file, checked, name, preset)
        argv = _rank_argv(checked, ranks, [*rank_argv, f"--plan={plan_file}"])
        failed = _summary_if_none(run_dir, checked.config, (name, preset))
        return run_ranks(
            checked.processes, argv, LOOPBACK, port, ranks.max_restarts, rank_main, failed
        )


@contextlib.contextmanager
def _held(run_dir: Path) -> Iterator[None]:
    """The launcher's hold on the lock of the run's folder (made for a new run) while its
    ranks run: they inherit it, so a second job into the folder is refused for as long
    as any of them lives."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create run folder {run_dir}: {error.strerror}") from None
    with lock_folder(run_dir):
        yield


def _summary_if_none(
    run_dir: Path, config: Config, names: tuple[str, str]
) -> Callable[[int, int], None]:
    """What the launcher does when its ranks failed: where no rank was left to write this
    job's failed summary (rank 0 was killed, or stopped; a summary older than the job is
    an earlier job's), it writes one naming the rank that failed first and how (rank -1:
    the launcher itself was stopped by a signal)."""
    started, since = time.perf_counter(), time.time()

    def write(rank: int, status: int) -> None:
        try:
            if (run_dir / "summary.json").stat().st_mtime >= since:
                return  # a rank wrote it
        except OSError:
            pass
        how = f"exited with status {status}"
        try:
            if status > 128:
                how = f"was killed by {signal.Signals(status - 128).name}"
        except ValueError:  # no signal of that number
            pass
        who = f"rank {rank}" if rank >= 0 else "murmur launch"
        how = how.replace("was killed by", "was stopped by") if rank < 0 else how
        reason = f"{who} {how}; murmur launch wrote this summary, no rank being left to"
        try:
            lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        except OSError:
            lines = []
        seconds = time.perf_counter() - started
        write_failed_summary(run_dir, reason, config, names, len(lines), seconds)

    return write


def _out_of(rank_argv: Sequence[str]) -> Path:
    """The run folder a new run's ranks are given (``--out=DIR``)."""
    (out,) = [item.removeprefix("--out=") for item in rank_argv if item.startswith("--out=")]
    return Path(out)


def free_port(address: str) -> int:
    """A port on ``address`` that nothing listens on now (the system's choice)."""
    with socket.create_server((address, 0)) as server:
        return int(server.getsockname()[1])


def rank_environment(checked: Plan) -> None:
    """Set what every rank inherits from this process's environment: one OpenMP thread,
    gloo on loopback and, for ``run.portable``, the pinned kernels' settings
    (:data:`murmur.portable.ENVIRONMENT`, ``MURMUR_PORTABLE=1`` with them), which each
    rank pins and checks before it computes."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    interface = loopback_interface()
    if interface is not None:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", interface)
    if checked.config.run.portable:
        portable.pin_environment()


def _planned(
    nproc: int | None,
    source: str | None,
    overrides: Sequence[str],
    out: str | None,
    agents_per_rank: int,
    plugins: Sequence[str] = (),
) -> tuple[Plan, list[str], str, str]:
    """A new run's plan, checked for ``nproc`` ranks, with its data files read, and the
    ranks' arguments, name and preset; its folder is checked to be free."""
    if nproc is None or source is None:
        raise UsageError("murmur launch needs --nproc and a preset (or --resume DIR)")
    note = shadowed_path(source)
    if note is not None:
        print(f"murmur: {note}", file=sys.stderr)
    experiment = load_experiment(source, overrides, plugins)
    name, config = single_run(experiment)
    checked = plan(
        config, "distributed", world=nproc, world_name="--nproc", agents_per_rank=agents_per_rank
    )
    _prepare_here(checked)  # the data files are read before any rank starts
    root = Path(out) if out else default_run_dir(experiment.name)
    check_run_dir(root)
    return checked, [f"--out={root}"], name, experiment.name


def _prepare_here(checked: Plan) -> None:
    """Build the run in this process (its data files read, its graph built), on one
    torch thread whatever ``run.threads`` says: the ranks are forked from this process,
    and a child of a process whose OpenMP threads have started hangs at its first
    parallel operation, while one forked before they start makes its own."""
    one_thread = dataclasses.replace(checked.config.run, threads=1)
    prepare(
        dataclasses.replace(checked, config=dataclasses.replace(checked.config, run=one_thread))
    )


def _check_arguments(nproc: int | None, agents_per_rank: int, ranks: RankOptions) -> None:
    """UsageError, in one line, for a number out of its range."""
    if nproc is not None and nproc < 1:
        raise UsageError(f"--nproc must be at least 1, not {nproc}")
    if agents_per_rank < 1:
        raise UsageError(f"--agents-per-rank must be at least 1, not {agents_per_rank}")
    if ranks.timeout <= 0:
        raise UsageError(f"--timeout must be positive, not {ranks.timeout:g}")
    if ranks.port is not None and not 0 < ranks.port < 65536:
        raise UsageError(f"--port must be a port number (1..65535), not {ranks.port}")
    if ranks.max_restarts < 0:
        raise UsageError(f"--max-restarts must be 0 or more, not {ranks.max_restarts}")


def _rank_argv(checked: Plan, ranks: RankOptions, rank_argv: list[str]) -> list[str]:
    """What every rank runs: ``murmur run`` with ``rank_argv`` in the distributed runtime."""
    return [
        "run",
        *rank_argv,
        "--runtime=distributed",
        f"--agents-per-rank={checked.agents_per_rank}",
        f"--timeout={ranks.timeout:g}",
        *(() if ranks.progress else ("--quiet",)),
    ]


def check_resumable_launch(
    run_dir: Path, nproc: int | None, agents_per_rank: int = 1
) -> tuple[Plan, int]:
    """The plan of the stopped distributed run in ``run_dir`` and the iteration it
    resumes from, every rank's checkpoints read and checked; UsageError, in one line,
    otherwise. Nothing is written."""
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir} is not a run folder; give the folder of a stopped run")
    refuse_if_locked(run_dir)  # before the checkpoints another job may be writing
    config_file = run_dir / "config.toml"
    if not config_file.is_file():
        raise UsageError(f"{run_dir} has no config.toml: it is not a run folder")
    config = load_experiment(str(config_file)).runs[0][1]
    check_capabilities(ALGORITHMS[config.algorithm.name], config, "distributed")
    check_same_run(run_dir, config)
    world = None
    if nproc is not None or agents_per_rank > 1:
        world = config.topology.agents // agents_per_rank if nproc is None else nproc
    checked = plan(
        config, "distributed", world=world, world_name="--nproc", agents_per_rank=agents_per_rank
    )
    _prepare_here(checked)
    check_agents_per_rank(run_dir, config, agents_per_rank)
    saving = 1 if checked.kind == "server" else checked.processes  # only the server saves
    return checked, check_resumable_ranks(run_dir, saving, config)


def check_restarts(checked: Plan, max_restarts: int) -> None:
    """UsageError when restarted ranks could not continue: only those of the algorithms
    the distributed runtime checkpoints can."""
    name = checked.config.algorithm.name
    if max_restarts > 0 and "distributed" not in ALGORITHMS[name].capabilities.checkpoints:
        raise UsageError(
            f"--max-restarts restarts runs of {distributed_checkpointed_names()} only, "
            f"not {name}; drop it"
        )


def single_run(experiment: Experiment) -> tuple[str, Config]:
    """The one run of ``experiment``; the distributed runtime runs no comparisons yet."""
    if experiment.seeded and len(experiment.runs) > 1:
        raise UsageError(
            f"run.seeds makes {len(experiment.runs)} runs of preset {experiment.name}; the "
            "distributed runtime runs one at a time: run each seed as its own launch "
            "(--set run.seed=N), or use murmur run"
        )
    if len(experiment.runs) != 1:
        raise UsageError(
            f"preset {experiment.name} compares {len(experiment.runs)} runs; the distributed "
            "runtime runs one at a time: launch each member preset on its own"
        )
    return experiment.runs[0]


def default_run_dir(name: str) -> Path:
    return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def check_port_free(address: str, port: int) -> None:
    """UsageError if ``address:port`` cannot be listened on."""
    try:
        with socket.create_server((address, port)):
            pass
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise UsageError(
                f"port {port} on {address} is in use; choose another with --port"
            ) from None
        raise UsageError(f"cannot listen on {address}:{port}: {error.strerror or error}") from None
