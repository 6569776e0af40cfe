"""The runs behind a paper's claims: planned, estimated, then run one after another.

A paper module lists its runs as :class:`PlannedRun` (a preset and ``--set``
overrides, as ``murmur run`` takes them); :func:`execute` checks every config
before the first starts, prints how long the whole will take, trains them with a
progress bar over the runs and writes each run's folder under ``OUT/runs/``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from murmur.algorithms.ssfn import LayerwiseConfig
from murmur.config import Config, load_experiment
from murmur.errors import UsageError
from murmur.experiment import run
from murmur.metrics.records import RunResult

SECONDS_PER_ITERATION = {
    "detsgrad": 6.0e-3,
    "dsgd": 6.0e-3,
    "centralized": 2.8e-3,
    "asysg-con": 1.3e-3,
    "asysg-incon": 2.0e-3,
    "hogwild": 1.0e-3,
}
"""Seconds per ``run.iteration`` on this project's 2-core machine (mnist5k, MLP
784-100-10, batch 32; 10 agents for the decentralized ones; Hogwild's counts its
single-process comparison too), measured; only the start-up estimate uses them."""

SECONDS_PER_LAYER = {"ssfn": 0.2, "dssfn": 6.0, "dssfn-async": 12.0}
"""Seconds per layer (layer 0 included) of a layer-wise run here with 20 nodes, 100
random nodes per layer and tolerance 1e-4, measured on the four datasets of
``murmur reproduce dssfn`` (asynchronous dSSFN with its updates batched: 2 to 12 s
a layer, mnist5k the slowest); the estimate scales them by the agents, the square of
the layer's width (the local products) and the digits of the tolerance (the
iterations it takes)."""

SECONDS_PER_RUN = 0.5
"""Set-up and evaluation of one run, on top of its iterations."""


@dataclass(frozen=True)
class Accuracy:
    """A classification run's final test accuracy over agents, as fractions."""

    mean: float
    min: float
    max: float
    per_agent: list[float]


def classification_accuracy(result: RunResult) -> Accuracy:
    """The final test accuracy of ``result``; a ValueError naming the run when it has
    none (a regression run), as the papers' claims compare classification runs."""
    accuracy = result.accuracy
    mean, low, high = accuracy["mean"], accuracy["min"], accuracy["max"]
    per_agent = accuracy["per_agent"]
    if mean is None or low is None or high is None or per_agent is None:
        raise ValueError(
            f"run {result.name} has no test accuracy (a regression run?); "
            "its claims compare the accuracy of classification runs"
        )
    return Accuracy(mean=mean, min=low, max=high, per_agent=per_agent)


@dataclass(frozen=True)
class PlannedRun:
    """One run: ``preset`` with ``overrides``, written to ``OUT/runs/label``."""

    label: str
    preset: str
    overrides: tuple[str, ...] = ()


def resolve(planned: PlannedRun, portable: bool = False) -> Config:
    """The run's checked config (UsageError if the preset is a comparison), with
    ``run.portable = true`` where ``portable``."""
    overrides = (*planned.overrides, *(["run.portable=true"] if portable else []))
    experiment = load_experiment(planned.preset, overrides)
    if len(experiment.runs) != 1:
        raise UsageError(f"{planned.label}: preset {planned.preset} holds several runs")
    return experiment.runs[0][1]


def estimate_seconds(configs: Sequence[Config]) -> float:
    """At most about how long the runs take here (runs that stop at a target loss
    take less)."""
    total = 0.0
    for config in configs:
        algorithm = config.algorithm
        if algorithm.name in SECONDS_PER_LAYER:
            if not isinstance(algorithm, LayerwiseConfig):
                raise TypeError(f"{algorithm.name}'s config is not a layer-wise one")
            layers = algorithm.layers + 1
            size = config.topology.agents / 20 * ((algorithm.nodes + 20) / 120) ** 2
            digits = -math.log10(algorithm.tolerance) / 4 if algorithm.tolerance > 0 else 1.0
            per_layer = SECONDS_PER_LAYER[algorithm.name] * size * max(digits, 0.25)
            total += SECONDS_PER_RUN + per_layer * layers
            continue
        per_iteration = SECONDS_PER_ITERATION.get(algorithm.name, 5e-3)
        total += SECONDS_PER_RUN + per_iteration * config.run.iterations
    return total


def execute(
    plan: Sequence[PlannedRun], out: Path, progress: bool, *, portable: bool = False
) -> dict[str, RunResult]:
    """Train every planned run (all checked first; in portable mode where ``portable``,
    :mod:`murmur.portable`); results by label."""
    labels = [planned.label for planned in plan]
    if len(set(labels)) != len(labels):
        raise ValueError(f"run labels must be unique: {labels}")
    configs = [resolve(planned, portable) for planned in plan]
    if progress:
        minutes = estimate_seconds(configs) / 60
        print(f"{len(plan)} runs, estimated at most {minutes:.1f} min on 2 cores", file=sys.stderr)
    results: dict[str, RunResult] = {}
    bar = tqdm(
        list(zip(plan, configs, strict=True)),
        disable=None if progress else True,  # a bar only on a terminal
        unit="run",
        dynamic_ncols=True,
    )
    for planned, config in bar:
        bar.set_postfix_str(planned.label)
        results[planned.label] = run(
            config, out / "runs" / planned.label, name=planned.label, preset=planned.preset
        )
    bar.close()
    return results
