"""One run from a config: build everything, check it, train, write the run folder.

    config -> dataset -> partition -> model -> topology -> algorithm
           -> simulator -> metrics.jsonl + summary.json -> RunResult

Everything that can be wrong with the input is checked before the run folder
is created or any training starts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch

from murmur.config import Config, save_config
from murmur.data import load_dataset, partition
from murmur.data.batches import BatchSampler
from murmur.data.datasets import Dataset
from murmur.errors import UsageError
from murmur.metrics.evaluation import accuracy_summary
from murmur.metrics.records import MetricsWriter, RunResult
from murmur.models import build_model
from murmur.registry import ALGORITHMS
from murmur.runtime.events import ComputeTimes, EventLoop, LinkDelays
from murmur.runtime.layerwise import Network, train_layerwise
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
) -> RunResult:
    """Train one run in the simulator; write its folder when ``out_dir`` is given.

    ``setup`` is ``prepare(config)`` when the caller has already built it.
    """
    started = time.perf_counter()
    setup = setup if setup is not None else prepare(config)
    spec = ALGORITHMS[config.algorithm.name]
    algorithm = spec.build(config.algorithm, setup.graph)
    run_dir = _create_run_dir(out_dir) if out_dir is not None else None
    if run_dir is not None:
        save_config(config, run_dir / "config.toml")
    writer = MetricsWriter(run_dir / "metrics.jsonl" if run_dir is not None else None)
    if spec.kind == "layerwise":
        result = _run_layerwise(setup, algorithm, writer, started, name, preset, run_dir, progress)
        if run_dir is not None:
            result.write(run_dir / "summary.json")
        return result
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
    try:
        trained = simulate(
            setup.problem,
            algorithm,
            transport,
            setup.initial,
            config.run.iterations,
            config.run.eval_every,
            writer.write,
            progress=progress,
            clock=clock,
        )
    finally:
        writer.close()
    last = trained.last_record
    agents = setup.graph.agents
    counters = transport.counters
    result = RunResult(
        name=name or config.algorithm.name,
        preset=preset,
        algorithm=config.algorithm.name,
        dataset=config.data.dataset,
        agents=agents,
        topology=setup.graph.name if spec.decentralized else "none",
        iterations=config.run.iterations,
        seed=config.run.seed,
        accuracy=accuracy_summary(last["test_accuracy"]),
        test_loss=sum(last["test_loss"]) / agents,
        events=counters.events,
        events_per_agent=counters.events_per_agent.tolist(),
        messages=counters.messages,
        bytes=counters.bytes,
        communication_saving=1.0 - counters.events / (agents * config.run.iterations),
        consensus_distance=last["consensus_distance"],
        wall_seconds=time.perf_counter() - started,
        train_seconds=trained.train_seconds,
        samples=trained.samples,
        samples_per_second=trained.samples / max(trained.train_seconds, 1e-9),
        run_dir=str(run_dir.resolve()) if run_dir is not None else None,
        parameters=trained.params,
        extra={"virtual_seconds": trained.virtual_seconds},
    )
    if run_dir is not None:
        result.write(run_dir / "summary.json")
    return result


def _run_layerwise(
    setup: Setup,
    solver,
    writer: MetricsWriter,
    started: float,
    name: str,
    preset: str,
    run_dir: Path | None,
    progress: bool,
) -> RunResult:
    config, dataset, graph = setup.config, setup.dataset, setup.graph
    network = Network(
        graph=graph,
        counters=MessageCounters(graph.agents),
        clock=EventLoop(),
        compute=ComputeTimes(config.timing, graph.agents, derive_seed(config.run.seed, "timing")),
        links=LinkDelays(config.timing),
    )
    try:
        trained = train_layerwise(
            config.algorithm,
            solver,
            network,
            dataset.x_train,
            dataset.y_train,
            dataset.x_test,
            dataset.y_test,
            setup.shards,
            dataset.num_classes,
            seed=derive_seed(config.run.seed, "ssfn"),
            on_record=writer.write,
            progress=progress,
        )
    finally:
        writer.close()
    last = trained.last_record
    counters = network.counters
    agents = graph.agents
    samples = int(sum(shard.numel() for shard in setup.shards))
    decentralized = ALGORITHMS[config.algorithm.name].decentralized
    extra = {
        "virtual_seconds": trained.virtual_seconds,
        "layers": trained.sizes,
        "train_accuracy": accuracy_summary(last["train_accuracy"]),
        "train_nme": last["train_nme"],
        "admm_iterations": trained.admm_iterations,
        "mean_degree": float(graph.degrees().double().mean()) if decentralized else 0.0,
    }
    return RunResult(
        name=name or config.algorithm.name,
        preset=preset,
        algorithm=config.algorithm.name,
        dataset=config.data.dataset,
        agents=agents,
        topology=graph.name if decentralized else "none",
        iterations=trained.admm_iterations,
        seed=config.run.seed,
        accuracy=accuracy_summary(last["test_accuracy"]),
        test_loss=sum(last["test_loss"]) / agents,
        events=counters.events,
        events_per_agent=counters.events_per_agent.tolist(),
        messages=counters.messages,
        bytes=counters.bytes,
        communication_saving=None,
        consensus_distance=last["consensus_distance"],
        wall_seconds=time.perf_counter() - started,
        train_seconds=trained.train_seconds,
        samples=samples,
        samples_per_second=samples / max(trained.train_seconds, 1e-9),
        run_dir=str(run_dir.resolve()) if run_dir is not None else None,
        extra=extra,
        parameters=trained.outputs,
    )


def _create_run_dir(out_dir: str | Path) -> Path:
    path = Path(out_dir)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UsageError(f"{path} already exists and is not empty; choose another --out")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create run folder {path}: {error.strerror}") from None
    return path
