"""Top-k selection: murmur's ``largest`` (numpy's introselect, with lowest-index ties)
against ``torch.topk`` on the same magnitudes, in this process.

The magnitudes are ``--rows`` rows (agents) of ``--n`` entries (default 10 x 79,510,
the parameters of the 784-100-10 MLP), drawn from a standard normal; for each kept
fraction (default 1 %, 5 %, 20 %) both selections run ``--repeats`` rounds in turn of
``--calls`` calls each, and each one's time is its fastest round. One torch thread.
A row gives k, the milliseconds per call of each, their ratio (``topk / largest``:
above 1, ``largest`` is faster) and the noise (the largest spread of one method's
rounds, as a fraction of its fastest).

    python benchmarks/topk_selection.py            # seconds
    python benchmarks/topk_selection.py --fractions 0.05 --rows 100
    python benchmarks/topk_selection.py --quick    # smoke run
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable

import torch

from murmur.algorithms.compressors import largest


def seconds_per_call(select: Callable[[], object], calls: int) -> float:
    """The seconds per call of one round of ``calls`` calls of ``select``."""
    start = time.perf_counter()
    for _ in range(calls):
        select()
    return (time.perf_counter() - start) / calls


def row(magnitudes: torch.Tensor, k: int, repeats: int, calls: int) -> str:
    """The table row of one k."""
    assert torch.equal(
        magnitudes.gather(1, largest(magnitudes, k)).sort(dim=1).values,
        magnitudes.topk(k, dim=1).values.sort(dim=1).values,
    )
    mine: list[float] = []
    theirs: list[float] = []
    for _ in range(repeats):  # taken in turn, so that the machine's load falls on both
        mine.append(seconds_per_call(lambda: largest(magnitudes, k), calls))
        theirs.append(seconds_per_call(lambda: magnitudes.topk(k, dim=1, sorted=False), calls))
    noise = max((max(t) - min(t)) / min(t) for t in (mine, theirs))
    fastest, reference = min(mine), min(theirs)
    return (
        f"{k:>8} {1e3 * fastest:>12.3f} {1e3 * reference:>10.3f} "
        f"{reference / fastest:>12.2f} {100 * noise:>6.0f}%"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10)
    parser.add_argument("--n", type=int, default=79_510)
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.01, 0.05, 0.2])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="smoke run: 3 x 2000, two rounds")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.n, args.repeats, args.calls = 3, 2000, 2, 2
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    magnitudes = torch.randn(args.rows, args.n, generator=generator).abs()
    print(f"{args.rows} x {args.n} float32 magnitudes, one torch thread")
    print(f"{'k':>8} {'largest ms':>12} {'topk ms':>10} {'topk/largest':>12} {'noise':>7}")
    for fraction in args.fractions:
        k = math.ceil(fraction * args.n)
        print(row(magnitudes, k, args.repeats, args.calls))


if __name__ == "__main__":
    main()
