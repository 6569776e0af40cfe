"""Real time to a target loss of AsySG-con against sync-ps, one process per rank.

A parameter server on rank 0 and W workers (``--workers``, default 3) on ranks
1..W, each a real process forked by this script (torch is imported once) and
joined on loopback gloo, exactly as ``murmur run PRESET --runtime distributed``
runs them (``run_distributed``) with one torch thread per rank
(``run.threads=1``). The presets ``asysg-con`` (the server applies each
gradient as it arrives and answers at once) and ``sync-ps`` (the server waits
for all W gradients of the current model and applies their mean) are run with
the overrides of ``--set`` (default: mnist5k, MLP 784-100-10, batch 32,
evaluation every 10 updates, at most 5000 updates) and
``algorithm.target_loss`` = ``--target`` (default 0.3): the server stops at the
first evaluation whose training loss is at or below it. Three rows:

- ``asysg-con`` at its preset step ``a`` (0.05);
- ``sync-ps`` at the same ``a``;
- ``sync-ps`` at W x ``a``: sync-ps applies the mean of W gradients per update,
  so at the same ``a`` each gradient moves the model W times less than under
  asysg-con, which applies every gradient alone; W x ``a`` makes the progress
  per gradient equal (W times fewer, less noisy updates).

Each in two conditions: all workers equal, and worker rank 1 slowed by sleeping
``--delay`` seconds (default 0.02) before each of its gradients (in
``BatchSampler.next_for``, in that rank only); the other ranks are untouched.

The table gives, for the fastest of ``--rounds`` rounds (by seconds to target):
the updates the server made to reach the target (``its_to_target``); the real
seconds from the start of training to the evaluation that reached it
(``s_to_target``, the server's clock, evaluations included); ``train_s``, the
server's whole training time (up to stopping the workers); the mean test
accuracy after training; the largest staleness of an applied gradient (updates
between the version a worker read and the one the gradient was applied to; 0
for sync-ps); the gradients each worker pushed (``pushes``, worker 1 first);
the spread between rounds of ``s_to_target`` (``noise``: slowest / fastest -
1) and ``job_s``, how long the whole job took here (forking, data,
rendezvous). A run that stops at the update cap without reaching the target
prints ``-`` for ``its_to_target``, ``s_to_target`` and ``noise``, and the
script says so below the table. The last lines give, per condition, the ratio
of each sync-ps row's seconds to target to asysg-con's: above 1, asysg-con is
faster.

These are real seconds on this machine, with W + 1 processes sharing its cores
(2 here): the server's evaluations and every worker's gradients take turns on
the cores, so they say how the two servers fare on a small machine, not on W + 1
machines. Every rank waits at most ``--timeout`` seconds for a peer and every
job has a deadline (``--limit``); a job that fails or overruns is killed, and
the script exits non-zero.

    python benchmarks/distributed_server.py               # about 1 minute on 2 cores
    python benchmarks/distributed_server.py --rounds 3 --delay 0.05
    python benchmarks/distributed_server.py --workers 4 --target 0.25
    python benchmarks/distributed_server.py --quick       # smoke run, seconds
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from forked_ranks import add_job_options, run_ranks

from murmur.config import Config, load_experiment
from murmur.data.batches import BatchSampler
from murmur.errors import UsageError

SLOW_RANK = 1
"""The rank of the worker slowed by ``--delay``."""
DEFAULT_SET = [
    "data.dataset=mnist5k",
    "model.hidden=[100]",
    "data.batch_size=32",
    "run.iterations=5000",
    "run.eval_every=10",
]
QUICK_SET = [
    "data.dataset=blobs",
    "model.hidden=[16]",
    "data.batch_size=16",
    "run.iterations=300",
    "run.eval_every=5",
]


@dataclass(frozen=True)
class Row:
    algorithm: str
    """The preset, which names the algorithm."""
    step_factor: int
    """``a`` is asysg-con's ``a`` times this."""


@dataclass(frozen=True)
class Job:
    algorithm: str
    config: Config
    delay: float
    """Seconds worker rank 1 sleeps before each gradient (0: all workers equal)."""


@dataclass
class Measurement:
    iterations_to_target: int | None
    seconds_to_target: float | None
    train_seconds: float
    accuracy: float
    max_staleness: int
    pushes: list[int]
    job_seconds: float


def rows_for(workers: int) -> list[Row]:
    return [Row("asysg-con", 1), Row("sync-ps", 1), Row("sync-ps", workers)]


def base_config(preset: str, args: argparse.Namespace) -> Config:
    overrides = [
        f"algorithm.workers={args.workers}",
        f"algorithm.target_loss={args.target}",
        "run.threads=1",
        *args.overrides,
    ]
    return load_experiment(preset, overrides).runs[0][1]


def configs_for(args: argparse.Namespace) -> dict[Row, Config]:
    """Each row's config; every ``a`` is asysg-con's (after ``--set``) times the row's factor."""
    step = base_config("asysg-con", args).algorithm.a
    return {
        row: base_config(row.algorithm, args).replace(
            **{"algorithm.a": repr(step * row.step_factor)}
        )
        for row in rows_for(args.workers)
    }


def sleeping(next_for: Callable[..., Any], delay: float) -> Callable[..., Any]:
    """``BatchSampler.next_for``, after sleeping ``delay`` s."""

    def slowed(self: BatchSampler, agent: int) -> Any:
        time.sleep(delay)
        return next_for(self, agent)

    return slowed


def slow_worker(rank: int, delay: float) -> None:
    """The per-rank hook: worker rank 1 sleeps ``delay`` s before each of its gradients."""
    if rank == SLOW_RANK and delay > 0:
        BatchSampler.next_for = sleeping(BatchSampler.next_for, delay)


def run_job(job: Job, run_dir: Path, args: argparse.Namespace) -> Measurement:
    """Fork the server and the workers of ``job``; SystemExit once a rank fails or
    ``args.limit`` seconds pass. Every rank is gone when this returns."""
    world = job.config.algorithm.workers + 1
    finished = run_ranks(
        job.config,
        world,
        run_dir,
        timeout=args.timeout,
        limit=args.limit,
        label=f"{job.algorithm}, a {job.config.algorithm.a:g}, delay {job.delay:g} s",
        before=partial(slow_worker, delay=job.delay),
    )
    summary = finished.summary
    return Measurement(
        iterations_to_target=summary["iterations_to_target"],
        seconds_to_target=summary["wall_seconds_to_target"],
        train_seconds=summary["train_seconds"],
        accuracy=summary["accuracy"]["mean"],
        max_staleness=summary["staleness"]["max"],
        pushes=summary["events_per_agent"],
        job_seconds=finished.job_seconds,
    )


def fastest(rounds: list[Measurement]) -> Measurement:
    """The round that reached the target soonest; the fastest to train if none did."""
    reached = [m for m in rounds if m.seconds_to_target is not None]
    if reached:
        return min(reached, key=lambda m: m.seconds_to_target)
    return min(rounds, key=lambda m: m.train_seconds)


HEADER = (
    ("algorithm", 9),
    ("a", 6),
    ("delay_s", 7),
    ("its_to_target", 13),
    ("s_to_target", 11),
    ("train_s", 8),
    ("accuracy_%", 10),
    ("max_stale", 9),
    ("pushes", 17),
    ("noise", 6),
    ("job_s", 6),
)


def format_row(job: Job, rounds: list[Measurement]) -> str:
    best = fastest(rounds)
    seconds = [m.seconds_to_target for m in rounds]
    noise = "-"
    if all(s is not None for s in seconds):
        noise = f"{max(seconds) / min(seconds) - 1.0:.0%}"
    reached = best.seconds_to_target is not None
    cells = (
        job.algorithm,
        f"{job.config.algorithm.a:g}",
        f"{job.delay:g}",
        str(best.iterations_to_target) if reached else "-",
        f"{best.seconds_to_target:.2f}" if reached else "-",
        f"{best.train_seconds:.2f}",
        f"{100 * best.accuracy:.2f}",
        str(best.max_staleness),
        "/".join(str(p) for p in best.pushes),
        noise,
        f"{best.job_seconds:.1f}",
    )
    return " ".join(cell.rjust(width) for cell, (_, width) in zip(cells, HEADER, strict=True))


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=3, help="worker ranks (W)")
    parser.add_argument(
        "--delay",
        type=float,
        default=0.02,
        help="seconds the slow worker (rank 1) sleeps before each gradient",
    )
    parser.add_argument("--target", type=float, default=0.3, help="target training loss")
    add_job_options(parser, DEFAULT_SET)
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: blobs to loss 0.05, seconds"
    )
    args = parser.parse_args(argv)
    args.overrides = [*(QUICK_SET if args.quick else DEFAULT_SET), *args.set]
    if args.quick:
        args.delay, args.target, args.rounds, args.limit = 0.002, 0.05, 1, 60.0
    if args.workers < 2 or args.rounds < 1 or args.delay <= 0 or args.target <= 0:
        parser.error("--workers must be at least 2; --rounds, --delay and --target positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        configs = configs_for(args)
    except UsageError as error:
        print(f"distributed_server: error: {error}", file=sys.stderr)
        return 2
    print(
        f"AsySG-con against sync-ps, a server and {args.workers} workers "
        f"({args.workers + 1} ranks, gloo on loopback, {multiprocessing.cpu_count()} cores); "
        f"target training loss {args.target:g}; overrides: {' '.join(args.overrides)}; "
        f"fastest of {args.rounds} round(s); real seconds",
        flush=True,
    )
    print(" ".join(name.rjust(width) for name, width in HEADER), flush=True)
    best: dict[tuple[Row, float], Measurement] = {}
    missed = []
    with tempfile.TemporaryDirectory(prefix="murmur-distributed-server-") as scratch:
        for delay in (0.0, args.delay):
            for index, (row, config) in enumerate(configs.items()):
                job = Job(row.algorithm, config, delay)
                rounds = [
                    run_job(job, Path(scratch) / f"{index}-{delay:g}-{round_}", args)
                    for round_ in range(args.rounds)
                ]
                best[row, delay] = fastest(rounds)
                if best[row, delay].seconds_to_target is None:
                    missed.append(f"{row.algorithm} a={config.algorithm.a:g} delay {delay:g} s")
                print(format_row(job, rounds), flush=True)
    if missed:
        cap = next(iter(configs.values())).run.iterations
        print(f"did not reach training loss {args.target:g} in {cap} updates: {'; '.join(missed)}")
    asysg, *syncs = rows_for(args.workers)
    for delay in (0.0, args.delay):
        condition = "all workers equal" if delay == 0 else f"worker rank 1 delay {delay:g} s"
        for row in syncs:
            numerator = best[row, delay].seconds_to_target
            denominator = best[asysg, delay].seconds_to_target
            ratio = (
                "-"
                if numerator is None or denominator is None
                else f"{numerator / denominator:.2f}"
            )
            a = configs[row].algorithm.a
            print(f"sync-ps a={a:g} / asysg-con s_to_target, {condition}: {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
