"""The table the reference benchmarks print: murmur's run of a preset beside the
update of the method's authors, for each split and compressor and each start of the
reference (beer_reference.py, motef_reference.py)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence

import torch

from murmur.algorithms.estimates import Segments, compressed_update, message_draws
from murmur.config import Config, load_experiment
from murmur.experiment import run
from murmur.topology import metropolis_weights
from murmur.training.plan import plan
from murmur.training.setup import RoundsSetup, prepare
from murmur.training.sgd_loop import BatchRows

Reference = Callable[[Config, bool], tuple[float, float]]
"""The authors' update on a config, from one of two starts: final mean and worst
agent's test accuracy."""


class ReferenceRun:
    """What an authors' update runs on: murmur's set-up of ``config`` (data split,
    mini-batches from the same sampler, initial weights, Metropolis W, gamma and the
    compressor with the agents' own streams), with the models ``x`` to step in place."""

    def __init__(self, config: Config, kind: type) -> None:
        setup = prepare(plan(config))
        if not isinstance(setup, RoundsSetup) or not isinstance(setup.algorithm, kind):
            raise SystemExit(f"the reference runs a {kind.__name__} config")
        self.config, self.setup, self.algorithm = config, setup, setup.algorithm
        self.problem = setup.problem
        mixing = torch.as_tensor(metropolis_weights(setup.graph), dtype=torch.float32)
        self.difference = mixing - torch.eye(setup.graph.agents)
        """W - I."""
        self.x = setup.initial.clone()
        self._rows = BatchRows(self.problem.x_train, self.problem.y_train)

    def compress(self, values: torch.Tensor, message: int) -> torch.Tensor:
        """What every holder adds for message number ``message`` of ``values``."""
        agents, size = values.shape
        draws = message_draws(self.config.run.seed, list(range(agents)), message, values.device)
        everyone = torch.ones(agents, 1, dtype=torch.bool)
        compressor = self.algorithm.gossip.compressor
        return compressed_update(compressor, values, everyone, Segments.whole(size), draws).delta

    def gradient(self) -> torch.Tensor:
        """Every agent's gradient at ``x`` on its next mini-batch."""
        batch = self._rows.take(self.problem.sampler.next())
        return self.problem.model.loss_and_grad(self.x, *batch)[1].clone()

    def full_gradient(self) -> torch.Tensor:
        """Each agent's gradient at ``x`` on all of its own samples."""
        agents, model = self.x.shape[0], self.problem.model
        rows_of = [
            model.loss_and_grad(self.x, *self._rows.take(shard.expand(agents, -1)))[1][agent]
            for agent, shard in enumerate(self.setup.shards)
        ]
        return torch.stack(rows_of)

    def accuracy(self) -> tuple[float, float]:
        """The final mean and worst agent's test accuracy of ``x``."""
        problem = self.problem
        accuracy, _ = problem.model.evaluate(self.x, problem.x_test, problem.y_test)
        return float(accuracy.mean()), float(accuracy.min())


def table(
    preset: str,
    grid: tuple[Mapping[str, list[str]], Mapping[str, list[str]]],
    reference: Reference,
    starts: Sequence[tuple[str, bool]],
    iterations: int | None,
) -> list[str]:
    """One row per split and compressor of ``grid`` (each a ``--set`` list by name):
    murmur's mean / worst accuracy, then, for each (label, flag) of ``starts``, the
    reference's and murmur's mean minus it."""
    heads = "".join(f" | reference, {label} | difference" for label, _ in starts)
    lines = [
        f"| split | compressor | murmur mean / worst %{heads} |",
        "|---|---|---" + "|---|---" * len(starts) + "|",
    ]
    splits, compressors = grid
    for split, split_sets in splits.items():
        for name, compressor_sets in compressors.items():
            sets = [*split_sets, *compressor_sets]
            if iterations is not None:
                sets += [f"run.iterations={iterations}", f"run.eval_every={iterations}"]
            ((_, config),) = load_experiment(preset, sets).runs
            ours = run(config).accuracy
            cells = [f"{100 * ours['mean']:.2f} / {100 * ours['min']:.2f}"]
            for _, flag in starts:
                mean, worst = reference(config, flag)
                cells += [
                    f"{100 * mean:.2f} / {100 * worst:.2f}",
                    f"{100 * (ours['mean'] - mean):+.2f}",
                ]
            lines.append(f"| {split} | {name} | " + " | ".join(cells) + " |")
            print(lines[-1], file=sys.stderr)
    return lines


def main(
    description: str, make: Callable[[int | None], list[str]], argv: Sequence[str] | None
) -> int:
    """Parse ``--quick`` (30 iterations), run on one torch thread and print the table
    ``make`` builds for that many iterations (None: the preset's)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="30 iterations: a smoke run")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print("\n".join(make(30 if args.quick else None)))
    return 0
