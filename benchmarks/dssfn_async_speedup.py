"""Virtual training time of synchronous against asynchronous decentralized SSFN.

For each graph (rings of 5, 10, 20 and 40 nodes; circular graphs of degree 2,
4 and 8 with 20 nodes) the synchronous preset (``dssfn-vowel``: 100 ADMM
iterations per layer, 10 gossip rounds each) is run once. The asynchronous
preset (``dssfn-async-vowel``) is then run with more and more updates per node
and layer (``--updates``) until its mean test accuracy is within ``--tolerance``
(1 point) of the synchronous one; the ratio of the two virtual times is the
speed-up. Both run on the same virtual clock (``[timing]`` defaults: 1e10
flop/s per node, 1 ms latency, 1 Gbit/s links), so the figures say what a
network of such machines would take, not how long this script runs.

    python benchmarks/dssfn_async_speedup.py            # several minutes on 2 cores
    python benchmarks/dssfn_async_speedup.py --layers 10 --set timing.latency=1e-4
    python benchmarks/dssfn_async_speedup.py --quick    # smoke run, seconds
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

import torch

from murmur.config import Config, load_experiment
from murmur.errors import UsageError
from murmur.experiment import run

GRAPHS = (
    ("ring", 5, 2),
    ("ring", 10, 2),
    ("ring", 20, 2),
    ("ring", 40, 2),
    ("circular", 20, 2),
    ("circular", 20, 4),
    ("circular", 20, 8),
)
"""(graph, nodes, degree) of every row."""


@dataclass
class Row:
    graph: str
    nodes: int
    degree: int
    sync_accuracy: float
    sync_seconds: float
    updates: int | None
    async_accuracy: float
    async_seconds: float
    wall_seconds: float

    @property
    def ratio(self) -> float | None:
        return self.sync_seconds / self.async_seconds if self.updates is not None else None


def config_for(preset: str, graph: str, nodes: int, degree: int, extra: list[str]) -> Config:
    overrides = [f"topology.graph={graph}", f"topology.agents={nodes}"]
    if graph == "circular":
        overrides.append(f"topology.degree={degree}")
    experiment = load_experiment(preset, overrides + extra)
    return experiment.runs[0][1]


def measure(
    graph: str, nodes: int, degree: int, updates: list[int], tolerance: float, extra: list[str]
) -> Row:
    started = time.perf_counter()
    sync = run(config_for("dssfn-vowel", graph, nodes, degree, extra))
    target = sync.accuracy["mean"] - tolerance
    found, last = None, None
    for count in updates:
        config = config_for(
            "dssfn-async-vowel",
            graph,
            nodes,
            degree,
            extra + [f"algorithm.admm_iterations={count}"],
        )
        last = run(config)
        if last.accuracy["mean"] >= target:
            found = count
            break
    assert last is not None
    return Row(
        graph=graph,
        nodes=nodes,
        degree=degree,
        sync_accuracy=sync.accuracy["mean"],
        sync_seconds=sync.extra["virtual_seconds"],
        updates=found,
        async_accuracy=last.accuracy["mean"],
        async_seconds=last.extra["virtual_seconds"],
        wall_seconds=time.perf_counter() - started,
    )


HEADER = (
    ("graph", 9),
    ("nodes", 5),
    ("degree", 6),
    ("sync acc %", 10),
    ("sync virtual s", 14),
    ("async updates", 13),
    ("async acc %", 11),
    ("async virtual s", 15),
    ("sync/async", 10),
    ("wall s", 7),
)


def format_row(row: Row) -> str:
    ratio = f"{row.ratio:.2f}" if row.ratio is not None else "not reached"
    updates = str(row.updates) if row.updates is not None else "-"
    cells = (
        row.graph,
        str(row.nodes),
        str(row.degree),
        f"{100 * row.sync_accuracy:.2f}",
        f"{row.sync_seconds:.2f}",
        updates,
        f"{100 * row.async_accuracy:.2f}",
        f"{row.async_seconds:.2f}",
        ratio,
        f"{row.wall_seconds:.0f}",
    )
    return "  ".join(cell.rjust(width) for cell, (_, width) in zip(cells, HEADER, strict=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=3, help="layers after layer 0 (default 3)")
    parser.add_argument("--nodes", type=int, default=500, help="random nodes per layer")
    parser.add_argument(
        "--updates",
        type=int,
        nargs="+",
        default=[100, 150, 200, 250, 300, 400, 600],
        help="asynchronous updates per node and layer to try, in order",
    )
    parser.add_argument("--tolerance", type=float, default=0.01, help="accuracy gap allowed")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="extra config override"
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: one small graph")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    graphs = GRAPHS
    extra = [f"algorithm.layers={args.layers}", f"algorithm.nodes={args.nodes}", *args.set]
    updates = args.updates
    if args.quick:
        graphs = (("ring", 4, 2),)
        extra = ["algorithm.layers=1", "algorithm.nodes=40", *args.set]
        updates = [20, 40]
    print(
        f"vowel, {args.layers if not args.quick else 1} layers; sync: dssfn-vowel preset, "
        f"async: dssfn-async-vowel with the first of {updates} updates per node and layer "
        f"within {100 * args.tolerance:g} point(s) of sync; times are virtual seconds"
    )
    print("  ".join(name.rjust(width) for name, width in HEADER))
    try:
        for graph, nodes, degree in graphs:
            print(format_row(measure(graph, nodes, degree, updates, args.tolerance, extra)))
            sys.stdout.flush()
    except UsageError as error:
        print(f"dssfn_async_speedup: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
