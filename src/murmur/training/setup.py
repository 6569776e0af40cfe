"""A run, built from its plan before anything starts: data, split, graph, model.

    plan -> dataset -> partition -> graph -> model -> initial parameters

Both runtimes build the same run from the config and its seed (every rank of a
distributed run builds all of it), so they agree on every agent's shard, batch
stream and starting point without a message. The input was checked by
:func:`~murmur.training.plan.plan`, before a run folder is created or training
starts; only reading the data files can still fail here.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from murmur import portable
from murmur.algorithms.asysg import WorkersConfig
from murmur.algorithms.estimates import Segments
from murmur.algorithms.hogwild import HogwildConfig
from murmur.algorithms.protocols import Algorithm, BuildContext, LayerSolver
from murmur.config import Config
from murmur.data import partition
from murmur.data.augment import CropFlip
from murmur.data.batches import BatchSampler
from murmur.data.datasets import Dataset
from murmur.models import build_model
from murmur.models.networks import IMAGE_SHAPES
from murmur.models.stacked import StackedModel
from murmur.registry import HOGWILD, LAYERWISE, SERVER, SGD
from murmur.sections import TopologyConfig
from murmur.seeding import derive_seed
from murmur.topology import Graph, build_graph, ring
from murmur.training.checkpoint import Checkpoints
from murmur.training.data_plan import run_dataset
from murmur.training.plan import Plan
from murmur.training.plan import plan as make_plan


@dataclass
class Problem:
    """What every agent trains on: one architecture, the data, the batch streams."""

    model: StackedModel
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    sampler: BatchSampler
    validation: tuple[torch.Tensor, torch.Tensor] | None = None
    """The validation split's inputs and targets (``data.validation``); None: none."""
    augment: CropFlip | None = None
    """How training images are augmented (``data.augment``); None: they are not."""

    def worker_batch(self, worker: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Worker ``worker``'s next mini-batch, (1, batch, ...) inputs and targets,
        augmented where the run augments (keyed by how many batches it drew before)."""
        draw = int(self.sampler.positions[worker]) // self.sampler.batch_size
        indices = self.sampler.next_for(worker)
        x = self.x_train[indices][None]
        if self.augment is not None:
            x = self.augment(x, [worker], draw)
        return x, self.y_train[indices][None]


@dataclass(kw_only=True)
class Setup:
    """A run, fully built and checked, not yet started: what every family's runs share."""

    plan: Plan
    """The run's checks passed and its automatic choices (``training.plan``)."""
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
    stop_requested: Callable[[], bool] = lambda: False
    """Whether a rule of ``[collapse]`` has stopped the run at the evaluation just made
    (``train_run`` sets it; :mod:`murmur.training.health`): the runner then ends there,
    as if it were the last."""
    watched: bool = False
    """Whether rules of ``[collapse]`` judge each evaluation as the run makes it
    (``train_run`` sets it): a distributed SGD rank then waits for the ranks' record
    of each evaluation before it steps on, so that every rank stops at the same one."""

    @property
    def steps(self) -> dict[str, float]:
        """The step sizes chosen for the run's graph (what ``"auto"`` became)."""
        return {}


@dataclass(kw_only=True)
class SgdSetup(Setup):
    """A mini-batch run (synchronous rounds, a parameter server, shared memory): the
    training problem and the stacked initial parameters."""

    problem: Problem
    """The mini-batch training problem."""
    initial: torch.Tensor
    """Stacked initial parameters, one row per agent (the workers of a server or a
    shared-memory run share one model, so it has one row per learner): a read-only view
    of one row, which an algorithm's ``init`` copies."""


@dataclass(kw_only=True)
class RoundsSetup(SgdSetup):
    """A run of synchronous mini-batch rounds (the ``sgd`` family)."""

    algorithm: Algorithm
    """The rule every agent steps by."""

    @property
    def steps(self) -> dict[str, float]:
        return self.algorithm.chosen_steps()


@dataclass(kw_only=True)
class ServerSetup(SgdSetup):
    """A run of workers and a parameter server (the ``server`` family)."""

    workers: WorkersConfig
    """The workers and the server's rule; the runner builds them with the run's model."""


@dataclass(kw_only=True)
class HogwildSetup(SgdSetup):
    """A run of real processes on one shared-memory model (the ``hogwild`` family)."""

    workers: HogwildConfig


@dataclass(kw_only=True)
class LayerSetup(Setup):
    """A layer-wise (SSFN) run: it builds its own layers from the data, no model."""

    solver: LayerSolver
    """What solves each layer's problem for the nodes of this process."""


PreparedSetup = RoundsSetup | ServerSetup | HogwildSetup | LayerSetup
"""A run ready for its family's runner."""


def prepare(
    run: Plan | Config, module: nn.Module | None = None, data: Dataset | None = None
) -> PreparedSetup:
    """Build the run ``run`` plans (checked by :func:`~murmur.training.plan.plan`, so
    nothing here checks the input again, but for the data files and what only the
    built graph tells, such as a consensus step too large for it); a config is planned
    for the simulator first. What the family trains is built last (``Family.build``).

    ``module``: the network every agent trains a copy of, instead of the one
    ``config.model`` names (a copy is trained; the module is left as it was).
    ``data``: the Dataset of a run of ``data.dataset = "arrays"``, used as it is; a
    file's is the one its plan read (once per process).
    """
    plan = run if isinstance(run, Plan) else make_plan(run, module=module, data=data)
    config = plan.config
    portable.enforce(config.run)  # a plan read from a file too
    torch.set_num_threads(config.run.threads)
    dataset = run_dataset(config, data)
    graph, shards, batch_size = _learners(plan, dataset)
    common = Setup(
        plan=plan, config=config, dataset=dataset, graph=graph, shards=shards, memory=plan.memory
    )
    if plan.kind == "layerwise":
        solver = LAYERWISE.build(config.algorithm, graph, _context(common, None))
        return LayerSetup(**_fields(common), solver=solver)
    problem = _problem(plan, dataset, shards, batch_size, module)
    # One model per agent; the workers of a server or shared-memory run share one. A
    # view of one row: each algorithm's state and the transport copy it.
    initial = problem.model.initial().cpu().expand(graph.agents, -1)
    context = _context(common, problem)
    fields = {**_fields(common), "problem": problem, "initial": initial}
    if plan.kind == "server":
        return ServerSetup(**fields, workers=SERVER.build(config.algorithm, graph, context))
    if plan.kind == "hogwild":
        return HogwildSetup(**fields, workers=HOGWILD.build(config.algorithm, graph, context))
    return RoundsSetup(**fields, algorithm=SGD.build(config.algorithm, graph, context))


def _fields(setup: Setup) -> dict[str, Any]:
    """The fields every family's setup shares, by name."""
    return {field.name: getattr(setup, field.name) for field in dataclasses.fields(Setup)}


def _problem(
    plan: Plan,
    dataset: Dataset,
    shards: list[torch.Tensor],
    batch_size: int,
    module: nn.Module | None,
) -> Problem:
    """The model every agent trains a copy of, the data on the plan's device, and the
    batch streams."""
    config = plan.config
    if module is None:
        module = _build(config, dataset.features, dataset.outputs)
    else:
        module = copy.deepcopy(module).cpu()
    device = torch.device(plan.device) if plan.device != "cpu" else None
    model = StackedModel(module, dataset.task, device=device, seed=config.run.seed)
    move = (lambda tensor: tensor.to(device)) if device is not None else (lambda tensor: tensor)
    validation = dataset.validation
    return Problem(
        model=model,
        x_train=move(dataset.x_train),
        y_train=move(dataset.y_train),
        x_test=move(dataset.x_test),
        y_test=move(dataset.y_test),
        sampler=BatchSampler(shards, batch_size, seed=config.run.seed),
        validation=(move(validation[0]), move(validation[1])) if validation else None,
        augment=_augmentation(config, dataset.features),
    )


def _augmentation(config: Config, features: int) -> CropFlip | None:
    """How the run augments its training images (``data.augment``; the plan checked that
    the rows are images); None: not at all."""
    if config.data.augment == "none":
        return None
    return CropFlip(IMAGE_SHAPES[features], config.data.crop_padding, config.run.seed)


def _context(setup: Setup, problem: Problem | None) -> BuildContext:
    """What the algorithm is built with besides its config and graph."""
    segments = None
    if problem is not None:
        layout = problem.model.layout
        segments = Segments(layout.sizes, tuple(tuple(shape) for shape in layout.shapes))
    return BuildContext(seed=setup.config.run.seed, segments=segments)


def build_context(setup: Setup) -> BuildContext:
    """What the algorithm of ``setup`` is built with besides its config and graph."""
    return _context(setup, setup.problem if isinstance(setup, SgdSetup) else None)


def _build(config: Config, features: int, outputs: int) -> nn.Module:
    """The network ``config.model`` names, initialized from the run's seed."""
    return build_model(config.model, features, outputs, seed=derive_seed(config.run.seed, "model"))


def topology_graph(topology: TopologyConfig, seed: int) -> Graph:
    """The graph ``topology`` describes, random ones drawn from ``seed``."""
    return build_graph(
        topology.graph,
        topology.agents,
        degree=topology.degree,
        probability=topology.edge_probability,
        rows=topology.rows or None,
        edges_file=topology.edges_file or None,
        seed=seed,
    )


def _learners(plan: Plan, dataset: Dataset) -> tuple[Graph, list[torch.Tensor], int]:
    """The graph, each learner's training indices and the batch size of a step."""
    config = plan.config
    everything = torch.arange(dataset.y_train.shape[0])
    if plan.decentralized:
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
            groups=dataset.groups,
        )
        return graph, shards, config.data.batch_size
    if plan.workers:
        # W workers on one shared model, each drawing its own batches from all the data.
        return ring(1), [everything] * plan.workers, config.data.batch_size
    # One learner on all the data, as many samples per step as all agents together.
    return ring(1), [everything], config.data.batch_size * config.topology.agents
