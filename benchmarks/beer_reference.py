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
from murmur.algorithms.estimates import Segments, compressed_update, message_draws
from murmur.config import Config
from murmur.topology import metropolis_weights
from murmur.training.plan import plan
from murmur.training.setup import RoundsSetup, prepare
from murmur.training.sgd_loop import BatchRows

SPLITS = {"one digit per agent": [], "i.i.d.": ["data.partition=iid"]}
COMPRESSORS = {
    "topk 1 %": ["algorithm.compress=topk", "algorithm.fraction=0.01"],
    "qsgd 16 levels": ["algorithm.compress=qsgd", "algorithm.levels=16"],
}


def reference(config: Config, h_at_model: bool = False) -> tuple[float, float]:
    """The authors' update on ``config``'s data, batches, initial weights, W, gamma and
    compressor, h starting at zero (theirs) or at the initial model: the final mean
    and worst agent's test accuracy."""
    setup = prepare(plan(config))
    if not isinstance(setup, RoundsSetup) or not isinstance(setup.algorithm, Beer):
        raise SystemExit("the reference runs a beer config")
    problem, gossip = setup.problem, setup.algorithm.gossip
    difference = torch.as_tensor(metropolis_weights(setup.graph), dtype=torch.float32)
    difference -= torch.eye(setup.graph.agents)
    step = setup.algorithm.gradient_step
    x = setup.initial.clone()
    agents, size = x.shape
    whole = Segments.whole(size)
    everyone = torch.ones(agents, 1, dtype=torch.bool)
    block = list(range(agents))

    def compress(values: torch.Tensor, message: int) -> torch.Tensor:
        draws = message_draws(config.run.seed, block, message, values.device)
        return compressed_update(gossip.compressor, values, everyone, whole, draws).delta

    rows = BatchRows(problem.x_train, problem.y_train)

    def gradient() -> torch.Tensor:
        return problem.model.loss_and_grad(x, *rows.take(problem.sampler.next()))[1].clone()

    h = x.clone() if h_at_model else torch.zeros_like(x)
    g = torch.zeros_like(x)
    last = gradient()
    v = last.clone()
    for iteration in range(config.run.iterations):
        x += gossip.gamma * (difference @ h) - step(iteration) * v
        h += compress(x - h, 2 * iteration)
        new = gradient()
        v += gossip.gamma * (difference @ g) + new - last
        last = new
        g += compress(v - g, 2 * iteration + 1)
    accuracy, _ = problem.model.evaluate(x, problem.x_test, problem.y_test)
    return float(accuracy.mean()), float(accuracy.min())


def main(argv: Sequence[str] | None = None) -> int:
    starts = [("h = 0", False), ("h = x0", True)]

    def make(iterations: int | None) -> list[str]:
        grid = (SPLITS, COMPRESSORS)
        return reference_table.table("beer", grid, reference, starts, iterations)

    return reference_table.main(__doc__.splitlines()[0], make, argv)


if __name__ == "__main__":
    sys.exit(main())
