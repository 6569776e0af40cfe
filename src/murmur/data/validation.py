"""A validation split held out of a training set (``data.validation``).

The validation split is for choosing (steps, iterations, any setting), so that the
test set stays for reporting. ``data.validation = f`` holds out
``round(f x n)`` of the ``n`` training rows (at least one, and one left), before the
rest is split among the agents (:mod:`murmur.data.partition`), so no agent trains on
a validation row.

The split is stratified by class: the held-out rows are shared among the classes in
proportion to their sizes (each class its whole part of ``f x n``, the rows left over
going to the classes of largest remainder, among those that keep a training row
first, then the lowest class), so every class large enough is in both splits. Each
class's rows are drawn from its shuffle; a regression set's from one shuffle of all
rows. The shuffles come from the stream ``"validation"`` of ``data.validation_seed``,
never from ``run.seed``: every seed of an experiment holds out the same rows.

Features are used as the dataset's loader prepared them: a bundled tabular set, or a
file with ``data.standardize``, was z-scored with the whole training split's mean
and deviation, the validation rows included (no label is read for that).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from murmur.data.datasets import Dataset
from murmur.errors import UsageError
from murmur.seeding import generator

STREAM = "validation"
"""The stream of ``data.validation_seed`` the held-out rows are drawn from."""


def validation_size(samples: int, fraction: float) -> int:
    """Rows ``fraction`` holds out of ``samples`` training rows: ``round(fraction x
    samples)``, at least 1 and at most ``samples - 1`` (0 for ``fraction = 0``);
    UsageError when there are too few rows to hold one out."""
    if fraction == 0:
        return 0
    if samples < 2:
        raise UsageError(
            f"data.validation = {fraction:g} holds out training rows, but the training set "
            f"has {samples}; it needs at least 2 (set data.validation = 0)"
        )
    return min(max(round(fraction * samples), 1), samples - 1)


def validation_rows(
    labels: torch.Tensor | None, samples: int, fraction: float, seed: int
) -> torch.Tensor:
    """The sorted int64 indices of the training rows ``fraction`` holds out, drawn from
    stream ``"validation"`` of ``seed``: by class where ``labels`` (int64 class indices)
    are given, from all ``samples`` rows for a regression set (``labels`` None)."""
    total = validation_size(samples, fraction)
    stream = generator(seed, STREAM)
    if labels is None or total == 0:
        return torch.randperm(samples, generator=stream)[:total].sort().values
    classes = int(labels.max()) + 1
    counts = torch.bincount(labels.cpu(), minlength=classes).tolist()
    quotas = _class_quotas(counts, total, fraction)
    held = []
    for cls, quota in enumerate(quotas):
        members = torch.nonzero(labels.cpu() == cls).flatten()
        order = torch.randperm(members.numel(), generator=stream)
        held.append(members[order[:quota]])
    return torch.cat(held).sort().values


def _class_quotas(counts: list[int], total: int, fraction: float) -> list[int]:
    """Rows each class gives to ``total`` held out, in proportion to its ``counts``: the
    whole part of its share, then one more to the classes of largest remainder (those
    that keep a training row first, the lowest class on ties); UsageError where a class
    would give all its rows."""
    samples = sum(counts)
    shares = [total * count / samples for count in counts]
    quotas = [math.floor(share) for share in shares]

    def priority(cls: int) -> tuple[bool, float, int]:
        keeps_one = quotas[cls] + 1 < counts[cls]
        return (not keeps_one, -(shares[cls] - quotas[cls]), cls)

    for cls in sorted(range(len(counts)), key=priority)[: total - sum(quotas)]:
        quotas[cls] += 1
    for cls, (quota, count) in enumerate(zip(quotas, counts, strict=True)):
        if count > 0 and quota >= count:
            raise UsageError(
                f"data.validation = {fraction:g} would hold out all {count} training rows of "
                f"class {cls}, leaving the agents none; lower data.validation"
            )
    return quotas


def hold_out(dataset: Dataset, fraction: float, seed: int) -> Dataset:
    """``dataset`` with ``fraction`` of its training rows moved to its validation split
    (:func:`validation_rows`), the training rows left in their order with their writers
    (``groups``); ``dataset`` itself for ``fraction = 0``."""
    if fraction == 0:
        return dataset
    samples = dataset.y_train.shape[0]
    labels = dataset.y_train if dataset.task == "classification" else None
    held = validation_rows(labels, samples, fraction, seed)
    kept = torch.ones(samples, dtype=torch.bool)
    kept[held] = False
    return dataclasses.replace(
        dataset,
        x_train=dataset.x_train[kept],
        y_train=dataset.y_train[kept],
        x_validation=dataset.x_train[held],
        y_validation=dataset.y_train[held],
        groups=dataset.groups[kept] if dataset.groups is not None else None,
    )
