"""A run, built and checked before anything starts: data, split, graph, model.

    config -> dataset -> partition -> graph -> model -> initial parameters

Both runtimes build the same run from the config and its seed (every rank of a
distributed run builds all of it), so they agree on every agent's shard, batch
stream and starting point without a message. Everything that can be wrong with
the input is checked here, before a run folder is created or training starts.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass

import torch

from murmur.algorithms.asysg import WorkersConfig
from murmur.algorithms.estimates import Segments
from murmur.algorithms.hogwild import HogwildConfig
from murmur.algorithms.protocols import BuildContext
from murmur.config import Config
from murmur.data import DATASETS, load_dataset, partition
from murmur.data.batches import BatchSampler
from murmur.data.datasets import Dataset
from murmur.data.partition import check_agents
from murmur.errors import UsageError
from murmur.models import build_model
from murmur.models.stacked import StackedModel
from murmur.registry import ALGORITHMS, check_checkpoints, check_compile, check_faults
from murmur.sections import TopologyConfig
from murmur.seeding import derive_seed
from murmur.topology import Graph, build_graph, ring
from murmur.training.checkpoint import Checkpoints
from murmur.training.memory import check_memory


@dataclass
class Problem:
    """What every agent trains on: one architecture, the data, the batch streams."""

    model: StackedModel
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    sampler: BatchSampler


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
    memory: int = 0
    """Estimated bytes of memory the run needs (``training.memory``)."""
    checkpoints: Checkpoints | None = None
    """Where the run saves its state and the checkpoint it resumes from (``train_run``
    sets them); None: it saves none."""


def _check_compile(config: Config) -> None:
    """UsageError when ``run.compile = true`` cannot be had."""
    if config.run.compile is not True:
        return
    if config.faults.active or config.topology.varying != "none":
        raise UsageError(
            "run.compile = true needs a run without [faults] and with a fixed graph "
            '(those step eagerly); set run.compile = "auto" or false'
        )
    if shutil.which("g++") is None and shutil.which("c++") is None:
        raise UsageError(
            "run.compile = true needs a C++ compiler (g++) for torch.compile; none found"
        )


def prepare(config: Config) -> Setup:
    """Build and check everything a run needs; raises UsageError on bad input."""
    torch.set_num_threads(config.run.threads)
    spec = ALGORITHMS[config.algorithm.name]
    check_faults(config.algorithm.name, config.faults, "simulator", config.topology.varying)
    check_checkpoints(config.algorithm.name, config.run, "simulator")
    check_compile(config.algorithm.name, config.run, "simulator")
    varying = config.topology.varying
    if varying != "none" and getattr(config.algorithm, "weights", None) == "uniform":
        raise UsageError(
            f"uniform weights 1/(d+1) need a regular graph in every iteration, and "
            f"topology.varying = {varying} does not give one in general; use "
            "algorithm.weights=metropolis (or laplacian)"
        )
    _check_compile(config)
    memory = _check_sizes(config)
    dataset = load_dataset(config.data.dataset, root=config.data.root or None)
    if spec.kind == "layerwise" and dataset.task != "classification":
        raise UsageError(
            f"{config.algorithm.name} needs a classification dataset; "
            f"{config.data.dataset} is {dataset.task}"
        )
    graph, shards, batch_size = _learners(config, dataset)
    if isinstance(config.algorithm, WorkersConfig | HogwildConfig):
        config.timing.check_units(config.algorithm.workers, "workers")
        config.faults.check_agents(config.algorithm.workers, "workers")
    else:
        config.timing.check_units(graph.agents, "agents")
    if spec.decentralized:
        config.faults.check_agents(graph.agents)
    if spec.kind == "layerwise":
        return Setup(config, dataset, graph, shards, None, None, memory)
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
    return Setup(config, dataset, graph, shards, problem, initial, memory)


def _check_sizes(config: Config) -> int:
    """Sizes against the dataset and this machine's memory, before anything is built."""
    info = DATASETS.get(config.data.dataset)
    if info is None:
        return 0  # load_dataset names the valid datasets
    if ALGORITHMS[config.algorithm.name].decentralized:
        check_agents(config.topology.agents, info.train)
    return check_memory(config, info).total


def build_context(setup: Setup) -> BuildContext:
    """What the algorithm of ``setup`` is built with besides its config and graph."""
    problem = setup.problem
    segments = Segments(problem.model.layout.sizes) if problem is not None else None
    return BuildContext(seed=setup.config.run.seed, segments=segments)


def topology_graph(topology: TopologyConfig, seed: int) -> Graph:
    """The graph ``topology`` describes, random ones drawn from ``seed``."""
    return build_graph(
        topology.graph,
        topology.agents,
        degree=topology.degree,
        probability=topology.probability,
        rows=topology.rows or None,
        edges_file=topology.edges_file or None,
        seed=seed,
    )


def _learners(config: Config, dataset: Dataset) -> tuple[Graph, list[torch.Tensor], int]:
    """The graph, each learner's training indices and the batch size of a step."""
    spec = ALGORITHMS[config.algorithm.name]
    everything = torch.arange(dataset.y_train.shape[0])
    if spec.decentralized:
        graph = topology_graph(config.topology, derive_seed(config.run.seed, "graph"))
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
        return graph, shards, config.data.batch_size
    algorithm = config.algorithm
    if isinstance(algorithm, WorkersConfig | HogwildConfig):
        # W workers on one shared model, each drawing its own batches from all the data.
        return ring(1), [everything] * algorithm.workers, config.data.batch_size
    # One learner on all the data, as many samples per step as all agents together.
    return ring(1), [everything], config.data.batch_size * config.topology.agents
