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

from murmur.algorithms.estimates import Segments, compressed_update, message_draws
from murmur.algorithms.motef import Motef
from murmur.config import Config
from murmur.topology import metropolis_weights
from murmur.training.plan import plan
from murmur.training.setup import RoundsSetup, prepare
from murmur.training.sgd_loop import BatchRows

SPLITS = {"one digit per agent": [], "i.i.d.": ["data.partition=iid"]}
COMPRESSORS = {
    "topk 1 %": ["algorithm.fraction=0.01"],
    "topk 5 %": ["algorithm.fraction=0.05"],
}


def reference(config: Config, theirs: bool) -> tuple[float, float]:
    """The authors' update on ``config``'s data, batches, initial weights, W, gamma and
    compressor, from their code's start (``theirs``) or from murmur's: the final mean
    and worst agent's test accuracy."""
    setup = prepare(plan(config))
    if not isinstance(setup, RoundsSetup) or not isinstance(setup.algorithm, Motef):
        raise SystemExit("the reference runs a motef config")
    problem, algorithm = setup.problem, setup.algorithm
    gossip, lam, step = algorithm.gossip, algorithm.lam, algorithm.gradient_step
    difference = torch.as_tensor(metropolis_weights(setup.graph), dtype=torch.float32)
    difference -= torch.eye(setup.graph.agents)
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

    def full_gradient() -> torch.Tensor:
        """Each agent's gradient on all of its own samples (shards differ in size)."""
        rows_of = [
            problem.model.loss_and_grad(x, *rows.take(shard.expand(agents, -1)))[1][agent]
            for agent, shard in enumerate(setup.shards)
        ]
        return torch.stack(rows_of)

    if theirs:
        h, m, v = torch.zeros_like(x), torch.zeros_like(x), full_gradient()
    else:
        h, m = x.clone(), gradient()
        v = m.clone()
    g = torch.zeros_like(x)
    for iteration in range(config.run.iterations):
        x += gossip.gamma * (difference @ h) - step(iteration) * v
        h += compress(x - h, 2 * iteration)
        new = (1 - lam) * m + lam * gradient()
        v += gossip.gamma * (difference @ g) + new - m
        m = new
        g += compress(v - g, 2 * iteration + 1)
    accuracy, _ = problem.model.evaluate(x, problem.x_test, problem.y_test)
    return float(accuracy.mean()), float(accuracy.min())


def main(argv: Sequence[str] | None = None) -> int:
    starts = [("their start", True), ("murmur's start", False)]

    def make(iterations: int | None) -> list[str]:
        grid = (SPLITS, COMPRESSORS)
        return reference_table.table("motef", grid, reference, starts, iterations)

    return reference_table.main(__doc__.splitlines()[0], make, argv)


if __name__ == "__main__":
    sys.exit(main())
