"""Training throughput of murmur's simulator against one big model and a loop over models.

For each number of agents N, ways to train the 784-100-10 MLP on mnist5k with 32
samples per agent and step are timed in the same process, and their training
samples per second compared:

- detsgrad, dsgd: the full simulator step of that preset on a ring as the
               simulator runs it (``murmur.training.sgd_loop.train_sgd``: batch
               sampling, ``StackedModel.loss_and_grad``, the algorithm's step through an
               ``InMemoryTransport``), timed by the simulator's own
               ``train_seconds`` (evaluation excluded); "-compiled" is the same
               with ``run.compile`` on, one fused pass (``murmur.sim.fused``);
- gradient:    ``StackedModel.loss_and_grad`` alone on one fixed batch, to show
               where the simulator's step spends its time;
- centralized: one ``nn.Module`` on N x 32 samples per step, plain autograd and an
               in-place SGD step: the bound for N agents' worth of arithmetic;
- loop:        N separate ``nn.Module`` copies in a Python loop, each doing
               forward, backward and an SGD step on its own 32 samples.

Every method runs ``--warmup`` untimed steps (compiling, for the compiled ones),
then ``--repeats`` timed rounds, taken in turn so that load from other processes
hits all of them alike. Each method gets at least ``--steps`` timed steps and
``--min-time`` seconds in all; its rate is that of its fastest round. ``noise``
is the largest spread between a method's rounds (fastest / slowest - 1): re-run
when it is large. ``--memory N`` also runs ``murmur run detsgrad`` with N agents
for 20 iterations in a child process and prints its peak resident memory.

    python benchmarks/simulator_throughput.py                 # N = 10, 64, 256
    python benchmarks/simulator_throughput.py --agents 64 --threads 2
    python benchmarks/simulator_throughput.py --agents 64 256 --memory 1024
    python benchmarks/simulator_throughput.py --quick         # smoke run, seconds
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import math
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional

from murmur.config import Config, apply_overrides, build_config, read_preset
from murmur.data.batches import BatchSampler
from murmur.models import build_model
from murmur.registry import ALGORITHMS
from murmur.seeding import derive_seed
from murmur.sim.simulator import agents_evaluation
from murmur.sim.transport import InMemoryTransport
from murmur.training.setup import Setup, build_context, prepare
from murmur.training.sgd_loop import SgdBlock, SgdHooks, train_sgd

PRESET = "detsgrad"
"""The preset every run starts from (mnist5k, MLP 784-100-10, ring, batch 32)."""


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


def benchmark_config(
    agents: int, threads: int, algorithm: str = PRESET, model: str = "mlp"
) -> Config:
    """The ``algorithm`` preset (detsgrad or dsgd) with ``agents`` agents on a ring,
    training ``model`` (the 784-100-10 MLP or the CNN)."""
    _, raw = read_preset(algorithm)
    raw.pop("description", None)
    overrides = [
        f"topology.agents={agents}",
        "topology.graph=ring",
        f"run.threads={threads}",
        f"model.name={model}",
        "model.hidden=[100]",
        *_data_settings(model),
        "data.batch_size=32",
        "data.allow_missing_classes=true",  # throughput only: fewer than 10 agents is fine
    ]
    return build_config(apply_overrides(raw, overrides))


SHAPED_DATA = {"resnet20": (3072, 10), "char-lstm": (80, 80)}
"""Networks timed on random data of their benchmark's shape: CIFAR's 3 x 32 x 32 images
in 10 classes, Shakespeare's 80-character lines with the next of 80 characters."""
_DATA_FOLDER = tempfile.TemporaryDirectory()


def _data_settings(model: str) -> list[str]:
    """mnist5k for the MLP and the CNN; for the networks of :data:`SHAPED_DATA` an .npz
    of random rows of their shape (throughput depends on the shape, not the values)."""
    if model not in SHAPED_DATA:
        return ["data.dataset=mnist5k"]
    features, classes = SHAPED_DATA[model]
    path = Path(_DATA_FOLDER.name) / f"{model}.npz"
    if not path.exists():
        generator = np.random.default_rng(0)

        def rows(count: int) -> np.ndarray:
            if model == "char-lstm":  # character indices, which the network embeds
                return generator.integers(0, classes, (count, features)).astype(np.float32)
            return generator.random((count, features), dtype=np.float32)

        np.savez(
            path,
            x_train=rows(4096),
            y_train=generator.integers(0, classes, 4096),
            x_test=rows(32),
            y_test=generator.integers(0, classes, 32),
        )
    return ["data.dataset=file", f"data.path={path}"]


def murmur_method(
    config: Config, setup: Setup, compiled: bool = False
) -> tuple[Method, Callable[[], float]]:
    """The simulator's step of the config's algorithm, eager or compiled; also returns
    the fraction of agents that sent."""
    spec = ALGORITHMS[config.algorithm.name]
    algorithm = spec.build(config.algorithm, setup.graph, build_context(setup))
    name = config.algorithm.name + ("-compiled" if compiled else "")
    # Evaluation is not part of train_seconds; a one-sample test set keeps it from costing
    # wall-clock time between rounds.
    problem = dataclasses.replace(
        setup.problem, x_test=setup.problem.x_test[:1], y_test=setup.problem.y_test[:1]
    )
    agents = setup.graph.agents
    current = {"params": setup.initial, "events": 0, "steps": 0}

    def run(steps: int) -> float:
        # Each round continues from the models the previous one ended with.
        transport = InMemoryTransport(setup.graph, current["params"], compiled=compiled)
        trained = train_sgd(
            SgdBlock(problem, algorithm, transport, current["params"], problem.sampler.next),
            steps,
            steps,
            agents_evaluation(problem, transport, None, lambda record: None),
            SgdHooks(),
        )
        current["params"] = trained.params
        current["events"] += transport.counters.events
        current["steps"] += steps
        return trained.train_seconds

    def sent_fraction() -> float:
        return current["events"] / max(1, agents * current["steps"])

    return Method(name, agents * config.data.batch_size, run), sent_fraction


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
    methods: list[Method]
    sent: dict[str, float]
    """Fraction of agents that sent per step, per simulator method."""


def bench_agents(agents: int, args: argparse.Namespace) -> Row:
    torch.set_num_threads(args.threads)
    methods: list[Method] = []
    sent: dict[str, Callable[[], float]] = {}
    setup = None
    for algorithm in args.algorithms:
        config = benchmark_config(agents, args.threads, algorithm, args.model)
        setup = prepare(config)
        for compiled in COMPILE_CHOICES[args.compile]:
            method, fraction = murmur_method(config, setup, compiled)
            methods.append(method)
            sent[method.name] = fraction
    config = benchmark_config(agents, args.threads, model=args.model)
    setup = prepare(config)
    lr = float(getattr(config.algorithm, "a", 0.1))
    methods += [
        gradient_method(config, setup),
        centralized_method(config, setup, lr),
        loop_method(config, setup, lr),
    ]
    methods.append(state_pass_method(agents, setup.initial.shape[1]))
    measure(methods, args.steps, args.min_time, args.repeats, args.warmup)
    return Row(agents, methods, {name: fraction() for name, fraction in sent.items()})


def state_pass_method(agents: int, parameters: int) -> Method:
    """One copy of an (agents, P) float32 tensor into another: a read and a write of the
    whole stacked state, the unit of memory traffic the rest of a step is made of. Its
    "samples" are the step's, so that its ms/step reads as the time of one pass."""
    source = torch.randn(agents, parameters)
    target = torch.empty_like(source)

    def run(steps: int) -> float:
        started = time.perf_counter()
        for _ in range(steps):
            target.copy_(source)
        return time.perf_counter() - started

    return Method(STATE_PASS, agents * 32, run)


STATE_PASS = "state-pass"
"""The name of the reference that copies the (N, P) state once."""

MODELS = {
    "mlp": "mnist5k, MLP 784-100-10",
    "cnn": "mnist5k, LeNet-5 CNN",
    "resnet20": "CIFAR-shaped random images, ResNet-20 (GroupNorm)",
    "char-lstm": "Shakespeare-shaped random lines, 2-layer character LSTM",
}

COMPILE_CHOICES = {"both": (False, True), "on": (True,), "off": (False,)}

COLUMNS = (
    ("N", 5),
    ("method", 20),
    ("samples/s", 11),
    ("ms/step", 9),
    ("/centralized", 13),
    ("/loop", 7),
    ("rest-ms", 9),
    ("sent", 6),
    ("noise", 7),
)


def _line(cells: list[str]) -> str:
    return "".join(cell.rjust(width) for cell, (_, width) in zip(cells, COLUMNS, strict=True))


def print_header(args: argparse.Namespace) -> None:
    threads = f"{args.threads} torch thread{'s' if args.threads != 1 else ''}"
    print(
        f"murmur simulator throughput: {MODELS[args.model]}, ring, batch 32 per agent, "
        f"{threads}, torch {torch.__version__}"
    )
    print(
        f"samples/s, fastest of {args.repeats} rounds; each method >= {args.steps} steps "
        f"and >= {args.min_time:g} s per N; rest-ms = ms/step - gradient's ms/step (batch "
        "sampling and gather, the algorithm's step); sent = agents sending per step"
    )
    print()
    print(_line([name for name, _ in COLUMNS]), flush=True)


def print_row(row: Row) -> None:
    by_name = {m.name: m for m in row.methods}
    centralized, loop = by_name["centralized"].rate, by_name["loop"].rate
    gradient_ms = 1e3 * by_name["gradient"].samples_per_step / by_name["gradient"].rate
    pass_ms = 1e3 * by_name[STATE_PASS].samples_per_step / by_name[STATE_PASS].rate
    for method in row.methods:
        ms = 1e3 * method.samples_per_step / method.rate
        simulated = method.name in row.sent
        if method.name == STATE_PASS:
            print(_line([str(row.agents), method.name, "", f"{ms:.2f}", "", "", "", "", ""]))
            continue
        cells = [
            str(row.agents),
            method.name,
            f"{method.rate:,.0f}",
            f"{ms:.2f}",
            f"{method.rate / centralized:.2f}",
            f"{method.rate / loop:.2f}",
            f"{ms - gradient_ms:.2f}" if simulated else "",
            f"{row.sent[method.name]:.2f}" if simulated else "",
            f"{100 * method.spread:.0f}%",
        ]
        print(_line(cells), flush=True)
    rests = ", ".join(
        f"{name} {(1e3 * m.samples_per_step / m.rate - gradient_ms) / pass_ms:.1f}"
        for name, m in by_name.items()
        if name in row.sent
    )
    print(f"{'':5}rest-ms in state passes (copies of the N x P state): {rests}", flush=True)


def peak_memory(agents: int, iterations: int, compile_: bool) -> tuple[float, float]:
    """Peak resident memory (GiB) and wall seconds of ``murmur run detsgrad`` with
    ``agents`` agents of the MLP, in a child process."""
    overrides = [
        f"topology.agents={agents}",
        "topology.graph=ring",
        "data.dataset=mnist5k",
        "model.hidden=[100]",
        f"run.iterations={iterations}",
        f"run.eval_every={iterations}",
        f"run.compile={'true' if compile_ else 'false'}",
        "data.allow_missing_classes=true",
    ]
    code = (
        "import resource, sys, time; from murmur.cli import main; t = time.perf_counter(); "
        "rc = main(sys.argv[1:]); "
        "print('PEAK', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "
        "time.perf_counter() - t); sys.exit(rc)"
    )
    with tempfile.TemporaryDirectory() as out:
        argv = ["run", PRESET, "--out", str(Path(out) / "run")]
        for override in overrides:
            argv += ["--set", override]
        done = subprocess.run(
            [sys.executable, "-c", code, *argv], capture_output=True, text=True, check=False
        )
    line = next((x for x in done.stdout.splitlines() if x.startswith("PEAK")), None)
    if done.returncode != 0 or line is None:
        raise SystemExit(f"the {agents}-agent run failed: {done.stderr.strip()[-500:]}")
    _, kib, seconds = line.split()
    return int(kib) / 2**20, float(seconds)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Samples per second of murmur's simulator against centralized SGD and a "
        "Python loop over N models."
    )
    parser.add_argument("--agents", type=int, nargs="+", default=[10, 64, 256])
    parser.add_argument(
        "--algorithms", nargs="+", default=["detsgrad", "dsgd"], choices=["detsgrad", "dsgd"]
    )
    parser.add_argument(
        "--model",
        choices=list(MODELS),
        default="mlp",
        help="the network (model.name): the 784-100-10 MLP, the LeNet-5 CNN, or ResNet-20 "
        "and the character LSTM on random data of CIFAR's and Shakespeare's shapes",
    )
    parser.add_argument(
        "--compile",
        choices=sorted(COMPILE_CHOICES),
        default="both",
        help="time the eager step, the compiled one (run.compile), or both",
    )
    parser.add_argument("--steps", type=int, default=30, help="least timed steps per method")
    parser.add_argument(
        "--min-time", type=float, default=2.0, help="least timed seconds per method"
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds per method")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per method")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument(
        "--memory",
        type=int,
        nargs="*",
        default=[],
        metavar="N",
        help="also report the peak memory of a 20-iteration murmur run with N agents",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: N = 4, 8, a few steps, one round"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.agents, args.steps, args.min_time, args.repeats, args.warmup = [4, 8], 2, 0.0, 1, 1
        args.compile = "off"
    for name in ("steps", "repeats", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.warmup < 0 or args.min_time < 0:
        parser.error("--warmup and --min-time must be >= 0")
    if any(n < 2 for n in args.agents + args.memory):
        parser.error("--agents and --memory must be at least 2 (a ring needs two agents)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    print_header(args)
    for agents in args.agents:
        print_row(bench_agents(agents, args))
    for agents in args.memory:
        print()
        for compiled in COMPILE_CHOICES[args.compile]:
            gib, seconds = peak_memory(agents, 20, compiled)
            state = agents * 79_510 * 4 / 2**30
            print(
                f"peak memory, murmur run detsgrad, N = {agents}"
                f"{' compiled' if compiled else ''}, 20 iterations: {gib:.2f} GiB "
                f"(one N x P tensor: {state:.2f} GiB), {seconds:.1f} s"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
