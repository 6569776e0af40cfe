"""``murmur launch``: torchrun on this machine, bound to loopback, every input checked first."""

from __future__ import annotations

import errno
import logging
import os
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from murmur.config import Config, Experiment, load_experiment
from murmur.distributed.checkpoints import check_agents_per_rank, check_resumable_ranks
from murmur.distributed.mailbox import (
    first_line,
)
from murmur.distributed.runtime import check_same_run, check_world, loopback_interface
from murmur.distributed.transport import DEFAULT_TIMEOUT
from murmur.errors import UsageError
from murmur.registry import (
    ALGORITHMS,
    check_checkpoints,
    check_compile,
    check_faults,
    check_runtime,
    checkpointed_distributed,
    distributed_checkpointed_names,
)
from murmur.training.runs import check_run, check_run_dir
from murmur.training.setup import check_device

LOOPBACK = "127.0.0.1"
DEFAULT_PORT = 29500


def launch(
    nproc: int | None,
    source: str | None,
    overrides: Sequence[str],
    out: str | None,
    *,
    port: int = DEFAULT_PORT,
    timeout: float = DEFAULT_TIMEOUT,
    progress: bool = True,
    max_restarts: int = 0,
    resume: str | None = None,
    agents_per_rank: int = 1,
) -> int:
    """Start ``nproc`` ranks of ``source`` on this machine with torchrun, bound to loopback.

    Everything that can be wrong with the input is checked first; returns 0,
    or the exit status of the first rank that failed. ``max_restarts``: how many
    times torchrun restarts every rank after one fails; the restarted ranks
    continue from their checkpoints (:mod:`murmur.distributed.checkpoints`).
    ``resume``: the folder of a stopped run to continue, with its own config
    (``source``, ``overrides`` and ``out`` are then None or empty).
    ``agents_per_rank``: each rank holds a block of that many agents.
    """
    if nproc is not None and nproc < 1:
        raise UsageError(f"--nproc must be at least 1, not {nproc}")
    if agents_per_rank < 1:
        raise UsageError(f"--agents-per-rank must be at least 1, not {agents_per_rank}")
    if timeout <= 0:
        raise UsageError(f"--timeout must be positive, not {timeout:g}")
    if not 0 < port < 65536:
        raise UsageError(f"--port must be a port number (1..65535), not {port}")
    if max_restarts < 0:
        raise UsageError(f"--max-restarts must be 0 or more, not {max_restarts}")
    if resume is not None:
        config, done = check_resumable_launch(Path(resume), nproc, agents_per_rank)
        if progress:
            unit = _STEP.get(ALGORITHMS[config.algorithm.name].kind, "iteration")
            print(f"resuming {resume} from {unit} {done}", file=sys.stderr)
        rank_argv = ["--resume", resume]
    else:
        if nproc is None or source is None:
            raise UsageError("murmur launch needs --nproc and a preset (or --resume DIR)")
        experiment = load_experiment(source, overrides)
        _, config = single_run(experiment)
        check_runtime(config.algorithm.name, "distributed")
        check_faults(config.algorithm.name, config.faults, "distributed", config.topology.varying)
        check_checkpoints(config.algorithm.name, config.run, "distributed")
        check_compile(config.algorithm.name, config.run, "distributed")
        check_device(config, "distributed")
        check_world(config, nproc, what="--nproc", agents_per_rank=agents_per_rank)
        check_run(config)
        root = Path(out) if out else default_run_dir(experiment.name)
        check_run_dir(root)
        rank_argv = [source, f"--out={root}", *(f"--set={item}" for item in overrides)]
    check_restarts(config, max_restarts)
    check_port_free(LOOPBACK, port)
    world = ALGORITHMS[config.algorithm.name].processes(config.algorithm, config.topology.agents)
    world //= agents_per_rank
    torchrun_argv = [
        "--nnodes=1",
        f"--nproc-per-node={world}",
        f"--master-addr={LOOPBACK}",
        f"--master-port={port}",
        f"--max-restarts={max_restarts}",
        "-m",
        "murmur",
        "run",
        *rank_argv,
        "--runtime=distributed",
        f"--agents-per-rank={agents_per_rank}",
        f"--timeout={timeout:g}",
        *(() if progress else ("--quiet",)),
    ]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    interface = loopback_interface()
    if interface is not None:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", interface)
    return _torchrun(torchrun_argv)


_STEP = {"layerwise": "layer", "server": "update"}
"""What a checkpoint's number counts, by the kind of algorithm (iterations otherwise)."""


def check_resumable_launch(
    run_dir: Path, nproc: int | None, agents_per_rank: int = 1
) -> tuple[Config, int]:
    """The config of the stopped distributed run in ``run_dir`` and the iteration it
    resumes from, every rank's checkpoints read and checked; UsageError, in one line,
    otherwise. Nothing is written."""
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir} is not a run folder; give the folder of a stopped run")
    config_file = run_dir / "config.toml"
    if not config_file.is_file():
        raise UsageError(f"{run_dir} has no config.toml: it is not a run folder")
    config = load_experiment(str(config_file)).runs[0][1]
    check_runtime(config.algorithm.name, "distributed")
    check_checkpoints(config.algorithm.name, config.run, "distributed")
    check_device(config, "distributed")
    check_same_run(run_dir, config)
    if nproc is not None or agents_per_rank > 1:
        check_world(
            config,
            config.topology.agents // agents_per_rank if nproc is None else nproc,
            what="--nproc",
            agents_per_rank=agents_per_rank,
        )
    world = ALGORITHMS[config.algorithm.name].processes(config.algorithm, config.topology.agents)
    world //= agents_per_rank
    check_run(config)
    check_agents_per_rank(run_dir, config, agents_per_rank)
    if ALGORITHMS[config.algorithm.name].kind == "server":
        world = 1  # only the server saves
    return config, check_resumable_ranks(run_dir, world, config)


def check_restarts(config: Config, max_restarts: int) -> None:
    """UsageError when restarted ranks could not continue: only those of the algorithms
    the distributed runtime checkpoints can."""
    name = config.algorithm.name
    if max_restarts > 0 and not checkpointed_distributed(name):
        raise UsageError(
            f"--max-restarts restarts runs of {distributed_checkpointed_names()} only, "
            f"not {name}; drop it"
        )


def _torchrun(argv: list[str]) -> int:
    """``torchrun ARGV`` in this process; a failed rank's exit status instead of a traceback.

    The ranks print their own one-line errors; torchrun's agent would add its
    log lines and a traceback of its own, so its loggers are quietened.
    """
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser
    from torch.distributed.run import run as torchrun

    for name in list(logging.root.manager.loggerDict):
        if name.startswith("torch.distributed"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        torchrun(get_args_parser().parse_args(argv))
    except ChildFailedError as failure:
        _, first = failure.get_first_failure()
        return first.exitcode if first.exitcode > 0 else 1
    except SignalException as stopped:
        return 128 + int(stopped.sigval)
    except RuntimeError as error:  # its rendezvous store could not start
        raise UsageError(f"torchrun could not start the ranks: {first_line(error)}") from None
    return 0


def single_run(experiment: Experiment) -> tuple[str, Config]:
    """The one run of ``experiment``; the distributed runtime runs no comparisons yet."""
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
