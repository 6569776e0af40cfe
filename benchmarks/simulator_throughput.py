"""Training throughput of murmur's simulator against one big model and a loop over models.

For each number of agents N, four ways to train the 784-100-10 MLP on mnist5k
with 32 samples per agent and step are timed in the same process, and their
training samples per second compared:

- murmur:      the full DETSGRAD simulator step as ``murmur.sim.simulator.simulate``
               runs it (batch sampling, ``StackedModel.loss_and_grad``,
               ``Detsgrad.step`` on a ring through an ``InMemoryTransport``), timed
               by the simulator's own ``train_seconds`` (evaluation excluded);
- gradient:    ``StackedModel.loss_and_grad`` alone on one fixed batch, to show
               where murmur's step spends its time;
- centralized: one ``nn.Module`` on N x 32 samples per step, plain autograd and an
               in-place SGD step: the bound for N agents' worth of arithmetic;
- loop:        N separate ``nn.Module`` copies in a Python loop, each doing
               forward, backward and an SGD step on its own 32 samples.

Every method runs ``--warmup`` untimed steps, then ``--repeats`` timed rounds,
taken in turn (murmur, gradient, centralized, loop, murmur, ...) so that load
from other processes hits all of them alike. Each method gets at least
``--steps`` timed steps and ``--min-time`` seconds in all; its rate is that of
its fastest round. ``noise`` is the largest spread between a method's rounds
(fastest / slowest - 1): re-run when it is large.

    python benchmarks/simulator_throughput.py                 # N = 10, 64, 256
    python benchmarks/simulator_throughput.py --agents 64 --threads 2
    python benchmarks/simulator_throughput.py --quick         # smoke run, seconds
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional

from murmur.config import Config, apply_overrides, build_config, read_preset
from murmur.data.batches import BatchSampler
from murmur.models import build_model
from murmur.registry import ALGORITHMS
from murmur.seeding import derive_seed
from murmur.sim.simulator import simulate
from murmur.sim.transport import InMemoryTransport
from murmur.training.setup import Setup, build_context, prepare

PRESET = "detsgrad"
"""The preset every run starts from (mnist5k, MLP 784-100-10, ring, batch 32)."""

METHODS = ("murmur", "gradient", "centralized", "loop")


@dataclass
class Method:
    """One way to train, stepped ``steps`` times by ``run``, which returns seconds taken."""

    name: str
    samples_per_step: int
    run: Callable[[int], float]
    round_rates: list[float] = field(default_factory=list)
    """Samples per second of each timed round."""

    @property
    def rate(self) -> float:
        return max(self.round_rates)

    @property
    def spread(self) -> float:
        return max(self.round_rates) / min(self.round_rates) - 1.0


def benchmark_config(agents: int, threads: int) -> Config:
    """The DETSGRAD preset with ``agents`` agents on a ring."""
    _, raw = read_preset(PRESET)
    raw.pop("description", None)
    overrides = [
        f"topology.agents={agents}",
        "topology.graph=ring",
        f"run.threads={threads}",
        "model.name=mlp",
        "model.hidden=[100]",
        "data.dataset=mnist5k",
        "data.batch_size=32",
    ]
    return build_config(apply_overrides(raw, overrides))


def murmur_method(config: Config, setup: Setup) -> tuple[Method, Callable[[], float]]:
    """The simulator's DETSGRAD step; also returns the fraction of agents that sent."""
    spec = ALGORITHMS[config.algorithm.name]
    algorithm = spec.build(config.algorithm, setup.graph, build_context(setup))
    # Evaluation is not part of train_seconds; a one-sample test set keeps it from costing
    # wall-clock time between rounds.
    problem = dataclasses.replace(
        setup.problem, x_test=setup.problem.x_test[:1], y_test=setup.problem.y_test[:1]
    )
    agents = setup.graph.agents
    current = {"params": setup.initial, "events": 0, "steps": 0}

    def run(steps: int) -> float:
        # Each round continues from the models the previous one ended with.
        transport = InMemoryTransport(setup.graph, current["params"])
        trained = simulate(
            problem,
            algorithm,
            transport,
            current["params"],
            iterations=steps,
            eval_every=steps,
            on_record=lambda record: None,
        )
        current["params"] = trained.params
        current["events"] += transport.counters.events
        current["steps"] += steps
        return trained.train_seconds

    def sent_fraction() -> float:
        return current["events"] / max(1, agents * current["steps"])

    return Method("murmur", agents * config.data.batch_size, run), sent_fraction


def gradient_method(config: Config, setup: Setup) -> Method:
    """``StackedModel.loss_and_grad`` on one fixed batch of every agent."""
    problem = setup.problem
    sampler = BatchSampler(problem.sampler.shards, config.data.batch_size, seed=config.run.seed)
    indices = sampler.next()
    x, y = problem.x_train[indices], problem.y_train[indices]
    params = setup.initial.clone()

    def run(steps: int) -> float:
        started = time.perf_counter()
        for _ in range(steps):
            losses, _ = problem.model.loss_and_grad(params, x, y)
        float(losses.mean())
        return time.perf_counter() - started

    return Method("gradient", setup.graph.agents * config.data.batch_size, run)


def _sgd_step(module: nn.Module, x: torch.Tensor, y: torch.Tensor, lr: float) -> torch.Tensor:
    loss = functional.cross_entropy(module(x), y)
    for param in module.parameters():
        param.grad = None
    loss.backward()
    with torch.no_grad():
        for param in module.parameters():
            param.add_(param.grad, alpha=-lr)
    return loss.detach()


def _module(config: Config, setup: Setup) -> nn.Module:
    dataset = setup.dataset
    return build_model(
        config.model,
        dataset.features,
        dataset.outputs,
        seed=derive_seed(config.run.seed, "model"),
    )


def centralized_method(config: Config, setup: Setup, lr: float) -> Method:
    """One MLP on all agents' samples at once: N x batch samples per step."""
    problem = setup.problem
    total = setup.graph.agents * config.data.batch_size
    sampler = BatchSampler([torch.arange(problem.y_train.shape[0])], total, seed=config.run.seed)
    module = _module(config, setup)

    def run(steps: int) -> float:
        started = time.perf_counter()
        for _ in range(steps):
            indices = sampler.next()[0]
            loss = _sgd_step(module, problem.x_train[indices], problem.y_train[indices], lr)
        float(loss)
        return time.perf_counter() - started

    return Method("centralized", total, run)


def loop_method(config: Config, setup: Setup, lr: float) -> Method:
    """N separate MLPs, one after the other, each on its own agent's batch."""
    problem = setup.problem
    base = _module(config, setup)
    modules = [copy.deepcopy(base) for _ in range(setup.graph.agents)]
    sampler = BatchSampler(problem.sampler.shards, config.data.batch_size, seed=config.run.seed)

    def run(steps: int) -> float:
        started = time.perf_counter()
        for _ in range(steps):
            indices = sampler.next()
            for module, rows in zip(modules, indices, strict=True):
                loss = _sgd_step(module, problem.x_train[rows], problem.y_train[rows], lr)
        float(loss)
        return time.perf_counter() - started

    return Method("loop", setup.graph.agents * config.data.batch_size, run)


def measure(methods: list[Method], steps: int, min_time: float, repeats: int, warmup: int) -> None:
    """Warm every method up, then time ``repeats`` rounds of each, in turn."""
    round_steps = []
    for method in methods:
        if warmup:
            method.run(warmup)
        per_step = method.run(1)
        wanted = max(steps, math.ceil(min_time / max(per_step, 1e-9)))
        round_steps.append(max(1, math.ceil(wanted / repeats)))
    for _ in range(repeats):
        for method, count in zip(methods, round_steps, strict=True):
            seconds = method.run(count)
            method.round_rates.append(count * method.samples_per_step / max(seconds, 1e-12))


@dataclass
class Row:
    agents: int
    rates: dict[str, float]
    ms: dict[str, float]
    sent: float
    noise: float


def bench_agents(agents: int, args: argparse.Namespace) -> Row:
    config = benchmark_config(agents, args.threads)
    setup = prepare(config)
    torch.set_num_threads(args.threads)
    lr = float(getattr(config.algorithm, "a", 0.1))
    murmur, sent_fraction = murmur_method(config, setup)
    methods = [
        murmur,
        gradient_method(config, setup),
        centralized_method(config, setup, lr),
        loop_method(config, setup, lr),
    ]
    measure(methods, args.steps, args.min_time, args.repeats, args.warmup)
    rates = {m.name: m.rate for m in methods}
    ms = {m.name: 1e3 * m.samples_per_step / m.rate for m in methods}
    return Row(agents, rates, ms, sent_fraction(), max(m.spread for m in methods))


def print_header(args: argparse.Namespace) -> None:
    threads = f"{args.threads} torch thread{'s' if args.threads != 1 else ''}"
    print(
        "murmur simulator throughput: DETSGRAD on mnist5k, MLP 784-100-10, ring, "
        f"batch 32 per agent, {threads}, torch {torch.__version__}"
    )
    print(
        f"samples/s, fastest of {args.repeats} rounds; each method >= {args.steps} steps "
        f"and >= {args.min_time:g} s per N"
    )
    print()


RATE_COLUMNS = (
    ("N", 5),
    ("murmur", 10),
    ("gradient", 10),
    ("centralized", 12),
    ("loop", 10),
    ("murmur/centralized", 19),
    ("murmur/loop", 12),
    ("gradient/centralized", 21),
    ("noise", 7),
)

TIME_COLUMNS = (
    ("N", 5),
    ("murmur ms", 10),
    ("gradient ms", 12),
    ("rest ms", 10),
    ("gradient share", 15),
    ("sent/agent/step", 16),
    ("centralized ms", 15),
    ("loop ms", 10),
)


def _line(cells: list[str], columns: tuple[tuple[str, int], ...]) -> str:
    return "".join(cell.rjust(width) for cell, (_, width) in zip(cells, columns, strict=True))


def print_rates_header() -> None:
    print(_line([name for name, _ in RATE_COLUMNS], RATE_COLUMNS), flush=True)


def print_rates(row: Row) -> None:
    r = row.rates
    cells = [
        str(row.agents),
        f"{r['murmur']:,.0f}",
        f"{r['gradient']:,.0f}",
        f"{r['centralized']:,.0f}",
        f"{r['loop']:,.0f}",
        f"{r['murmur'] / r['centralized']:.2f}",
        f"{r['murmur'] / r['loop']:.2f}",
        f"{r['gradient'] / r['centralized']:.2f}",
        f"{100 * row.noise:.0f}%",
    ]
    print(_line(cells, RATE_COLUMNS), flush=True)


def print_times(rows: list[Row]) -> None:
    print()
    print(
        "Where murmur's step goes (ms per step; rest = murmur - gradient: batch sampling "
        "and gather, DETSGRAD step, simulator loop):"
    )
    print(_line([name for name, _ in TIME_COLUMNS], TIME_COLUMNS))
    for row in rows:
        ms = row.ms
        cells = [
            str(row.agents),
            f"{ms['murmur']:.2f}",
            f"{ms['gradient']:.2f}",
            f"{ms['murmur'] - ms['gradient']:.2f}",
            f"{ms['gradient'] / ms['murmur']:.0%}",
            f"{row.sent:.2f}",
            f"{ms['centralized']:.2f}",
            f"{ms['loop']:.2f}",
        ]
        print(_line(cells, TIME_COLUMNS))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Samples per second of murmur's simulator against centralized SGD and a "
        "Python loop over N models."
    )
    parser.add_argument("--agents", type=int, nargs="+", default=[10, 64, 256])
    parser.add_argument("--steps", type=int, default=30, help="least timed steps per method")
    parser.add_argument(
        "--min-time", type=float, default=2.0, help="least timed seconds per method"
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds per method")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per method")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: N = 4, 8, a few steps, one round"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.agents, args.steps, args.min_time, args.repeats, args.warmup = [4, 8], 2, 0.0, 1, 1
    for name in ("steps", "repeats", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.warmup < 0 or args.min_time < 0:
        parser.error("--warmup and --min-time must be >= 0")
    if any(n < 2 for n in args.agents):
        parser.error("--agents must be at least 2 (a ring needs two agents)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    print_header(args)
    print_rates_header()
    rows = []
    for agents in args.agents:
        rows.append(bench_agents(agents, args))
        print_rates(rows[-1])
    print_times(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
