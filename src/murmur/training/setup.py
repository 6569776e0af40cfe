"""A run, built and checked before anything starts: data, split, graph, model.

    config -> dataset -> partition -> graph -> model -> initial parameters

Both runtimes build the same run from the config and its seed (every rank of a
distributed run builds all of it), so they agree on every agent's shard, batch
stream and starting point without a message. Everything that can be wrong with
the input is checked here, before a run folder is created or training starts.
"""

from __future__ import annotations

import copy
import shutil
from dataclasses import dataclass

import torch
from torch import nn

from murmur.algorithms.asysg import WorkersConfig
from murmur.algorithms.estimates import Segments
from murmur.algorithms.hogwild import HogwildConfig
from murmur.algorithms.protocols import BuildContext
from murmur.config import Config
from murmur.data import DATASETS, load_dataset, partition
from murmur.data.batches import BatchSampler
from murmur.data.datasets import Dataset
from murmur.data.partition import check_agents
from murmur.errors import UsageError, one_line
from murmur.models import build_model
from murmur.models.stacked import StackedModel, check_buffers
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


@dataclass(kw_only=True)
class Setup:
    """A run, fully built and checked, not yet started: what every family's runs share."""

    config: Config
    dataset: Dataset
    graph: Graph
    shards: list[torch.Tensor]
    """Training-set indices of each agent (or worker, or learner)."""
    memory: int = 0
    """Estimated bytes of memory the run needs (``training.memory``)."""
    checkpoints: Checkpoints | None = None
    """Where the run saves its state and the checkpoint it resumes from (``train_run``
    sets them); None: it saves none."""


@dataclass(kw_only=True)
class SgdSetup(Setup):
    """A mini-batch run (synchronous rounds, a parameter server, shared memory): the
    training problem and the stacked initial parameters."""

    problem: Problem
    """The mini-batch training problem."""
    initial: torch.Tensor
    """Stacked initial parameters, one row per agent (the workers of a server or a
    shared-memory run share one model, so it has one row per learner)."""


@dataclass(kw_only=True)
class LayerSetup(Setup):
    """A layer-wise (SSFN) run: it builds its own layers from the data, no model."""


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


def prepare(config: Config, module: nn.Module | None = None) -> Setup:
    """Build and check everything a run needs; raises UsageError on bad input.

    ``module``: the network every agent trains a copy of, instead of the one
    ``config.model`` names (a copy is trained; the module is left as it was).
    """
    torch.set_num_threads(config.run.threads)
    spec = ALGORITHMS[config.algorithm.name]
    check_faults(config.algorithm.name, config.faults, "simulator", config.topology.varying)
    check_checkpoints(config.algorithm.name, config.run, "simulator")
    check_compile(config.algorithm.name, config.run, "simulator")
    device = check_device(config, "simulator")
    if module is not None:
        if spec.kind == "layerwise":
            raise UsageError(
                f"{config.algorithm.name} builds its own layers and takes no model; "
                "give a model to the mini-batch algorithms only"
            )
        check_buffers(module)
        module = copy.deepcopy(module).cpu()  # checked and measured on the CPU first
    varying = config.topology.varying
    if varying != "none" and getattr(config.algorithm, "weights", None) == "uniform":
        raise UsageError(
            f"uniform weights 1/(d+1) need a regular graph in every iteration, and "
            f"topology.varying = {varying} does not give one in general; use "
            "algorithm.weights=metropolis (or laplacian)"
        )
    _check_compile(config)
    memory = _check_sizes(config, module)
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
        return LayerSetup(
            config=config, dataset=dataset, graph=graph, shards=shards, memory=memory
        )
    if module is None:
        module = _build(config, dataset.features, dataset.outputs)
    else:
        _check_module(module, dataset.features, dataset.outputs)
    model = StackedModel(module, dataset.task, device=device)
    move = (lambda tensor: tensor.to(device)) if device is not None else (lambda tensor: tensor)
    problem = Problem(
        model=model,
        x_train=move(dataset.x_train),
        y_train=move(dataset.y_train),
        x_test=move(dataset.x_test),
        y_test=move(dataset.y_test),
        sampler=BatchSampler(shards, batch_size, seed=config.run.seed),
    )
    # One model per agent; the workers of a server or shared-memory run share one.
    initial = model.initial().cpu().expand(graph.agents, -1).contiguous()
    return SgdSetup(
        config=config,
        dataset=dataset,
        graph=graph,
        shards=shards,
        memory=memory,
        problem=problem,
        initial=initial,
    )


def check_device(config: Config, runtime: str) -> torch.device | None:
    """The device ``run.device`` asks for (None: the CPU); UsageError, in one line, when
    this machine or this kind of run cannot use it."""
    if config.run.device == "cpu":
        return None
    name = config.algorithm.name
    kind = ALGORITHMS[name].kind
    if runtime != "simulator" or kind not in ("sgd", "server"):
        where = f"{name} ({kind} training)" if runtime == "simulator" else "the distributed runtime"
        raise UsageError(
            f"run.device = {config.run.device} is for the simulator's mini-batch and "
            f"server algorithms; {where} computes on the CPU: use run.device = cpu"
        )
    if not torch.cuda.is_available():
        raise UsageError(
            "run.device = cuda but torch finds no CUDA GPU on this machine "
            f"(torch {torch.__version__}); use run.device = cpu"
        )
    return torch.device(config.run.device)


def _build(config: Config, features: int, outputs: int) -> nn.Module:
    """The network ``config.model`` names, initialized from the run's seed."""
    return build_model(config.model, features, outputs, seed=derive_seed(config.run.seed, "model"))


def _check_module(module: nn.Module, features: int, outputs: int | None) -> None:
    """UsageError when ``module`` does not map rows of ``features`` to ``outputs`` values
    (any width when None)."""
    rows = f"rows of {features} features (shape (rows, {features}))"
    try:
        with torch.no_grad():
            got = module(torch.zeros(2, features))
    except Exception as error:
        raise UsageError(
            f"the model cannot read {rows}: {type(error).__name__}: {one_line(str(error))}"
        ) from None
    shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
    if shape != (2, outputs if outputs is not None else shape[-1]):
        raise UsageError(
            f"the model maps {rows} to {shape}; it must give (rows, {outputs or 'outputs'}) outputs"
        )


def _check_sizes(config: Config, module: nn.Module | None) -> int:
    """Sizes against the dataset and this machine's memory, before anything is built."""
    info = DATASETS.get(config.data.dataset)
    if info is None:
        return 0  # load_dataset names the valid datasets
    if ALGORITHMS[config.algorithm.name].decentralized:
        check_agents(config.topology.agents, info.train)
    if module is not None:
        _check_module(module, info.features, info.classes or None)
    elif ALGORITHMS[config.algorithm.name].kind != "layerwise":
        if config.model.name in ("cnn", "custom"):  # refused here, before the data loads
            module = _build(config, info.features, max(info.classes, 1))
    return check_memory(config, info, module).total


def build_context(setup: Setup) -> BuildContext:
    """What the algorithm of ``setup`` is built with besides its config and graph."""
    segments = (
        Segments(setup.problem.model.layout.sizes) if isinstance(setup, SgdSetup) else None
    )
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
