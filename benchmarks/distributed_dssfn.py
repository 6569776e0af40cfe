"""Real training time of synchronous against asynchronous dSSFN, one process per node.

For N ranks (``--agents``, default 4) on a ring, each a real process forked by
this script (torch is imported once) and joined on loopback gloo, exactly as
``murmur run PRESET --runtime distributed`` runs them (``run_distributed``)
with one torch thread per rank (``run.threads=1``), two presets are run:

- ``sync``: ``dssfn-vowel``, consensus ADMM in lockstep (``admm_iterations``
  per layer, ``gossip_rounds`` gossip rounds in each);
- ``async``: ``dssfn-async-vowel``, ARock: each node makes at least
  ``admm_iterations`` updates per layer and never waits for a round; a layer
  ends for a node once it and its neighbours have made that many.

Both with the overrides ``--set`` (default: 3 layers after layer 0, 100 random
nodes per layer; a fixed 100 ADMM iterations of 10 gossip rounds for sync, 300
updates for async), and
each in two conditions: all ranks equal, and rank 0 slowed by sleeping
``--delay`` seconds before each of its local updates: before each call of
``consensus_prox`` (once per ADMM iteration) for sync, before each
``ArockNode.update`` for async; the other ranks are untouched. Layer 0 counts
too. The slow rank therefore sleeps per layer ``admm_iterations`` x delay, or
more: at least 3 times as long for async (300 or more updates) as for sync
(100 iterations).

The table gives, for the fastest of ``--rounds`` rounds: ``train_s``, the real
training time in the run's summary (the slowest rank's, as rank 0 writes it,
evaluation of each layer included, start-up and the final gathering left
out); the mean test accuracy over the nodes; the messages of all ranks;
``rank0_updates``, the local updates rank 0 made (its calls of the patched
function, all layers together, counted in both conditions); the spread between
rounds (``noise``: slowest / fastest - 1) and ``job_s``, how long the whole job
took here (forking, data, rendezvous, gathering). The last lines give the ratio
sync/async of ``train_s`` per condition: above 1, async is faster.

These are real seconds on this machine: with more ranks than cores the N
processes take turns on the cores, so they say how the two solvers share a
small machine, not how a network of N machines would fare (for that, see the
virtual times of ``murmur reproduce dssfn``).

Every rank waits at most ``--timeout`` seconds for a peer and every job has a
deadline (``--limit``); a job that fails or overruns is killed, and the script
exits non-zero.

    python benchmarks/distributed_dssfn.py               # about 1 minute on 2 cores
    python benchmarks/distributed_dssfn.py --delay 0.02 --rounds 3
    python benchmarks/distributed_dssfn.py --agents 6 --set algorithm.nodes=200
    python benchmarks/distributed_dssfn.py --quick       # smoke run, seconds
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

from forked_ranks import FORK, add_job_options, run_ranks

import murmur.algorithms.dssfn as dssfn
from murmur.algorithms.arock import ArockNode
from murmur.config import Config, load_experiment
from murmur.errors import UsageError

SOLVERS = (("sync", "dssfn-vowel"), ("async", "dssfn-async-vowel"))
"""(label, preset) of each solver, in the table's order."""
FIXED_WORK = {
    "dssfn-vowel": [
        "algorithm.tolerance=0",
        "algorithm.gossip_rounds=10",
        "algorithm.admm_iterations=100",
    ],
    "dssfn-async-vowel": ["algorithm.tolerance=0", "algorithm.admm_iterations=300"],
}
"""A fixed amount of work per layer (no stopping on a tolerance), so that the slow rank's
sleeps add up to a known time: 100 ADMM iterations of 10 gossip rounds, 300 updates."""
DEFAULT_SET = ["algorithm.layers=3", "algorithm.nodes=100"]
QUICK_SET = [
    "algorithm.layers=1",
    "algorithm.nodes=20",
    "algorithm.admm_iterations=10",
]


@dataclass(frozen=True)
class Job:
    solver: str
    config: Config
    delay: float
    """Seconds rank 0 sleeps before each local update (0: all ranks equal)."""


@dataclass
class Measurement:
    train_seconds: float
    accuracy: float
    messages: int
    rank0_updates: int
    """Local updates rank 0 made, all layers together (ADMM iterations for sync)."""
    job_seconds: float


def config_for(preset: str, agents: int, extra: list[str]) -> Config:
    fixed = FIXED_WORK[preset]
    overrides = [
        f"topology.agents={agents}",
        "topology.graph=ring",
        "run.threads=1",
        *fixed,
        *extra,
    ]
    return load_experiment(preset, overrides).runs[0][1]


def counted(call: Callable[..., Any], delay: float, calls: Any) -> Callable[..., Any]:
    """``call``, after sleeping ``delay`` s (if positive); counts its calls in ``calls``."""

    def slowed(*args: Any, **kwargs: Any) -> Any:
        calls.value += 1
        if delay > 0:
            time.sleep(delay)
        return call(*args, **kwargs)

    return slowed


def slow_down(solver: str, delay: float, calls: Any) -> None:
    """Count this process's local updates in ``calls``, each ``delay`` s late.
    ``consensus_prox`` is imported by name into ``murmur.algorithms.dssfn``, so
    that name is patched."""
    if solver == "sync":
        dssfn.consensus_prox = counted(dssfn.consensus_prox, delay, calls)
    else:
        ArockNode.update = counted(ArockNode.update, delay, calls)


def slow_rank0(rank: int, job: Job, calls: Any) -> None:
    """The per-rank hook: rank 0 counts its updates in ``calls``, slowed by ``job.delay``."""
    if rank == 0:
        slow_down(job.solver, job.delay, calls)


def run_job(job: Job, run_dir: Path, args: argparse.Namespace) -> Measurement:
    """Fork the ranks of ``job``; rank 0's summary, or SystemExit once a rank fails or
    ``args.limit`` seconds pass. Every rank is gone when this returns."""
    world = job.config.topology.agents
    calls = FORK.Value("q", 0)
    finished = run_ranks(
        job.config,
        world,
        run_dir,
        timeout=args.timeout,
        limit=args.limit,
        label=f"{job.solver}, delay {job.delay:g} s, {world} ranks",
        before=partial(slow_rank0, job=job, calls=calls),
    )
    summary = finished.summary
    return Measurement(
        train_seconds=summary["train_seconds"],
        accuracy=summary["accuracy"]["mean"],
        messages=summary["messages"],
        rank0_updates=calls.value,
        job_seconds=finished.job_seconds,
    )


HEADER = (
    ("algorithm", 9),
    ("delay_s", 7),
    ("train_s", 8),
    ("accuracy_%", 10),
    ("messages", 9),
    ("rank0_updates", 13),
    ("noise", 6),
    ("job_s", 6),
)


def format_row(solver: str, delay: float, rounds: list[Measurement]) -> str:
    best = min(rounds, key=lambda m: m.train_seconds)
    noise = max(m.train_seconds for m in rounds) / best.train_seconds - 1.0
    cells = (
        solver,
        f"{delay:g}",
        f"{best.train_seconds:.2f}",
        f"{100 * best.accuracy:.2f}",
        str(best.messages),
        str(best.rank0_updates),
        f"{noise:.0%}",
        f"{best.job_seconds:.1f}",
    )
    return " ".join(cell.rjust(width) for cell, (_, width) in zip(cells, HEADER, strict=True))


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=4, help="ranks, one node each, on a ring")
    parser.add_argument(
        "--delay", type=float, default=0.005, help="seconds rank 0 sleeps before each update"
    )
    add_job_options(parser, DEFAULT_SET)
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 small layer, seconds")
    args = parser.parse_args(argv)
    args.overrides = [*(QUICK_SET if args.quick else DEFAULT_SET), *args.set]
    if args.quick:
        args.delay, args.rounds, args.limit = 0.001, 1, 60.0
    if args.agents < 3 or args.rounds < 1 or args.delay <= 0:
        parser.error("--agents must be at least 3 (a ring); --rounds and --delay positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        configs = {
            solver: config_for(preset, args.agents, args.overrides) for solver, preset in SOLVERS
        }
    except UsageError as error:
        print(f"distributed_dssfn: error: {error}", file=sys.stderr)
        return 2
    print(
        f"dSSFN on vowel, {args.agents} ranks on a ring (gloo on loopback, "
        f"{multiprocessing.cpu_count()} cores); overrides: {' '.join(args.overrides)}; "
        f"fastest of {args.rounds} round(s); real seconds",
        flush=True,
    )
    print(" ".join(name.rjust(width) for name, width in HEADER), flush=True)
    train_seconds: dict[tuple[str, float], float] = {}
    with tempfile.TemporaryDirectory(prefix="murmur-distributed-dssfn-") as scratch:
        for delay in (0.0, args.delay):
            for solver, _ in SOLVERS:
                job = Job(solver, configs[solver], delay)
                rounds = [
                    run_job(job, Path(scratch) / f"{solver}-{delay:g}-{round_}", args)
                    for round_ in range(args.rounds)
                ]
                train_seconds[solver, delay] = min(m.train_seconds for m in rounds)
                print(format_row(solver, delay, rounds), flush=True)
    for delay in (0.0, args.delay):
        condition = "all ranks equal" if delay == 0 else f"rank 0 delay {delay:g} s"
        ratio = train_seconds["sync", delay] / train_seconds["async", delay]
        print(f"sync/async train_s, {condition}: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
