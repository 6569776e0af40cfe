"""murmur's BEER against the update of the BEER authors' own code, on the same data.

The reference is the update of the authors' NumPy experiments (liboyue/beer,
``experiments/BEER.py``), written out below in a plain loop over stacked agents:

    x <- x + gamma (W - I) h - eta v
    h <- h + C(x - h)
    v <- v + gamma (W - I) g + grad(x_new; batch t+1) - grad(x_old; batch t)
    g <- g + C(v - g)

started as theirs is: v at the first gradient, h and g at zero, and once more with h
at the initial model, as murmur's ``beer`` starts it (every agent knows that model).
murmur takes the same steps in one exchange a step. Both run on the same config:
murmur's data split, its mini-batches (the same sampler, seeded alike), its initial
weights, its Metropolis weights W, its consensus step gamma ("auto") and its
compressor with the agents' own streams; so what differs is the update and its
start. For each split (one digit per agent, i.i.d.) and compressor (top-k 1 %, qsgd
with 16 levels) the table gives the final mean and worst agent's test accuracy of
both and their difference, for the reference from each start. With a compressor that
draws (qsgd), h = 0 makes the agents' first estimates of one common model differ,
and gamma (W - I) h then moves the models apart; from the initial model it does not.
One torch thread, one process.

    python benchmarks/beer_reference.py            # about 12 minutes on 2 cores
    python benchmarks/beer_reference.py --quick    # smoke run: 30 iterations, seconds
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import reference_table
import torch

from murmur.algorithms.beer import Beer
from murmur.config import Config

SPLITS = {"one digit per agent": [], "i.i.d.": ["data.partition=iid"]}
COMPRESSORS = {
    "topk 1 %": ["algorithm.compress=topk", "algorithm.fraction=0.01"],
    "qsgd 16 levels": ["algorithm.compress=qsgd", "algorithm.levels=16"],
}


def reference(config: Config, h_at_model: bool = False) -> tuple[float, float]:
    """The authors' update on ``config``'s data, batches, initial weights, W, gamma and
    compressor, h starting at zero (theirs) or at the initial model: the final mean
    and worst agent's test accuracy."""
    run = reference_table.ReferenceRun(config, Beer)
    gossip, step, x = run.algorithm.gossip, run.algorithm.gradient_step, run.x
    h = x.clone() if h_at_model else torch.zeros_like(x)
    g = torch.zeros_like(x)
    last = run.gradient()
    v = last.clone()
    for iteration in range(config.run.iterations):
        x += gossip.gamma * (run.difference @ h) - step(iteration) * v
        h += run.compress(x - h, 2 * iteration)
        new = run.gradient()
        v += gossip.gamma * (run.difference @ g) + new - last
        last = new
        g += run.compress(v - g, 2 * iteration + 1)
    return run.accuracy()


def main(argv: Sequence[str] | None = None) -> int:
    starts = [("h = 0", False), ("h = x0", True)]

    def make(iterations: int | None) -> list[str]:
        grid = (SPLITS, COMPRESSORS)
        return reference_table.table("beer", grid, reference, starts, iterations)

    return reference_table.main(__doc__.splitlines()[0], make, argv)


if __name__ == "__main__":
    sys.exit(main())
