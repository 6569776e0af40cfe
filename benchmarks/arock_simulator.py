"""Asynchronous dSSFN (ARock) in the simulator: updates made one at a time against
updates made many at a time, both as a ratio to centralized SSFN on the same data.

For each dataset, in one process and one torch thread: ``ssfn-DATA`` (centralized
SSFN), then ``dssfn-async-DATA`` with ``SimulatedNetwork.batched`` off (each update's
numbers made when it begins) and on (made together with every other update begun,
when something first needs one of them). Both asynchronous runs must give the same
events, accuracy and virtual seconds; the script says so, or stops.

``products s`` is the time the batched run spent in the two products of each update
with its node's eigenbasis (``torch.bmm``, which runs near this machine's peak
floating-point rate): a floor that no reordering of the rest can go under.
``4x goal s`` is a quarter of the one-at-a-time run's time.

    python benchmarks/arock_simulator.py --layers 2            # minutes on 2 cores
    python benchmarks/arock_simulator.py --datasets vowel      # the whole preset
    python benchmarks/arock_simulator.py --quick               # smoke run
"""

from __future__ import annotations

import argparse
import time
from typing import Any, NamedTuple

import torch

from murmur import load_experiment, run
from murmur.algorithms import arock
from murmur.sim.layer_network import SimulatedNetwork

DATASETS = ("vowel", "satimage", "mnist5k", "letter")


class Timed(NamedTuple):
    """One run: wall seconds, summary, the size of every batch it made, and the seconds
    spent in the products with the nodes' eigenbases (``torch.bmm``)."""

    seconds: float
    summary: dict
    sizes: list[int]
    products: float


def timed(preset: str, settings: list[str], batched: bool) -> Timed:
    """Run ``preset`` with ``settings``, its updates one at a time or ``batched``."""
    SimulatedNetwork.batched = batched
    sizes: list[int] = []
    made, product = arock.relax, torch.bmm
    products = [0.0]

    def recorded(updates: list) -> None:
        sizes.append(len(updates))
        made(updates)

    def clocked(*args: Any, **kwargs: Any) -> torch.Tensor:
        started = time.perf_counter()
        try:
            return product(*args, **kwargs)
        finally:
            products[0] += time.perf_counter() - started

    arock.relax = recorded  # type: ignore[assignment]
    torch.bmm = clocked  # ARock's only bmm calls are its two basis products
    try:
        ((_, config),) = load_experiment(preset, settings).runs
        started = time.perf_counter()
        summary = dict(run(config).to_dict())
        return Timed(time.perf_counter() - started, summary, sizes, products[0])
    finally:
        arock.relax = made  # type: ignore[assignment]
        torch.bmm = product
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
        "  products s  4x goal s"
    )
    for name in args.datasets:
        central = timed(f"ssfn-{name}", settings, True).seconds
        alone = timed(f"dssfn-async-{name}", settings, False)
        together = timed(f"dssfn-async-{name}", settings, True)
        if not same(alone.summary, together.summary):
            raise SystemExit(f"{name}: the batched run differs from the one-at-a-time run")
        batch = sum(together.sizes) / len(together.sizes)
        before, after = alone.seconds, together.seconds
        print(
            f"{name:<9} {central:>7.1f}  {before:>15.1f}  {after:>9.1f}  {before / central:>12.1f}"
            f"  {after / central:>11.1f}  {before / after:>8.2f}  {batch:>5.1f}"
            f"  {together.products:>10.1f}  {before / 4:>9.1f}"
        )


if __name__ == "__main__":
    main()
