"""Time per iteration of blocks of agents per rank against one simulator process.

N agents (``--agents``, default 64) of the ``dsgd`` and ``detsgrad`` presets
(mnist5k, MLP 784-100-10, 32 samples per agent and step, a ring), with an iid
partition, one torch thread per process and ``--iterations`` steps (default
100), are run

- ``sim``: every agent in this process, as ``murmur run`` runs them;
- ``RxK``: R ranks of K agents each (``--layouts``, default 4x16 and 2x32),
  forked from this script (torch is imported once) and joined by gloo on
  loopback, as ``murmur launch --nproc R --agents-per-rank K`` runs them.

Each row gives ``ms/iter``, the training seconds of the run's summary per
iteration (evaluations left out; for a distributed run the slowest rank's, its
waits for its neighbours included), its ratio to the simulator's
(``x sim``: above 1, slower), ``job_s`` (how long the whole run took here,
forking, data and rendezvous included), and ``same``: whether the events of
every agent, the messages, the bytes and every record's test accuracy and loss
equal the simulator's exactly, with ``max |dx|``, the largest difference
between the final parameters (0: the same bits). A run that differs makes the
script exit with status 1.

These are real seconds on this machine: with more ranks than cores, the ranks
take turns on the cores, so the figures say how blocks share a small machine,
not how R machines would fare.

    python benchmarks/distributed_blocks.py                   # about 1 minute on 2 cores
    python benchmarks/distributed_blocks.py --layouts 2x32 --iterations 200 --rounds 3
    python benchmarks/distributed_blocks.py --agents 256 --layouts 4x64 8x32
    python benchmarks/distributed_blocks.py --quick           # smoke run: 8 agents, seconds
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from forked_ranks import add_job_options, run_ranks

from murmur.config import Config, load_experiment
from murmur.errors import UsageError
from murmur.experiment import run

PRESETS = ("dsgd", "detsgrad")


@dataclass
class Measurement:
    ms_per_iteration: float
    job_seconds: float
    summary: dict
    records: list[dict]
    parameters: torch.Tensor


def config_for(preset: str, agents: int, iterations: int, extra: list[str]) -> Config:
    overrides = [
        f"topology.agents={agents}",
        "topology.graph=ring",
        "data.partition=iid",
        f"run.iterations={iterations}",
        f"run.eval_every={max(iterations // 2, 1)}",
        "run.threads=1",
        *extra,
    ]
    return load_experiment(preset, overrides).runs[0][1]


def read_records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def simulate(config: Config, folder: Path) -> Measurement:
    started = time.perf_counter()
    result = run(config, folder)
    job = time.perf_counter() - started
    summary = json.loads((folder / "summary.json").read_text())
    return Measurement(
        1000 * summary["train_seconds"] / config.run.iterations,
        job,
        summary,
        read_records(folder),
        result.parameters,
    )


def distribute(
    config: Config, ranks: int, block: int, folder: Path, args: argparse.Namespace
) -> Measurement:
    params = folder.with_suffix(".pt")
    finished = run_ranks(
        config,
        ranks,
        folder,
        timeout=args.timeout,
        limit=args.limit,
        label=f"{config.algorithm.name}, {ranks}x{block}",
        agents_per_rank=block,
        params=params,
    )
    summary = finished.summary
    return Measurement(
        1000 * summary["train_seconds"] / config.run.iterations,
        finished.job_seconds,
        summary,
        read_records(folder),
        torch.load(params),
    )


def compare(got: Measurement, want: Measurement) -> tuple[bool, float]:
    """Whether ``got`` counts and measures as ``want`` exactly; the largest parameter
    difference."""
    counts = ("events_per_agent", "messages", "bytes", "samples")
    same = all(got.summary[key] == want.summary[key] for key in counts)
    measured = ("iteration", "events", "messages", "bytes", "test_accuracy", "test_loss")
    same = same and len(got.records) == len(want.records)
    for mine, theirs in zip(got.records, want.records, strict=False):
        same = same and all(mine[key] == theirs[key] for key in measured)
    difference = float((got.parameters - want.parameters).abs().max())
    return same and difference == 0.0, difference


HEADER = (
    ("algorithm", 9),
    ("layout", 7),
    ("ms/iter", 8),
    ("x sim", 6),
    ("noise", 6),
    ("job_s", 6),
    ("same", 5),
    ("max |dx|", 9),
)


def row(cells: tuple[str, ...]) -> str:
    return " ".join(cell.rjust(width) for cell, (_, width) in zip(cells, HEADER, strict=True))


def layout(text: str) -> tuple[int, int]:
    ranks, _, block = text.partition("x")
    try:
        return int(ranks), int(block)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a layout is RANKSxAGENTS, e.g. 4x16, not {text}"
        ) from None


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=64, help="agents in all (default 64)")
    parser.add_argument(
        "--layouts",
        type=layout,
        nargs="+",
        default=[(4, 16), (2, 32)],
        metavar="RxK",
        help="R ranks of K agents each (R x K = --agents; default 4x16 2x32)",
    )
    parser.add_argument("--iterations", type=int, default=100, help="steps of each run")
    add_job_options(parser, [])
    parser.add_argument("--quick", action="store_true", help="smoke run: 8 agents, 2x4, seconds")
    args = parser.parse_args(argv)
    if args.quick:
        args.agents, args.layouts, args.iterations, args.rounds = 8, [(2, 4)], 10, 1
        args.limit = 60.0
    bad = [f"{r}x{k}" for r, k in args.layouts if r * k != args.agents or r < 1 or k < 1]
    if bad or args.iterations < 1 or args.rounds < 1:
        parser.error(
            f"each layout RxK needs R x K = --agents ({args.agents}), not {' '.join(bad)}; "
            "--iterations and --rounds at least 1"
            if bad
            else "--iterations and --rounds must be at least 1"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        configs = {
            preset: config_for(preset, args.agents, args.iterations, args.set) for preset in PRESETS
        }
    except UsageError as error:
        print(f"distributed_blocks: error: {error}", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    print(
        f"{args.agents} agents on a ring, mnist5k MLP 784-100-10, batch 32, "
        f"{args.iterations} iterations ({multiprocessing.cpu_count()} cores, gloo on "
        f"loopback, one torch thread per process); fastest of {args.rounds} round(s)",
        flush=True,
    )
    print(" ".join(name.rjust(width) for name, width in HEADER), flush=True)
    differs = False
    with tempfile.TemporaryDirectory(prefix="murmur-distributed-blocks-") as scratch:
        root = Path(scratch)
        for preset in PRESETS:
            config = configs[preset]
            jobs = [("sim", None)] + [(f"{r}x{k}", (r, k)) for r, k in args.layouts]
            simulated: Measurement | None = None
            for label, shape in jobs:
                rounds = []
                for round_ in range(args.rounds):
                    folder = root / f"{preset}-{label}-{round_}"
                    if shape is None:
                        rounds.append(simulate(config, folder))
                    else:
                        rounds.append(distribute(config, *shape, folder, args))
                best = min(rounds, key=lambda m: m.ms_per_iteration)
                noise = max(m.ms_per_iteration for m in rounds) / best.ms_per_iteration - 1.0
                if simulated is None:
                    simulated = best
                same, difference = compare(best, simulated)
                differs = differs or not all(compare(m, simulated)[0] for m in rounds)
                print(
                    row(
                        (
                            preset,
                            label,
                            f"{best.ms_per_iteration:.1f}",
                            f"{best.ms_per_iteration / simulated.ms_per_iteration:.2f}",
                            f"{noise:.0%}",
                            f"{best.job_seconds:.1f}",
                            "yes" if same else "NO",
                            f"{difference:.1e}" if difference else "0",
                        )
                    ),
                    flush=True,
                )
    if differs:
        print("distributed_blocks: a distributed run differs from the simulator's", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
