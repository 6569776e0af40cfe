"""Run one distributed job as ranks forked from a benchmark script.

Each rank is a process forked from the calling script (so torch is imported
once), given ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR=127.0.0.1`` and a free
``MASTER_PORT``, and runs ``run_distributed`` on gloo over loopback; rank 0
writes the run folder. A per-rank hook runs in each rank first (to patch a
function in one chosen rank, say). Each rank may hold a block of agents
(``agents_per_rank``), and rank 0 may save the run's final parameters. The job
has a deadline: once a rank fails or the deadline passes, every rank left is
killed and the script stops with SystemExit naming the job.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from murmur.config import Config
from murmur.distributed.runtime import run_distributed

LOOPBACK = "127.0.0.1"
FORK = multiprocessing.get_context("fork")
"""The context the ranks are forked in; make shared counters with it (``FORK.Value``)."""


@dataclass(frozen=True)
class FinishedJob:
    summary: dict[str, Any]
    """Rank 0's ``summary.json``."""
    job_seconds: float
    """From forking the first rank to reading the summary."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return probe.getsockname()[1]


def _rank_main(
    rank: int,
    world: int,
    port: int,
    config: Config,
    run_dir: Path,
    timeout: float,
    before: Callable[[int], None],
    agents_per_rank: int,
    params: Path | None,
) -> None:
    before(rank)
    environ = {
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "MASTER_ADDR": LOOPBACK,
        "MASTER_PORT": str(port),
    }
    result = run_distributed(
        config,
        run_dir if rank == 0 else None,
        environ=environ,
        timeout=timeout,
        agents_per_rank=agents_per_rank,
    )
    if params is not None and result.parameters is not None:
        torch.save(result.parameters, params)


def _no_setup(rank: int) -> None:
    """The default per-rank hook: nothing."""


def run_ranks(
    config: Config,
    world: int,
    run_dir: Path,
    *,
    timeout: float,
    limit: float,
    label: str,
    before: Callable[[int], None] = _no_setup,
    agents_per_rank: int = 1,
    params: Path | None = None,
) -> FinishedJob:
    """Fork ``world`` ranks of ``config``, each calling ``before(rank)`` first, holding
    ``agents_per_rank`` agents and waiting at most ``timeout`` s for a peer; rank 0 writes
    ``run_dir`` (and the final parameters to ``params``, if given). Rank 0's summary, or
    SystemExit (``label: why``) once a rank fails or ``limit`` seconds pass. Every rank is
    gone when this returns."""
    port = free_port()
    ranks = [
        FORK.Process(
            target=_rank_main,
            args=(rank, world, port, config, run_dir, timeout, before, agents_per_rank, params),
            daemon=True,
        )
        for rank in range(world)
    ]
    started = time.perf_counter()
    deadline = time.monotonic() + limit
    problem = None
    try:
        for process in ranks:
            process.start()
        while problem is None:
            codes = [process.exitcode for process in ranks]
            failed = [rank for rank, code in enumerate(codes) if code not in (None, 0)]
            if failed:
                problem = f"rank {failed[0]} exited with status {codes[failed[0]]}"
            elif all(code == 0 for code in codes):
                break
            elif time.monotonic() > deadline:
                problem = f"did not finish within {limit:g} s"
            else:
                time.sleep(0.05)
    finally:
        for process in ranks:
            if process.exitcode is None:
                process.kill()
            process.join()
    if problem is not None:
        raise SystemExit(f"{label}: {problem}")
    summary = json.loads((run_dir / "summary.json").read_text())
    return FinishedJob(summary=summary, job_seconds=time.perf_counter() - started)


def add_job_options(parser: argparse.ArgumentParser, default_set: list[str]) -> None:
    """The options every forked-ranks benchmark has: --rounds, --set, --timeout, --limit."""
    parser.add_argument(
        "--rounds", type=int, default=1, help="runs of each row; the fastest counts"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"config override for every run (default: {' '.join(default_set)})",
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per wait in a rank")
    parser.add_argument("--limit", type=float, default=300.0, help="seconds per job")
