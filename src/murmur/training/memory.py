"""How much memory a run needs, estimated from its config before anything is built.

A config can ask for more than any machine holds (a hidden layer of 10**11
units, 100,000 agents on a complete graph, 10**9 samples per batch); building
it would end in an allocation failure deep inside torch. :func:`check_memory`
estimates the largest arrays a run allocates from the config and the dataset's
sizes alone, and refuses a run whose estimate exceeds this machine's memory,
naming the biggest part and the machine's size.

The estimate counts what grows with the config (stacked models, batches,
dense graph matrices, Gram matrices, processes) with a margin for the copies an
algorithm keeps; it is meant to catch runs that cannot fit, not to predict the
peak to the byte.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from murmur.algorithms.asysg import WorkersConfig
from murmur.algorithms.choco import GossipConfig
from murmur.algorithms.detsgrad_gt import DetsgradGtConfig
from murmur.algorithms.hogwild import HogwildConfig
from murmur.algorithms.optimizers import LocalOptimizer
from murmur.algorithms.schedules import SgdConfig
from murmur.algorithms.ssfn import LayerwiseConfig
from murmur.config import Config
from murmur.data import DatasetInfo
from murmur.errors import UsageError
from murmur.models.networks import build_model, layer_outputs
from murmur.models.stacked import TRAIN_BLOCK
from murmur.registry import ALGORITHMS
from murmur.topology.graphs import exponential_offsets
from murmur.topology.spectra import DENSE_LIMIT
from murmur.units import human_bytes

FLOAT32 = 4
FLOAT64 = 8
STATE_COPIES = 12
"""Model-sized arrays an algorithm keeps per agent: parameters, what its
neighbours last received, gradient, mixing result, trackers, momentum, scratch
(DETSGRAD-GT, the largest, peaks near 11 on a ring of 256)."""
LEAN_STATE_COPIES = {"dsgd": 4}
"""Algorithms that keep fewer model-sized arrays per agent than :data:`STATE_COPIES`:
DSGD holds its parameters, what was sent, the gradient and the mixing result (its
peak at 10,000 and 100,000 agents, ``benchmarks/many_agents.py``, is within 30 % of
this estimate)."""
ACTIVATION_COPIES = 4
"""Per sample and unit: activation, its gradient, and the masks of backward."""
PROCESS_BYTES = 300 * 2**20
"""One Python process with torch imported (Hogwild's workers are processes)."""
DENSE_GRAPH_MATRICES = 3
"""The dense (agents, agents) float64 matrices of the runs that build them: the
Laplacian, its eigendecomposition's workspace and a mixing matrix. Only compressed
gossip (CHOCO-SGD, SPARQ-SGD, BEER; DETSGRAD-GT compressed with b = "auto") tunes
its step on a dense W (up to ``DENSE_LIMIT`` agents), and only a graph without a
closed-form spectrum and at most ``DENSE_LIMIT`` agents has a dense
eigendecomposition; every other run keeps its graph as edge lists and sparse
matrices."""
EDGE_BYTES = 120
"""Bytes per undirected edge of the graph's edge lists and sparse matrices: the
(E, 2) edges, the Laplacian and mixing operator in CSR (two directions each, values
and indices) and the edges' keys and masks."""


@dataclass(frozen=True)
class MemoryEstimate:
    """The bytes a run needs, by part."""

    parts: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    @property
    def largest(self) -> str:
        return max(self.parts, key=lambda name: self.parts[name])


def estimate_memory(
    config: Config, info: DatasetInfo, module: nn.Module | None = None
) -> MemoryEstimate:
    """The memory ``config`` needs on a dataset of ``info``'s sizes; ``module``: the
    network the run trains when it is not an MLP (its parameters and layer outputs are
    counted)."""
    spec = ALGORITHMS[config.algorithm.name]
    samples = info.train + info.test
    parts = {
        "this process": PROCESS_BYTES,
        "the dataset": 2 * samples * info.features * FLOAT32,
    }
    agents = config.topology.agents if spec.decentralized else 1
    if spec.decentralized:
        edges = _edges(config, agents)
        parts["the graph's edge lists"] = EDGE_BYTES * edges + 6 * agents * FLOAT64
        if _dense_graph(config, agents):
            parts["the graph's dense matrices"] = DENSE_GRAPH_MATRICES * agents * agents * FLOAT64
    if isinstance(config.algorithm, LayerwiseConfig):
        parts.update(_layerwise_parts(config.algorithm, info, agents))
        return MemoryEstimate(parts)
    parameters = parameter_count(config, info)
    outputs = info.outputs
    units = info.features + sum(config.model.hidden if config.model.name == "mlp" else ()) + outputs
    if module is not None:
        parameters = sum(parameter.numel() for parameter in module.parameters())
        units = info.features + layer_outputs(module, info.features)
    batch = config.data.batch_size
    algorithm = config.algorithm
    if isinstance(algorithm, HogwildConfig):
        parts["the worker processes"] = algorithm.workers * PROCESS_BYTES
        parts["the models"] = (algorithm.workers + 2) * STATE_COPIES * parameters * FLOAT32
        parts["the batches"] = algorithm.workers * batch * units * ACTIVATION_COPIES * FLOAT32
    elif isinstance(algorithm, WorkersConfig):
        parts["the models"] = (algorithm.workers + 2) * STATE_COPIES * parameters * FLOAT32
        parts["the batches"] = algorithm.workers * batch * units * ACTIVATION_COPIES * FLOAT32
    else:
        learners_batch = batch if spec.decentralized else batch * config.topology.agents
        copies = LEAN_STATE_COPIES.get(config.algorithm.name, STATE_COPIES)
        parts["the models"] = agents * copies * parameters * FLOAT32
        # An MLP's or linear model's gradients come in blocks of TRAIN_BLOCK agents
        # (models.stacked): only a block's activations at once, every agent's inputs.
        blocked = module is None and config.model.name in ("mlp", "linear")
        active = min(agents, TRAIN_BLOCK) if blocked else agents
        parts["the batches"] = active * learners_batch * units * ACTIVATION_COPIES * FLOAT32
        inputs = (info.features + 2) * FLOAT32
        parts["the batches' inputs"] = agents * learners_batch * inputs
    if isinstance(algorithm, SgdConfig) and algorithm.optimizes:
        models = 1 if isinstance(algorithm, WorkersConfig) else agents  # a server's one model
        buffers = LocalOptimizer(algorithm).state_buffers()
        parts["the optimizer's state"] = models * buffers * parameters * FLOAT32
    if spec.decentralized and _mailboxes(config):
        # One message per directed edge and one of each agent: a message holds at most
        # two model-sized vectors (DETSGRAD-GT's model and tracker).
        slots = agents + 2 * _edges(config, agents)
        parts["the mailboxes of faulty or varying links"] = slots * 2 * parameters * FLOAT32
    return MemoryEstimate(parts)


def parameter_count(config: Config, info: DatasetInfo) -> int:
    """Parameters of one model of ``config.model`` on ``info``'s inputs and outputs."""
    outputs = info.outputs
    if config.model.name == "cnn":
        module = build_model(config.model, info.features, outputs, seed=0)
        return sum(parameter.numel() for parameter in module.parameters())
    widths = [info.features, *(config.model.hidden if config.model.name == "mlp" else ()), outputs]
    return sum((fan_in + 1) * fan_out for fan_in, fan_out in zip(widths, widths[1:], strict=False))


def _layerwise_parts(algorithm: LayerwiseConfig, info: DatasetInfo, agents: int) -> dict[str, int]:
    """SSFN's layers: features of every sample, and each node's Gram matrices."""
    classes = max(info.classes, 1)
    width = 2 * classes + algorithm.nodes
    inputs = max(width, info.features)
    samples = info.train + info.test
    return {
        "the layer features": 4 * samples * inputs * FLOAT64,
        "the nodes' Gram matrices": 4 * agents * inputs * inputs * FLOAT64,
        "the layer outputs": 8 * agents * classes * inputs * FLOAT64,
    }


def _mailboxes(config: Config) -> bool:
    """Whether the run keeps a mailbox per link: faults, or a varying graph for an
    algorithm that does not send every model to every neighbour at every step."""
    if config.faults.active:
        return True
    varying = config.topology.varying != "none"
    return varying and not ALGORITHMS[config.algorithm.name].capabilities.full_exchange


def _dense_graph(config: Config, agents: int) -> bool:
    """Whether the run builds (agents, agents) matrices (see DENSE_GRAPH_MATRICES)."""
    algorithm = config.algorithm
    if isinstance(algorithm, GossipConfig):
        return agents <= DENSE_LIMIT and algorithm.gamma == "auto"
    if isinstance(algorithm, DetsgradGtConfig) and algorithm.compress != "none":
        return agents <= DENSE_LIMIT and algorithm.b == "auto"
    if isinstance(algorithm, LayerwiseConfig):
        return True
    closed_form = config.topology.graph not in ("erdos_renyi", "edges")
    return not closed_form and agents <= DENSE_LIMIT


def _edges(config: Config, agents: int) -> int:
    """Edges of the configured graph, from its kind and size (not built)."""
    topology = config.topology
    resampled = topology.graph == "erdos_renyi" and topology.varying == "resample"
    if topology.graph == "complete" or resampled:  # a resampled graph may use any pair
        return agents * (agents - 1) // 2
    if topology.graph == "erdos_renyi":
        return int(topology.edge_probability * agents * (agents - 1) / 2) + agents
    if topology.graph == "circular":
        return agents * max(topology.degree, 2) // 2
    if topology.graph == "exponential":
        return agents * len(exponential_offsets(agents))
    if topology.graph == "edges":
        path = Path(topology.edges_file)
        return path.stat().st_size // 4 if path.is_file() else 0  # a line "i j\n" is 4 bytes
    return 2 * agents  # ring, star, torus


def machine_memory() -> int:
    """Bytes of memory this process may use: the machine's, or its cgroup's limit."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
    except OSError:
        return total
    return min(total, int(limit)) if limit.isdigit() else total


def check_memory(
    config: Config, info: DatasetInfo, module: nn.Module | None = None
) -> MemoryEstimate:
    """The run's estimate; a UsageError when it exceeds this machine's memory."""
    estimate = estimate_memory(config, info, module)
    available = machine_memory()
    if estimate.total > available:
        largest = estimate.largest
        raise UsageError(
            f"this run needs about {human_bytes(estimate.total)} of memory "
            f"({human_bytes(estimate.parts[largest])} for {largest}) but this machine has "
            f"{human_bytes(available)}; make it smaller ({_advice(config, largest)})"
        )
    return estimate


def _advice(config: Config, part: str) -> str:
    if "graph" in part:
        return "fewer topology.agents or a sparser topology.graph"
    if "batches" in part:
        return "a smaller data.batch_size, fewer agents or workers"
    if "process" in part or isinstance(config.algorithm, WorkersConfig | HogwildConfig):
        return "fewer algorithm.workers or a smaller model.hidden"
    if isinstance(config.algorithm, LayerwiseConfig):
        return "fewer algorithm.nodes or topology.agents"
    return "fewer topology.agents or a smaller model.hidden"
