"""How much memory a run needs, estimated from its config before anything is built.

A config can ask for more than any machine holds (a hidden layer of 10**11
units, 100,000 agents on a complete graph, 10**9 samples per batch); building
it would end in an allocation failure deep inside torch. :func:`estimate_memory`
estimates the largest arrays a run allocates from the config, the dataset's sizes
and the plan's choices alone, and :func:`check_memory` refuses a run whose estimate
exceeds this machine's memory, naming the biggest part and the machine's size.

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

from murmur.algorithms.optimizers import LocalOptimizer
from murmur.algorithms.schedules import SgdConfig
from murmur.algorithms.ssfn import LayerwiseConfig
from murmur.config import Config
from murmur.data import DatasetInfo
from murmur.errors import UsageError
from murmur.models.networks import build_model, layer_outputs
from murmur.models.stacked import TRAIN_BLOCK, takes_agents_in_turn
from murmur.registry import ALGORITHMS, Member
from murmur.topology.graphs import exponential_offsets
from murmur.topology.spectra import DENSE_LIMIT
from murmur.units import human_bytes

FLOAT32 = 4
FLOAT64 = 8
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
matrices (the registry's ``Capabilities.dense_step`` says which algorithms tune a step
on a dense W)."""
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
    config: Config,
    info: DatasetInfo,
    module: nn.Module | None = None,
    *,
    workers: int = 0,
    per_edge: bool = False,
) -> MemoryEstimate:
    """The memory ``config`` needs on a dataset of ``info``'s sizes; ``module``: the
    network the run trains when it is not an MLP (its parameters and layer outputs are
    counted). ``workers`` and ``per_edge`` are the plan's: the workers sharing one model
    (``Plan.workers``), and whether messages travel through a mailbox per directed edge
    (``Plan.transport == "per-edge"``)."""
    member = ALGORITHMS[config.algorithm.name]
    samples = info.train + info.test
    parts = {
        "this process": PROCESS_BYTES,
        "the dataset": 2 * samples * info.features * FLOAT32,
    }
    agents = config.topology.agents if member.decentralized else 1
    if member.decentralized:
        edges = _edges(config, agents)
        parts["the graph's edge lists"] = EDGE_BYTES * edges + 6 * agents * FLOAT64
        if _dense_graph(config, member, agents):
            parts["the graph's dense matrices"] = DENSE_GRAPH_MATRICES * agents * agents * FLOAT64
    algorithm = config.algorithm
    if isinstance(algorithm, LayerwiseConfig):
        parts.update(_layerwise_parts(algorithm, info, agents))
        return MemoryEstimate(parts)
    parameters, units = _model_sizes(config, info, module)
    batch = config.data.batch_size
    state = member.capabilities.state_copies * parameters * FLOAT32  # one model's arrays
    if member.kind == "hogwild":
        parts["the worker processes"] = workers * PROCESS_BYTES
    if member.kind in ("server", "hogwild"):
        parts["the models"] = (workers + 2) * state
        parts["the batches"] = workers * batch * units * ACTIVATION_COPIES * FLOAT32
    else:
        learners_batch = batch if member.decentralized else batch * config.topology.agents
        parts["the models"] = agents * state
        # An MLP's or linear model's gradients come in blocks of TRAIN_BLOCK agents, a
        # convolutional, recurrent or random network's one agent at a time
        # (models.stacked): only their activations at once, every agent's inputs.
        blocked = module is None and config.model.name in ("mlp", "linear")
        active = min(agents, TRAIN_BLOCK) if blocked else agents
        if module is not None and takes_agents_in_turn(module, config.run.device):
            active = 1
        parts["the batches"] = active * learners_batch * units * ACTIVATION_COPIES * FLOAT32
        inputs = (info.features + 2) * FLOAT32
        parts["the batches' inputs"] = agents * learners_batch * inputs
    if isinstance(algorithm, SgdConfig) and algorithm.optimizes:
        buffers = LocalOptimizer(algorithm).state_buffers()
        # one model per agent, or the server's one (its run counts one agent)
        parts["the optimizer's state"] = agents * buffers * parameters * FLOAT32
    if member.decentralized and per_edge:
        # One message per directed edge and one of each agent: a message holds at most
        # two model-sized vectors (DETSGRAD-GT's model and tracker).
        slots = agents + 2 * _edges(config, agents)
        parts["the mailboxes of faulty or varying links"] = slots * 2 * parameters * FLOAT32
    return MemoryEstimate(parts)


def _model_sizes(config: Config, info: DatasetInfo, module: nn.Module | None) -> tuple[int, int]:
    """Parameters of one model, and its units a sample: inputs and layer outputs."""
    if module is not None:
        parameters = sum(parameter.numel() for parameter in module.parameters())
        return parameters, info.features + layer_outputs(module, info.features)
    hidden = config.model.hidden if config.model.name == "mlp" else ()
    return parameter_count(config, info), info.features + sum(hidden) + info.outputs


def parameter_count(config: Config, info: DatasetInfo) -> int:
    """Parameters of one model of ``config.model`` on ``info``'s inputs and outputs."""
    outputs = info.outputs
    if config.model.name not in ("mlp", "linear"):
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


def _dense_graph(config: Config, member: Member[object], agents: int) -> bool:
    """Whether the run builds (agents, agents) matrices (see DENSE_GRAPH_MATRICES)."""
    if member.kind == "layerwise":
        return True
    tuned = member.capabilities.dense_step(config.algorithm)
    if tuned is not None:
        return agents <= DENSE_LIMIT and tuned
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


def check_memory(estimate: MemoryEstimate, config: Config) -> MemoryEstimate:
    """``estimate``, the estimate of ``config``'s run (:func:`estimate_memory`); a
    UsageError when it exceeds this machine's memory."""
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
    kind = ALGORITHMS[config.algorithm.name].kind
    if "graph" in part:
        return "fewer topology.agents or a sparser topology.graph"
    if "batches" in part:
        return "a smaller data.batch_size, fewer agents or workers"
    if "process" in part or kind in ("server", "hogwild"):
        return "fewer algorithm.workers or a smaller model.hidden"
    if kind == "layerwise":
        return "fewer algorithm.nodes or topology.agents"
    return "fewer topology.agents or a smaller model.hidden"
