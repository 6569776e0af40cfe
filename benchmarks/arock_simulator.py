"""Asynchronous dSSFN (ARock) in the simulator: updates made one at a time against
updates made many at a time, both as a ratio to centralized SSFN on the same data.

For each dataset, in one process and one torch thread: ``ssfn-DATA`` (centralized
SSFN), then ``dssfn-async-DATA`` with ``SimulatedNetwork.batched`` off (each update's
numbers made when it begins) and on (made together with every other update begun,
when something first needs one of them). Both asynchronous runs must give the same
events, accuracy and virtual seconds; the script says so, or stops.

    python benchmarks/arock_simulator.py --layers 2            # minutes on 2 cores
    python benchmarks/arock_simulator.py --datasets vowel      # the whole preset
    python benchmarks/arock_simulator.py --quick               # smoke run
"""

from __future__ import annotations

import argparse
import time

import torch

from murmur import load_experiment, run
from murmur.algorithms import arock
from murmur.sim.layer_network import SimulatedNetwork

DATASETS = ("vowel", "satimage", "mnist5k", "letter")


def timed(preset: str, settings: list[str], batched: bool) -> tuple[float, dict, list[int]]:
    """Wall seconds of one run, its summary, and the size of every batch it made."""
    SimulatedNetwork.batched = batched
    sizes: list[int] = []
    made = arock.relax

    def recorded(updates: list) -> None:
        sizes.append(len(updates))
        made(updates)

    arock.relax = recorded  # type: ignore[assignment]
    try:
        ((_, config),) = load_experiment(preset, settings).runs
        started = time.perf_counter()
        summary = dict(run(config).to_dict())
        return time.perf_counter() - started, summary, sizes
    finally:
        arock.relax = made  # type: ignore[assignment]
        SimulatedNetwork.batched = True


def same(one: dict, other: dict) -> bool:
    keys = ("events", "messages", "bytes", "accuracy", "virtual_seconds")
    return all(one.get(key) == other.get(key) for key in keys)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))
    parser.add_argument("--layers", type=int, help="cut every preset to this many layers")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: vowel, 1 layer, 6 nodes, tolerance 1e-3"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.quick:
        args.datasets, args.layers = ["vowel"], 1
    settings = [f"algorithm.layers={args.layers}"] if args.layers else []
    if args.quick:
        settings += ["algorithm.tolerance=1e-3", "topology.agents=6"]
    print(
        "dataset    ssfn s  one-at-a-time s  batched s  /ssfn before  /ssfn after  speed-up  batch"
    )
    for name in args.datasets:
        central, _, _ = timed(f"ssfn-{name}", settings, True)
        alone, first, _ = timed(f"dssfn-async-{name}", settings, False)
        together, second, sizes = timed(f"dssfn-async-{name}", settings, True)
        if not same(first, second):
            raise SystemExit(f"{name}: the batched run differs from the one-at-a-time run")
        batch = sum(sizes) / len(sizes)
        print(
            f"{name:<9} {central:>7.1f}  {alone:>15.1f}  {together:>9.1f}  {alone / central:>12.1f}"
            f"  {together / central:>11.1f}  {alone / together:>8.2f}  {batch:>5.1f}"
        )


if __name__ == "__main__":
    main()
