"""Hogwild! on this machine: samples per second of W processes against one.

The ``hogwild`` preset (mnist5k, MLP 784-100-10, batch 32) is trained with W
worker processes on one shared-memory model and with a single process, the
same number of steps in all, from the same initial model. Rounds alternate
(W, 1, W, 1, ...) so that load from other processes hits both alike; each
rate is that of its fastest round, timed from the workers' barrier to the last
worker's end (process start-up is not counted). ``noise`` is the spread
between a setting's rounds (fastest / slowest - 1): re-run when it is large.
The test accuracy after the same number of samples is printed for both (the
mean over rounds), to show that W processes learn no worse than one.

With W = 2 on 2 cores the ratio cannot exceed 2, and on a virtual machine it
may not reach it even for work that shares nothing: each round also times W
independent processes of pure arithmetic (64x64 matrix products, in cache)
against one, and the last line gives that ratio, what the machine allowed
while the benchmark ran.

    python benchmarks/hogwild_scaling.py                  # about a minute on 2 cores
    python benchmarks/hogwild_scaling.py --workers 4 --iterations 40000
    python benchmarks/hogwild_scaling.py --quick          # smoke run, seconds
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from dataclasses import dataclass, field

import torch

from murmur.config import Config, apply_overrides, build_config, read_preset
from murmur.procs.hogwild import START_METHOD, train_shared
from murmur.training.setup import Setup, prepare

PRESET = "hogwild"
"""The preset every run starts from (mnist5k, MLP 784-100-10, batch 32)."""


@dataclass
class Setting:
    """One number of workers and what its rounds measured."""

    workers: int
    rates: list[float] = field(default_factory=list)
    cpu_shares: list[float] = field(default_factory=list)
    """Of each round: the workers' CPU time / (workers x wall time); below 1 when other
    processes took turns on the cores."""
    accuracies: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    products: list[float] = field(default_factory=list)
    """Matrix products per second of each round's independent processes."""

    @property
    def rate(self) -> float:
        return max(self.rates)

    @property
    def noise(self) -> float:
        return max(self.rates) / min(self.rates) - 1.0

    @property
    def cpu_share(self) -> float:
        """CPU share of the fastest round."""
        return self.cpu_shares[self.rates.index(self.rate)]

    @property
    def rate_per_cpu(self) -> float:
        """Samples per CPU second of the fastest round, all workers together."""
        return self.rate / (self.workers * self.cpu_share)


def benchmark_config(workers: int, iterations: int) -> Config:
    _, raw = read_preset(PRESET)
    raw.pop("description", None)
    overrides = [
        f"algorithm.workers={workers}",
        f"run.iterations={iterations}",
        "run.threads=1",
        "model.name=mlp",
        "model.hidden=[100]",
        "data.dataset=mnist5k",
        "data.batch_size=32",
    ]
    return build_config(apply_overrides(raw, overrides))


def train_round(config: Config, setup: Setup, setting: Setting) -> None:
    problem = setup.problem
    trained = train_shared(
        problem,
        setup.initial,
        config.algorithm.gradient_step(),
        workers=setting.workers,
        iterations=config.run.iterations,
        seed=config.run.seed,
    )
    accuracy, loss = problem.model.evaluate(trained.params, problem.x_test, problem.y_test)
    setting.rates.append(trained.samples / trained.train_seconds)
    setting.cpu_shares.append(sum(trained.cpu_seconds) / (setting.workers * trained.train_seconds))
    setting.accuracies.append(float(accuracy[0]))
    setting.losses.append(float(loss[0]))


def _multiply(count: int, durations: multiprocessing.SimpleQueue) -> None:
    torch.set_num_threads(1)
    matrix, out = torch.randn(64, 64), torch.empty(64, 64)
    started = time.perf_counter()
    for _ in range(count):
        torch.mm(matrix, matrix, out=out)
    durations.put(time.perf_counter() - started)


def arithmetic_round(setting: Setting, count: int) -> None:
    """``setting.workers`` processes each doing ``count`` products, sharing nothing."""
    context = multiprocessing.get_context(START_METHOD)
    durations = context.SimpleQueue()
    processes = [
        context.Process(target=_multiply, args=(count, durations)) for _ in range(setting.workers)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join()
    slowest = max(durations.get() for _ in processes)
    setting.products.append(setting.workers * count / slowest)


COLUMNS = (
    ("workers", 8),
    ("samples", 10),
    ("samples/s", 12),
    ("noise", 7),
    ("cpu_share", 11),
    ("accuracy", 10),
    ("test_loss", 11),
)


def _line(cells: list[str]) -> str:
    return "".join(cell.rjust(width) for cell, (_, width) in zip(cells, COLUMNS, strict=True))


def print_table(settings: list[Setting], samples: int) -> None:
    print(_line([name for name, _ in COLUMNS]))
    for setting in settings:
        accuracy = sum(setting.accuracies) / len(setting.accuracies)
        loss = sum(setting.losses) / len(setting.losses)
        cells = [
            str(setting.workers),
            str(samples),
            f"{setting.rate:,.0f}",
            f"{100 * setting.noise:.0f}%",
            f"{setting.cpu_share:.2f}",
            f"{100 * accuracy:.2f}%",
            f"{loss:.4f}",
        ]
        print(_line(cells))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Samples per second of Hogwild! with W processes against one process."
    )
    parser.add_argument("--workers", type=int, default=2, help="processes of the parallel run")
    parser.add_argument(
        "--iterations", type=int, default=12000, help="SGD steps of each run, all workers together"
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds of each setting")
    parser.add_argument(
        "--products",
        type=int,
        default=100000,
        help="64x64 matrix products per process in each arithmetic round",
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 400 steps, one round each")
    args = parser.parse_args(argv)
    if args.quick:
        args.iterations, args.repeats, args.products = 400, 1, 2000
    for name in ("iterations", "repeats", "products"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.workers < 2:
        parser.error("--workers must be at least 2 (it is compared with one process)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = benchmark_config(args.workers, args.iterations)
    setup = prepare(config)
    cores = len(os.sched_getaffinity(0))
    print(
        f"Hogwild! scaling: {args.workers} processes vs 1 on mnist5k, MLP 784-100-10, batch 32, "
        f"a = {config.algorithm.a:g}, {args.iterations} steps in all, torch {torch.__version__}"
    )
    print(
        f"{cores} cores, workers started by {START_METHOD}, one torch thread each; "
        f"load average {os.getloadavg()[0]:.2f} before the start"
    )
    print(f"samples/s: fastest of {args.repeats} rounds; accuracy, test_loss: mean over rounds")
    print()
    parallel, single = Setting(args.workers), Setting(1)
    for _ in range(args.repeats):
        for setting in (parallel, single):
            train_round(config, setup, setting)
            arithmetic_round(setting, args.products)
    samples = args.iterations * config.data.batch_size
    print_table([single, parallel], samples)
    print()
    ratio = parallel.rate / single.rate
    print(
        f"speedup {args.workers} processes / 1: {ratio:.2f} "
        f"(at most {min(args.workers, cores)} on {cores} cores)"
    )
    print(
        f"samples per CPU second, {args.workers} processes / 1: "
        f"{parallel.rate_per_cpu / single.rate_per_cpu:.2f} "
        "(below 1: each process is slower when they run at once)"
    )
    machine = max(parallel.products) / max(single.products)
    print(
        f"the machine: {args.workers} independent processes of pure arithmetic / 1: "
        f"{machine:.2f} (fastest rounds, timed between the training rounds)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
