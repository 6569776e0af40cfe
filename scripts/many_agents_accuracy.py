"""Accuracy with many agents: DSGD with 100 and 10,000 agents, over the graph.

DSGD (the ``many-agents`` preset's set-up: letter, i.i.d. split, the 16-10-26 MLP,
32 samples per agent and step, ``algorithm.a = 0.2``) for ``--iterations`` steps,
so that every agent sees the same number of samples, with

- 100 agents on the one-peer exponential topology (160 samples per agent),
- 10,000 agents on the one-peer exponential topology (1 or 2 samples per agent),
- 10,000 agents on a ring,

over ``--seeds``, printing at each evaluation the mean +- sd across seeds of the
agents' mean accuracy, of the average model's accuracy and of the consensus distance
(1/N) sum_i ||x_i - x_bar||^2. A run that diverges is shown as such from the
evaluation where it did.

    python scripts/many_agents_accuracy.py                 # seeds 0-2, about 10 minutes
    python scripts/many_agents_accuracy.py --seeds 0 --iterations 300
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
from pathlib import Path

import torch

from murmur import run
from murmur.config import Config, build_config
from murmur.errors import RunFailed

RUNS = (
    ("100 agents, one-peer", 100, {"graph": "exponential", "varying": "one_peer"}),
    ("10,000 agents, one-peer", 10_000, {"graph": "exponential", "varying": "one_peer"}),
    ("10,000 agents, ring", 10_000, {"graph": "ring"}),
)


def config(agents: int, topology: dict[str, object], seed: int, iterations: int) -> Config:
    return build_config(
        {
            "algorithm": {"name": "dsgd", "a": 0.2},
            "data": {"dataset": "letter", "partition": "iid", "batch_size": 32},
            "model": {"name": "mlp", "hidden": [10]},
            "topology": {"agents": agents, **topology},
            "run": {"seed": seed, "iterations": iterations, "eval_every": iterations // 6},
        }
    )


def curve(agents: int, topology: dict[str, object], seed: int, iterations: int) -> list[tuple]:
    """(iteration, accuracy mean, average model accuracy, consensus distance) per
    evaluation; None from a divergence on."""
    with tempfile.TemporaryDirectory() as folder:
        try:
            run(config(agents, topology, seed, iterations), Path(folder) / "run")
        except RunFailed:
            pass  # the records up to the divergence are in the folder
        lines = (Path(folder) / "run" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    every = iterations // 6
    points = []
    for index in range(7):
        record = records[index] if index < len(records) else None
        if record is None or not math.isfinite(record["consensus_distance"]):
            points.append((index * every, None, None, None))
            continue
        points.append(
            (
                record["iteration"],
                100 * record["accuracy_mean"],
                100 * record["model_accuracy"],
                record["consensus_distance"],
            )
        )
    return points


def spread(values: list[float | None], digits: str = ".2f") -> str:
    if any(value is None for value in values):
        return "diverged"
    numbers = [float(value) for value in values if value is not None]
    sd = statistics.stdev(numbers) if len(numbers) > 1 else 0.0
    return f"{statistics.mean(numbers):{digits}} +- {sd:{digits}}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--iterations", type=int, default=600)
    parser.add_argument("--only", type=int, nargs="+", help="the runs (1, 2, 3) to make")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"DSGD on letter, a = 0.2, {args.iterations} iterations, seeds {args.seeds}")
    print("| run | iteration | mean acc % | average model % | consensus distance |")
    print("|---|---:|---:|---:|---:|")
    for number, (label, agents, topology) in enumerate(RUNS, start=1):
        if args.only and number not in args.only:
            continue
        curves = [curve(agents, topology, seed, args.iterations) for seed in args.seeds]
        for index in range(1, 7):
            column = [points[index] for points in curves]
            iteration = column[0][0]
            print(
                f"| {label} | {iteration} | {spread([p[1] for p in column])} | "
                f"{spread([p[2] for p in column])} | {spread([p[3] for p in column], '.3g')} |"
            )


if __name__ == "__main__":
    main()
