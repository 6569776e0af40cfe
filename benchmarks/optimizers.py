"""Local optimizers on the default experiment: DSGD and DETSGRAD with plain SGD,
momentum and Adam, over several seeds.

The default experiment (``murmur run default``: mnist5k, MLP 784-100-10, ring of
10 agents, one digit per agent, 3000 iterations of 32 samples) is run for its
``dsgd`` and ``detsgrad`` members with ``algorithm.optimizer`` set to each of:

- ``sgd``: the preset as it is (a = 0.2);
- ``momentum (a(1-mu))``: mu = 0.9 and a scaled by 1 - mu = 0.1 (a = 0.02), the
  same long-run step as plain SGD (a constant gradient moves x by a/(1 - mu) per step);
- ``momentum``: mu = 0.9 and the preset's a = 0.2, unscaled (``--unscaled``);
- ``adam``: beta1 = 0.9, beta2 = 0.999, with the step a chosen on seed 0 among
  ``--adam-steps`` by the mean of the two algorithms' final mean accuracies (or
  ``--adam-a`` to skip the choice).

Every other key (b, v0, d2, eps) is the preset's. Each setting runs ``--seeds``
seeds (run.seed = 0, 1, ...); the table gives the mean and standard deviation over
seeds of the final mean test accuracy over agents, of the worst agent's, and of the
messages and bytes sent. One torch thread; the runs are in this process, one after
another.

    python benchmarks/optimizers.py                # about 8 minutes on 2 cores
    python benchmarks/optimizers.py --seeds 5 --adam-a 0.001
    python benchmarks/optimizers.py --optimizers adam --adam-a 0.0001
    python benchmarks/optimizers.py --quick        # smoke run: 20 iterations, seconds
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass, field

import torch

from murmur.config import Config, load_experiment
from murmur.experiment import run

ALGORITHMS = ("dsgd", "detsgrad")
"""The default experiment's members that are run."""
MU = 0.9


@dataclass(frozen=True)
class Setting:
    """One optimizer and its step."""

    label: str
    settings: tuple[str, ...]
    """``--set`` items on top of the member's config."""


@dataclass
class Row:
    """A setting of one algorithm and what its seeds measured."""

    algorithm: str
    setting: Setting
    accuracy: list[float] = field(default_factory=list)
    worst: list[float] = field(default_factory=list)
    messages: list[float] = field(default_factory=list)
    bytes: list[float] = field(default_factory=list)


def members(overrides: list[str]) -> dict[str, Config]:
    """The default experiment's DSGD and DETSGRAD configs, with ``overrides``."""
    runs = dict(load_experiment("default", overrides).runs)
    return {name: runs[name] for name in ALGORITHMS}


def measure(config: Config, settings: tuple[str, ...], seed: int) -> tuple[float, float, int, int]:
    """Final mean and worst accuracy, messages and bytes of one run."""
    items = {key: value for key, value in (item.split("=", 1) for item in settings)}
    result = run(config.replace(**{**items, "run.seed": str(seed)}))
    accuracy = result.accuracy
    return float(accuracy["mean"]), float(accuracy["min"]), result.messages, result.bytes


def adam(step: float) -> Setting:
    return Setting(f"adam (a={step:g})", ("algorithm.optimizer=adam", f"algorithm.a={step:g}"))


def choose_adam_step(configs: dict[str, Config], steps: list[float]) -> float:
    """The Adam step of the highest mean accuracy of both algorithms, on seed 0."""
    scores = {}
    for step in steps:
        accuracies = [measure(config, adam(step).settings, 0)[0] for config in configs.values()]
        scores[step] = statistics.mean(accuracies)
        print(f"  adam a={step:g}: seed 0 mean accuracy {scores[step]:.4f}", flush=True)
    return max(scores, key=lambda step: scores[step])


def settings(configs: dict[str, Config], args: argparse.Namespace) -> list[Setting]:
    preset_a = configs["dsgd"].algorithm.a  # type: ignore[attr-defined]
    chosen = [
        Setting(f"sgd (a={preset_a:g})", ("algorithm.optimizer=sgd",)),
        Setting(
            f"momentum (a={preset_a * (1 - MU):g})",
            ("algorithm.optimizer=momentum", f"algorithm.beta1={MU}")
            + (f"algorithm.a={preset_a * (1 - MU):g}",),
        ),
    ]
    if args.unscaled:
        chosen.append(
            Setting(
                f"momentum (a={preset_a:g})",
                ("algorithm.optimizer=momentum", f"algorithm.beta1={MU}"),
            )
        )
    if "adam" in args.optimizers:
        step = (
            args.adam_a if args.adam_a is not None else choose_adam_step(configs, args.adam_steps)
        )
        chosen.append(adam(step))
    return [setting for setting in chosen if setting.label.split()[0] in args.optimizers]


def spread(values: list[float], scale: float = 1.0, digits: int = 3) -> str:
    mean = statistics.mean(values) / scale
    sd = statistics.stdev(values) / scale if len(values) > 1 else 0.0
    return f"{mean:.{digits}f} ± {sd:.{digits}f}"


def print_table(rows: list[Row], seeds: int) -> None:
    print(f"\nmean ± sd over {seeds} seed(s); accuracy: final test accuracy (mean over agents)")
    print("| algorithm | optimizer | accuracy | worst agent | messages | MB sent |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row.algorithm} | {row.setting.label} | {spread(row.accuracy)} | "
            f"{spread(row.worst)} | {spread(row.messages, digits=0)} | "
            f"{spread(row.bytes, scale=1e6, digits=1)} |"
        )


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds per setting")
    parser.add_argument(
        "--adam-steps", type=float, nargs="+", default=[3e-4, 1e-3, 3e-3], help="Adam's a to try"
    )
    parser.add_argument("--adam-a", type=float, default=None, help="Adam's a, not chosen")
    parser.add_argument("--unscaled", action="store_true", help="also momentum with the preset's a")
    parser.add_argument(
        "--optimizers",
        nargs="+",
        choices=["sgd", "momentum", "adam"],
        default=["sgd", "momentum", "adam"],
        help="the settings to run",
    )
    parser.add_argument("--set", action="append", default=[], help="more overrides, key=value")
    parser.add_argument("--quick", action="store_true", help="smoke run: 20 iterations, 1 seed")
    args = parser.parse_args(argv)
    args.overrides = list(args.set)
    if args.quick:
        args.seeds, args.adam_steps = 1, [1e-3, 3e-3]
        args.overrides += ["run.iterations=20", "run.eval_every=10"]
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    torch.set_num_threads(1)
    started = time.perf_counter()
    configs = members(args.overrides)
    rows = [Row(name, setting) for setting in settings(configs, args) for name in configs]
    for row in rows:
        for seed in range(args.seeds):
            accuracy, worst, messages, size = measure(
                configs[row.algorithm], row.setting.settings, seed
            )
            row.accuracy.append(accuracy)
            row.worst.append(worst)
            row.messages.append(messages)
            row.bytes.append(size)
        print(f"  {row.algorithm} {row.setting.label}: {spread(row.accuracy)}", flush=True)
    rows.sort(key=lambda row: ALGORITHMS.index(row.algorithm))
    print_table(rows, args.seeds)
    print(f"\n{time.perf_counter() - started:.0f} s, torch {torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
