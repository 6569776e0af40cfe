"""One run from a config: build everything, check it, train, write the run folder.

    config -> dataset -> partition -> model -> topology -> algorithm
           -> simulator -> metrics.jsonl + summary.json -> RunResult

Everything that can be wrong with the input is checked before the run folder
is created or any training starts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from murmur.config import Config, save_config
from murmur.data import load_dataset, partition
from murmur.data.batches import BatchSampler
from murmur.data.datasets import Dataset
from murmur.errors import UsageError
from murmur.metrics.evaluation import accuracy_summary
from murmur.metrics.records import MetricsWriter, Outcome, RunResult
from murmur.models import build_model
from murmur.registry import ALGORITHMS
from murmur.runtime.events import ComputeTimes, EventLoop, LinkDelays
from murmur.runtime.hogwild import run_hogwild
from murmur.runtime.layerwise import Network, train_layerwise_run
from murmur.runtime.server import run_server
from murmur.runtime.simulator import Problem, RoundClock, simulate
from murmur.runtime.stacked import StackedModel
from murmur.runtime.transport import InMemoryTransport, MessageCounters
from murmur.seeding import derive_seed
from murmur.topology import Graph, build_graph, ring


@dataclass
class Setup:
    """A run, fully built and checked, not yet started."""

    config: Config
    dataset: Dataset
    graph: Graph
    shards: list[torch.Tensor]
    """Training-set indices of each agent."""
    problem: Problem | None
    """The mini-batch training problem (None for layer-wise algorithms)."""
    initial: torch.Tensor | None
    """Stacked initial parameters (None for layer-wise algorithms)."""


def prepare(config: Config) -> Setup:
    """Build and check everything a run needs; raises UsageError on bad input."""
    torch.set_num_threads(config.run.threads)
    spec = ALGORITHMS[config.algorithm.name]
    dataset = load_dataset(config.data.dataset, root=config.data.root or None)
    if spec.kind == "layerwise" and dataset.task != "classification":
        raise UsageError(
            f"{config.algorithm.name} needs a classification dataset; "
            f"{config.data.dataset} is {dataset.task}"
        )
    if spec.decentralized:
        topology = config.topology
        graph = build_graph(
            topology.graph,
            topology.agents,
            degree=topology.degree,
            probability=topology.probability,
            rows=topology.rows or None,
            edges_file=topology.edges_file or None,
            seed=derive_seed(config.run.seed, "graph"),
        )
        labels = dataset.y_train if dataset.task == "classification" else None
        shards = partition(
            labels,
            graph.agents,
            config.data.partition,
            labels_per_agent=config.data.labels_per_agent,
            alpha=config.data.dirichlet_alpha,
            num_classes=dataset.num_classes or None,
            seed=derive_seed(config.run.seed, "partition"),
            num_samples=dataset.y_train.shape[0],
        )
        batch_size = config.data.batch_size
    elif spec.kind in ("server", "hogwild"):
        # W workers on one shared model, each drawing its own batches from all the data.
        workers = config.algorithm.workers
        graph = ring(1)
        shards = [torch.arange(dataset.y_train.shape[0])] * workers
        batch_size = config.data.batch_size
    else:
        # One learner on all the data, as many samples per step as all agents together.
        graph = ring(1)
        shards = [torch.arange(dataset.y_train.shape[0])]
        batch_size = config.data.batch_size * config.topology.agents
    if spec.kind == "layerwise":
        return Setup(config, dataset, graph, shards, None, None)
    module = build_model(
        config.model, dataset.features, dataset.outputs, seed=derive_seed(config.run.seed, "model")
    )
    model = StackedModel(module, dataset.task)
    problem = Problem(
        model=model,
        x_train=dataset.x_train,
        y_train=dataset.y_train,
        x_test=dataset.x_test,
        y_test=dataset.y_test,
        sampler=BatchSampler(shards, batch_size, seed=config.run.seed),
    )
    # One model per agent; the workers of a server or shared-memory run share one.
    initial = model.initial().expand(graph.agents, -1).contiguous()
    return Setup(config, dataset, graph, shards, problem, initial)


def run(
    config: Config,
    out_dir: str | Path | None = None,
    *,
    name: str = "",
    preset: str = "",
    progress: bool = False,
    setup: Setup | None = None,
    runner: Callable[[Setup, Any, Callable[[dict[str, Any]], None], bool], Outcome] | None = None,
) -> RunResult:
    """Train one run in the simulator; write its folder when ``out_dir`` is given.

    ``setup`` is ``prepare(config)`` when the caller has already built it;
    ``runner`` trains instead of the simulator's runner for the algorithm's kind
    (the distributed runtime passes its own).
    """
    started = time.perf_counter()
    setup = setup if setup is not None else prepare(config)
    spec = ALGORITHMS[config.algorithm.name]
    algorithm = spec.build(config.algorithm, setup.graph)
    run_dir = _create_run_dir(out_dir) if out_dir is not None else None
    if run_dir is not None:
        save_config(config, run_dir / "config.toml")
    writer = MetricsWriter(run_dir / "metrics.jsonl" if run_dir is not None else None)
    try:
        train = runner if runner is not None else _RUNNERS[spec.kind]
        outcome = train(setup, algorithm, writer.write, progress)
    finally:
        writer.close()
    last = outcome.last_record
    accuracy = last.get("test_accuracy")
    losses = last.get("test_loss") or [float("nan")]
    result = RunResult(
        name=name or config.algorithm.name,
        preset=preset,
        algorithm=config.algorithm.name,
        dataset=config.data.dataset,
        agents=outcome.agents,
        topology=outcome.topology,
        iterations=outcome.iterations,
        seed=config.run.seed,
        accuracy=accuracy_summary(accuracy),
        test_loss=sum(losses) / len(losses),
        events=sum(outcome.events_per_agent),
        events_per_agent=outcome.events_per_agent,
        messages=outcome.messages,
        bytes=outcome.bytes,
        communication_saving=outcome.communication_saving,
        consensus_distance=last.get("consensus_distance", 0.0),
        wall_seconds=time.perf_counter() - started,
        train_seconds=outcome.train_seconds,
        samples=outcome.samples,
        samples_per_second=outcome.samples / max(outcome.train_seconds, 1e-9),
        run_dir=str(run_dir.resolve()) if run_dir is not None else None,
        parameters=outcome.parameters,
        extra=outcome.extra,
    )
    if run_dir is not None:
        result.write(run_dir / "summary.json")
    return result


def _run_sgd(setup: Setup, algorithm, on_record, progress: bool) -> Outcome:
    """Synchronous mini-batch algorithms, stepped by the simulator."""
    config = setup.config
    spec = ALGORITHMS[config.algorithm.name]
    transport = InMemoryTransport(setup.graph, setup.initial)
    parameters = setup.initial.shape[1]
    clock = RoundClock(
        compute=ComputeTimes(
            config.timing, setup.graph.agents, derive_seed(config.run.seed, "timing")
        ),
        links=LinkDelays(config.timing),
        flops_per_agent=6.0 * parameters * setup.problem.sampler.batch_size,
        message_bytes=parameters * setup.initial.element_size(),
    )
    trained = simulate(
        setup.problem,
        algorithm,
        transport,
        setup.initial,
        config.run.iterations,
        config.run.eval_every,
        on_record,
        progress=progress,
        clock=clock,
    )
    agents = setup.graph.agents
    counters = transport.counters
    return Outcome(
        agents=agents,
        topology=setup.graph.name if spec.decentralized else "none",
        iterations=config.run.iterations,
        last_record=trained.last_record,
        events_per_agent=counters.events_per_agent.tolist(),
        messages=counters.messages,
        bytes=counters.bytes,
        train_seconds=trained.train_seconds,
        samples=trained.samples,
        communication_saving=1.0 - counters.events / (agents * config.run.iterations),
        parameters=trained.params,
        extra={"virtual_seconds": trained.virtual_seconds},
    )


def _run_layerwise(setup: Setup, solver, on_record, progress: bool) -> Outcome:
    """SSFN and its decentralized forms, layer by layer on the virtual clock."""
    config, graph = setup.config, setup.graph
    network = Network(
        graph=graph,
        counters=MessageCounters(graph.agents),
        clock=EventLoop(),
        compute=ComputeTimes(config.timing, graph.agents, derive_seed(config.run.seed, "timing")),
        links=LinkDelays(config.timing),
    )
    trained = train_layerwise_run(setup, solver, network, setup.shards, on_record, progress)
    last = trained.last_record
    counters = network.counters
    decentralized = ALGORITHMS[config.algorithm.name].decentralized
    return Outcome(
        agents=graph.agents,
        topology=graph.name if decentralized else "none",
        iterations=trained.admm_iterations,
        last_record=last,
        events_per_agent=counters.events_per_agent.tolist(),
        messages=counters.messages,
        bytes=counters.bytes,
        train_seconds=trained.train_seconds,
        samples=int(sum(shard.numel() for shard in setup.shards)),
        parameters=trained.outputs,
        extra={
            "virtual_seconds": trained.virtual_seconds,
            "layers": trained.sizes,
            "train_accuracy": accuracy_summary(last["train_accuracy"]),
            "train_nme": last["train_nme"],
            "admm_iterations": trained.admm_iterations,
            "mean_degree": float(graph.degrees().double().mean()) if decentralized else 0.0,
        },
    )


_RUNNERS: dict[str, Callable[[Setup, Any, Callable[[dict[str, Any]], None], bool], Outcome]] = {
    "sgd": _run_sgd,
    "layerwise": _run_layerwise,
    "server": run_server,
    "hogwild": run_hogwild,
}
"""How each kind of algorithm (``AlgorithmSpec.kind``) is trained."""


def check_run_dir(path: Path) -> None:
    """Refuse a run folder that already holds something: a run never overwrites another."""
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UsageError(f"{path} already exists and is not empty; choose another --out")


def _create_run_dir(out_dir: str | Path) -> Path:
    path = Path(out_dir)
    check_run_dir(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create run folder {path}: {error.strerror}") from None
    return path
