"""The simulator's per-edge transport (lost messages, varying graphs) against its
lossless ring, in time per iteration.

For each algorithm (DSGD and DETSGRAD by default), in one process and one torch
thread, the default experiment's model and data on ``--agents`` agents, three runs
of ``--iterations`` iterations each:

- ``ring``:     the lossless ring (``InMemoryTransport``, one shared value per agent);
- ``drop``:     the same ring with ``faults.drop`` = ``--drop``, one mailbox per
                directed edge (``LossyTransport``);
- ``matching``: one random matching of the ring per iteration
                (``topology.varying = "matching"``), on the per-edge transport too.

Runs are taken in turn, ``--repeats`` rounds, so that load from other processes hits
all of them alike; each run's time is its fastest round's ``train_seconds`` (the
simulator's own clock, evaluation excluded). The ratio is a run's time per iteration
over the ring's, in the same process.

    python benchmarks/lossy_transport.py                     # about a minute
    python benchmarks/lossy_transport.py --agents 64 --iterations 200
    python benchmarks/lossy_transport.py --quick             # smoke run, seconds
"""

from __future__ import annotations

import argparse

import torch

from murmur import load_experiment, run

RUNS = {
    "ring": [],
    "drop": ["faults.drop={drop}"],
    "matching": ["topology.varying=matching"],
}
"""Each run's settings on top of the algorithm's preset."""


def seconds(algorithm: str, settings: list[str], args: argparse.Namespace) -> float:
    """``train_seconds`` of one run of ``algorithm`` with ``settings``."""
    common = [
        f"topology.agents={args.agents}",
        "topology.graph=ring",
        f"run.iterations={args.iterations}",
        f"run.eval_every={args.iterations}",
        "run.threads=1",
        f"data.dataset={args.dataset}",
    ]
    ((_, config),) = load_experiment(algorithm, [*common, *settings]).runs
    return float(run(config).train_seconds)


def bench(algorithm: str, args: argparse.Namespace) -> dict[str, float]:
    """Milliseconds per iteration of each run, fastest of ``args.repeats`` rounds."""
    best: dict[str, float] = {}
    for _ in range(args.repeats):
        for name, settings in RUNS.items():
            filled = [item.format(drop=args.drop) for item in settings]
            taken = 1e3 * seconds(algorithm, filled, args) / args.iterations
            best[name] = min(best.get(name, taken), taken)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", nargs="+", default=["dsgd", "detsgrad"])
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--iterations", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--drop", type=float, default=0.1)
    parser.add_argument("--dataset", default="mnist5k")
    parser.add_argument("--quick", action="store_true", help="digits, 30 iterations, 1 round")
    args = parser.parse_args(argv)
    if args.quick:
        args.dataset, args.iterations, args.repeats, args.agents = "digits", 30, 1, 10
    torch.set_num_threads(1)
    print(
        f"{args.agents} agents, {args.dataset}, {args.iterations} iterations, "
        f"drop {args.drop}, fastest of {args.repeats} rounds"
    )
    print(f"{'algorithm':<10} {'run':<9} {'ms/iter':>8} {'vs ring':>8}")
    for algorithm in args.algorithms:
        best = bench(algorithm, args)
        for name, taken in best.items():
            print(f"{algorithm:<10} {name:<9} {taken:8.3f} {taken / best['ring']:8.2f}")


if __name__ == "__main__":
    main()
