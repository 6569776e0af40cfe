"""One ARock node's update on the range of its Gram matrix against the full eigenbasis.

A node's Gram matrix G = Y^T Y has rank at most its samples. ``ArockNode`` keeps
only G's range and treats the rest of the space, where the update's curvature is
the same constant, in closed form; the baseline is the same node on G + eps I
(eps = 1e-9 x the largest eigenvalue, so no eigenvalue counts as 0), which keeps
the whole eigenbasis and reaches the same x to about eps. Two shard shapes of the
shipped presets (20 nodes, 500 random nodes): Vowel (26 samples, width 522) and
Satimage (222 samples, width 512), with the norm bound binding.

Both take ``--updates`` updates in ``--repeats`` rounds, in turn; a method's time
is that of its fastest round, and ``noise`` the largest spread between one
method's rounds (fastest / slowest - 1).

    python benchmarks/arock_update.py            # about 20 seconds on 2 cores
    python benchmarks/arock_update.py --quick    # smoke run
"""

from __future__ import annotations

import argparse
import time

import torch

from murmur.algorithms.arock import ArockNode, ArockRule
from murmur.algorithms.ssfn import Ball

SHARDS = {"vowel": (26, 522, 11), "satimage": (222, 512, 6)}
"""Samples, width and classes of one node's shard."""


def shard(samples: int, width: int, classes: int, seed: int):
    """G and C of ReLU features with unit-norm rows, and one-hot targets."""
    stream = torch.Generator().manual_seed(seed)
    features = torch.randn(samples, width, generator=stream, dtype=torch.float64).clamp_(min=0)
    features /= features.norm(dim=1, keepdim=True)
    labels = torch.randint(0, classes, (samples,), generator=stream)
    targets = torch.nn.functional.one_hot(labels, classes).to(torch.float64)
    return features.T @ features, targets.T @ features


def node(gram: torch.Tensor, cross: torch.Tensor, seed: int) -> ArockNode:
    classes, width = cross.shape
    made = ArockNode(0, gram, cross, [1, 2], Ball(radius=0.5), 20, ArockRule(2.0, 0.8, cap=10**9))
    stream = torch.Generator().manual_seed(seed)
    for j in made.inbox:
        made.inbox[j] = torch.randn(classes, width, generator=stream, dtype=torch.float64)
    return made


def seconds_per_update(made: ArockNode, updates: int) -> float:
    started = time.perf_counter()
    for _ in range(updates):
        made.update()
    return (time.perf_counter() - started) / updates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="smoke run: 5 updates, 1 round")
    args = parser.parse_args()
    if args.quick:
        args.updates, args.repeats = 5, 1
    torch.set_num_threads(args.threads)
    print("shard      rank  width  range ms  full ms  full/range  x diff   noise")
    for name, (samples, width, classes) in SHARDS.items():
        gram, cross = shard(samples, width, classes, seed=0)
        full_gram = gram + 1e-9 * float(torch.linalg.eigvalsh(gram)[-1]) * torch.eye(width)
        reduced, full = node(gram, cross, 1), node(full_gram, cross, 1)
        assert reduced.reduced and not full.reduced
        rounds: dict[str, list[float]] = {"range": [], "full": []}
        for _ in range(args.repeats):
            rounds["range"].append(seconds_per_update(reduced, args.updates))
            rounds["full"].append(seconds_per_update(full, args.updates))
        best = {key: min(values) for key, values in rounds.items()}
        noise = max(max(values) / min(values) - 1 for values in rounds.values())
        difference = float((reduced.solution - full.solution).norm() / full.solution.norm())
        print(
            f"{name:<9} {reduced.basis.shape[1]:>5}  {width:>5}  {1e3 * best['range']:>8.3f}"
            f"  {1e3 * best['full']:>7.3f}  {best['full'] / best['range']:>10.2f}"
            f"  {difference:.1e}  {noise:>5.2f}"
        )


if __name__ == "__main__":
    main()
