"""The table the reference benchmarks print: murmur's run of a preset beside the
update of the method's authors, for each split and compressor and each start of the
reference (beer_reference.py, motef_reference.py)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence

import torch

from murmur.config import Config, load_experiment
from murmur.experiment import run

Reference = Callable[[Config, bool], tuple[float, float]]
"""The authors' update on a config, from one of two starts: final mean and worst
agent's test accuracy."""


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
