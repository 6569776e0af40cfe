"""murmur's MoTEF against the update of the MoTEF authors' own code, on the same data.

The reference is the update of the authors' NumPy experiments (mlolab/MoTEF,
``MoTEF.py``, class ``BEER_Momentum``), written out below in a plain loop over
stacked agents:

    x <- x + gamma (W - I) h - eta v
    h <- h + C(x - h)
    m' <- (1 - lambda) m + lambda grad(x; batch t)
    v <- v + gamma (W - I) g + m' - m
    g <- g + C(v - g)

started twice: as their code starts it (h, g and m at zero, v at the full-batch
gradient of the initial model), and as murmur's ``motef`` does (h at the initial
model, m and v at the first stochastic gradient). murmur takes the same steps in one
exchange a step. Both run on the same config: murmur's data split, its mini-batches
(the same sampler, seeded alike), its initial weights, its Metropolis weights W, its
consensus step gamma ("auto") and its compressor with the agents' own streams; so
what differs is the update and its start. For each split (one digit per agent,
i.i.d.) and compressor (top-k 1 % and 5 %) the table gives the final mean and worst
agent's test accuracy of both and their difference. Bytes are not compared: both
send the same two compressed halves a step. One torch thread, one process.

    python benchmarks/motef_reference.py            # about 15 minutes on 2 cores
    python benchmarks/motef_reference.py --quick    # smoke run: 30 iterations, seconds
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import reference_table
import torch

from murmur.algorithms.motef import Motef
from murmur.config import Config

SPLITS = {"one digit per agent": [], "i.i.d.": ["data.partition=iid"]}
COMPRESSORS = {
    "topk 1 %": ["algorithm.fraction=0.01"],
    "topk 5 %": ["algorithm.fraction=0.05"],
}


def reference(config: Config, theirs: bool) -> tuple[float, float]:
    """The authors' update on ``config``'s data, batches, initial weights, W, gamma and
    compressor, from their code's start (``theirs``) or from murmur's: the final mean
    and worst agent's test accuracy."""
    run = reference_table.ReferenceRun(config, Motef)
    algorithm, x = run.algorithm, run.x
    gossip, lam, step = algorithm.gossip, algorithm.lam, algorithm.gradient_step
    if theirs:
        h, m, v = torch.zeros_like(x), torch.zeros_like(x), run.full_gradient()
    else:
        h, m = x.clone(), run.gradient()
        v = m.clone()
    g = torch.zeros_like(x)
    for iteration in range(config.run.iterations):
        x += gossip.gamma * (run.difference @ h) - step(iteration) * v
        h += run.compress(x - h, 2 * iteration)
        new = (1 - lam) * m + lam * run.gradient()
        v += gossip.gamma * (run.difference @ g) + new - m
        m = new
        g += run.compress(v - g, 2 * iteration + 1)
    return run.accuracy()


def main(argv: Sequence[str] | None = None) -> int:
    starts = [("their start", True), ("murmur's start", False)]

    def make(iterations: int | None) -> list[str]:
        grid = (SPLITS, COMPRESSORS)
        return reference_table.table("motef", grid, reference, starts, iterations)

    return reference_table.main(__doc__.splitlines()[0], make, argv)


if __name__ == "__main__":
    sys.exit(main())
