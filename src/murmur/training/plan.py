"""One plan per run: every check of the input but what only the built graph or the
loaded data tells, and every choice made automatically, before anything is built or
written.

    config, runtime -> plan -> Plan -> prepare (training.setup) -> a runner

:func:`plan` reads the algorithm's capabilities (:mod:`murmur.registry`) and refuses,
in one line, what the run asks for that its algorithm or runtime cannot do: faults,
a varying graph, checkpoints, a compiled step, a local optimizer, a device, blocks of
agents per rank, a model, sizes beyond the data or this machine's memory. It resolves what
``"auto"`` and the run's shape leave open (whether the step compiles, the transport and
the schedule of rounds, the ranks, the memory estimate). The memory estimate and the
runners read those choices from the plan; ``murmur launch`` hands its plan to every
rank. Nothing checks the input again but for what only the built graph or the loaded
data tells (``training.setup.prepare``): a consensus step ``algorithm.b`` too large for
the graph's lambda_max is refused when the algorithm is built
(:func:`~murmur.topology.consensus_step`).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, NoReturn

import torch
from torch import nn

from murmur import portable
from murmur.algorithms.schedules import SgdConfig
from murmur.config import Config, build_config
from murmur.data.datasets import Dataset, DatasetInfo
from murmur.data.partition import check_agents
from murmur.errors import UsageError, one_line
from murmur.metrics.logs import check_logs
from murmur.models import build_model
from murmur.models.networks import IMAGE_SHAPES, evaluating
from murmur.models.stacked import takes_agents_in_turn
from murmur.models.statistics import refuse_statistics
from murmur.plugins import load_plugins
from murmur.registry import (
    ALGORITHMS,
    BUILT_IN,
    FAMILIES,
    FAULTS,
    Capabilities,
    FamilyKind,
    Member,
    Runtime,
)
from murmur.seeding import derive_seed
from murmur.training.data_plan import (
    check_classes_covered,
    check_natural,
    check_training_left,
    resolve_data,
)
from murmur.training.memory import check_memory, estimate_memory, parameter_count

COMPILE_WORTH = 1e10
"""Agents x parameters x iterations from which ``run.compile = "auto"`` compiles.

Compiling takes about 8 s the first time on one core (2 to 3 s once inductor's
on-disk cache holds the kernels). The fused step saves about 2 ns per parameter
of every agent and iteration for DETSGRAD and 0.4 ns for DSGD (784-100-10 MLP,
64 agents, one thread), so compiling pays from about 4e9 for the one and 1e10
(with a warm cache) for the other."""

TransportKind = Literal["in-memory", "per-edge", "gossip", "server", "shared memory", "gloo"]


@dataclass(frozen=True)
class Plan:
    """A run, checked, with everything chosen automatically resolved."""

    config: Config
    runtime: Runtime
    kind: FamilyKind
    """The algorithm's family (``registry.FAMILIES``)."""
    decentralized: bool
    learners: int
    """Agents of the graph (1: one learner, or workers sharing one model)."""
    workers: int
    """Workers sharing one model (server and shared-memory runs), else 0."""
    parameters: int
    """Parameters of one model (0 for layer-wise runs, which build their own layers)."""
    compiled: bool
    """Whether the simulator steps through the fused, compiled pass (``run.compile``)."""
    transport: TransportKind
    """How messages travel: the simulator's ``in-memory`` (lossless, fixed graph) or
    ``per-edge`` mailboxes (lost messages, down links, crashes, varying graphs), its
    layer-wise ``gossip``, a ``server`` on its virtual clock, ``shared memory``
    between processes, or ``gloo`` between ranks."""
    scheduled: bool
    """Whether the simulator steps the run's rounds through a schedule
    (``sim.faults.NetworkSchedule``): a decentralized SGD run whose links go down,
    agents crash or graph varies."""
    processes: int
    """Ranks of a distributed run (1 in the simulator)."""
    agents_per_rank: int
    device: str
    memory: int
    """Estimated bytes of memory the run needs (``training.memory``)."""

    def to_json(self) -> str:
        """The plan, config included as TOML, for ranks started elsewhere."""
        fields = asdict(self)
        fields["config"] = self.config.to_toml()
        return json.dumps(fields)

    @classmethod
    def from_json(cls, text: str) -> Plan:
        """A plan :meth:`to_json` wrote; ValueError for anything else."""
        fields = json.loads(text)
        fields["config"] = build_config(tomllib.loads(fields["config"]))
        return cls(**fields)

    def choices(self) -> str:
        """What was chosen for the run, in a few words (``murmur run --check``)."""
        ranks = ""
        if self.runtime == "distributed":
            ranks = f", {self.processes} ranks of {self.agents_per_rank} agents"
        steps = "compiled" if self.compiled else "eager"
        origin = ALGORITHMS[self.config.algorithm.name].origin
        source = f"{self.config.algorithm.name} from {origin}, " if origin != BUILT_IN else ""
        return (
            f"{source}{self.kind} family, {self.transport} transport{ranks}, {steps} steps on "
            f"{self.device}"
        )


def plan(
    config: Config,
    runtime: Runtime = "simulator",
    *,
    world: int | None = None,
    world_name: str = "WORLD_SIZE",
    agents_per_rank: int = 1,
    module: nn.Module | None = None,
    data: Dataset | None = None,
) -> Plan:
    """Check ``config`` for ``runtime`` and resolve its automatic choices; UsageError,
    in one line, for anything it cannot run (see the module's note for the exceptions).

    ``world``: the ranks a distributed run will have (``world_name``: how the user set
    that number, for the message), each holding ``agents_per_rank`` agents; None: not
    known yet. ``module``: the network to train instead of the one ``config.model``
    names (it is read, never changed). ``data``: the Dataset of a config of
    ``data.dataset = "arrays"``; the plan's config carries its (or a file's) SHA-256.
    """
    portable.enforce(config.run)  # before anything here computes
    member = ALGORITHMS[config.algorithm.name]
    check_capabilities(member, config, runtime)
    device = _device(member, config, runtime)
    if module is not None:
        module = _checked_module(member, module)
    _check_settings(config)
    config, info, dataset = resolve_data(config, data, runtime)
    config = _pinned_plugins(config)
    check_training_left(config, member.decentralized, info)
    learners, workers = _learners(member, config)
    transport, scheduled = _delivery(member, config, runtime)
    parameters, memory, in_turn = _sizes(
        member, config, info, module, workers, transport == "per-edge"
    )
    check_classes_covered(config, member.decentralized, info, dataset)
    check_natural(config, member.decentralized, info)
    _check_data_use(member, config, info, dataset)
    _check_units(member, config, learners, workers)
    processes = 1
    if runtime == "distributed":
        _check_eval_agents(config)
        processes = _ranks(member, config, agents_per_rank)
        if world is not None:
            check_world(config, world, world_name, agents_per_rank)
    return Plan(
        config=config,
        runtime=runtime,
        kind=member.kind,
        decentralized=member.decentralized,
        learners=learners,
        workers=workers,
        parameters=parameters,
        compiled=_compiled(member, config, runtime, learners * parameters, in_turn),
        transport=transport,
        scheduled=scheduled,
        processes=processes,
        agents_per_rank=agents_per_rank,
        device=device,
        memory=memory,
    )


def _check_settings(config: Config) -> None:
    """What the config alone decides: the mixing weights, the compiler and the logs."""
    _check_weights(config)
    _check_compiler(config)
    check_logs(config.run.log)


def _pinned_plugins(config: Config) -> Config:
    """``config`` with the SHA-256 of each of its plugins as imported, so that a run
    resumed from its folder refuses a plugin that changed since."""
    plugins = {plugin.spec: plugin.sha256 for plugin in load_plugins(config.run.plugins)}
    digests = tuple(plugins[spec] for spec in config.run.plugins)
    if digests == config.run.plugins_sha256:
        return config
    return dataclasses.replace(config, run=dataclasses.replace(config.run, plugins_sha256=digests))


def _check_data_use(
    member: Member[object], config: Config, info: DatasetInfo, dataset: Dataset | None
) -> None:
    """What the algorithm and the network do with the data: its task, augmentation and,
    for a network that embeds its inputs, whether they are indices it can embed."""
    _check_task(member, config, info)
    _check_augment(member, config, info)
    if config.model.name == "char-lstm" and dataset is not None:
        check_indices(dataset, config.data.dataset)


def check_indices(dataset: Dataset, name: str) -> None:
    """UsageError unless every input of ``dataset`` is a whole number in [0, classes):
    ``char-lstm`` embeds each as a character of a vocabulary of the classes."""
    classes = dataset.num_classes
    for split, x in (("x_train", dataset.x_train), ("x_test", dataset.x_test)):
        bad = (x < 0) | (x >= classes) | (x != x.round())
        if bool(bad.any()):
            row, column = (int(i) for i in bad.nonzero()[0])
            raise UsageError(
                f"model.name = char-lstm reads each input as a character index 0..{classes - 1} "
                f"(the {classes} classes are its vocabulary), but {name}'s {split}[{row}, "
                f"{column}] is {float(x[row, column]):g}; give whole indices below the "
                "number of classes"
            )


def _check_task(member: Member[object], config: Config, info: DatasetInfo) -> None:
    """Layer-wise SSFN classifies: a regression dataset is refused."""
    if member.kind == "layerwise" and info.classes == 0:
        raise UsageError(
            f"{config.algorithm.name} needs a classification dataset; "
            f"{config.data.dataset} is regression"
        )


def _check_augment(member: Member[object], config: Config, info: DatasetInfo) -> None:
    """``data.augment`` crops and flips images, in the loops that draw mini-batches: a
    dataset whose rows are no images, and a layer-wise or Hogwild! run, are refused."""
    if config.data.augment == "none":
        return
    if member.kind in ("layerwise", "hogwild"):
        raise UsageError(
            f"data.augment = {config.data.augment} augments the mini-batches of the SGD and "
            f"parameter-server algorithms; {config.algorithm.name} does not draw them "
            "that way: set data.augment = none"
        )
    if info.features not in IMAGE_SHAPES:
        shapes = ", ".join("x".join(map(str, shape)) for shape in IMAGE_SHAPES.values())
        raise UsageError(
            f"data.augment = {config.data.augment} crops images, and the rows of "
            f"{config.data.dataset} ({info.features} features) are none of {shapes}: "
            "set data.augment = none"
        )


def _check_eval_agents(config: Config) -> None:
    """A distributed run measures every agent, each on its own rank: a sample asked for
    by ``run.eval_agents`` is refused rather than ignored."""
    wanted = config.run.eval_agents
    if 0 < wanted < config.topology.agents:
        raise UsageError(
            f"run.eval_agents = {wanted} samples agents in the simulator; a distributed run "
            "measures every agent on its own rank: leave run.eval_agents at 0"
        )


def check_capabilities(member: Member[object], config: Config, runtime: Runtime) -> None:
    """UsageError unless ``runtime`` runs ``member`` with the faults, graph, checkpoints,
    compiled step and local optimizer ``config`` asks for."""
    capabilities = member.capabilities
    if runtime not in capabilities.runtimes.allowed:
        raise UsageError(
            f"the {runtime} runtime does not run {member.name}: {capabilities.runtimes.why_not}"
        )
    _check_faults(member, config, runtime)
    _check_checkpoints(member, config, runtime)
    _check_compile(member, config, runtime)
    _check_optimizer(member, config)
    _check_validation(member, config)


def _check_optimizer(member: Member[object], config: Config) -> None:
    """UsageError when the run asks for a local optimizer or weight decay that
    ``member`` does not take."""
    algorithm = config.algorithm
    if not isinstance(algorithm, SgdConfig) or not algorithm.optimizes:
        return
    optimizers = member.capabilities.optimizers
    if not optimizers.allowed:
        asked = f"algorithm.optimizer = {algorithm.optimizer}"
        if algorithm.optimizer == "sgd":
            asked = f"algorithm.weight_decay = {algorithm.weight_decay:g}"
        raise UsageError(f"{member.name} cannot take {asked}: {optimizers.why_not}")


def _check_validation(member: Member[object], config: Config) -> None:
    """UsageError when the run asks for a validation split that ``member``'s evaluations
    do not measure."""
    data = config.data
    validation = member.capabilities.validation
    if validation.allowed or (data.validation == 0 and not data.validation_path):
        return
    asked = (
        f"data.validation = {data.validation:g}"
        if data.validation
        else f"data.validation_path = {data.validation_path}"
    )
    measured = ", ".join(
        other.name for other in ALGORITHMS.values() if other.capabilities.validation.allowed
    )
    raise UsageError(
        f"{member.name} measures no validation split ({asked}): "
        f"{validation.why_not}; the evaluations of {measured} measure one"
    )


def _check_faults(member: Member[object], config: Config, runtime: Runtime) -> None:
    """UsageError, saying why and what runs them, unless ``runtime`` can inject the
    run's faults into ``member`` and vary its graph as ``topology.varying`` asks: only
    the simulator can, but for the one-peer exponential topology without faults, which
    the distributed runtime runs too (:func:`distributed_varying`)."""
    faults, varying = config.faults, config.topology.varying
    asked = [faults.describe()] if faults.active else []
    if varying != "none":
        asked.append(f"topology.varying = {varying}")
    if not asked or (runtime == "distributed" and distributed_varying(member, config)):
        return
    on = {"drop": faults.drop > 0, "link_down": faults.link_down > 0}
    on["crashes"] = faults.crash_count > 0
    wanted = {fault for fault in FAULTS if on[fault]}
    faulty = ", ".join(
        other.name
        for other in ALGORITHMS.values()
        if (other.decentralized or other.kind == "server")
        and wanted <= other.capabilities.faults.allowed
    )
    if runtime == "distributed":
        _refuse_in_ranks(asked, faulty, varying)
    capabilities = member.capabilities
    if not wanted <= capabilities.faults.allowed:
        raise UsageError(
            f"{member.name} cannot run with {faults.describe()}: {capabilities.faults.why_not}; "
            f"the simulator injects them into {faulty}"
        )
    if FAMILIES[member.kind].crash_unit == "layer" and faults.crash_count > 0:
        _check_layer_crashes(config)
    if varying != "none" and not capabilities.varying.allowed:
        varied = ", ".join(
            other.name
            for other in ALGORITHMS.values()
            if other.capabilities.varying.allowed and other.decentralized
        )
        raise UsageError(
            f"{member.name} cannot run with topology.varying = {varying}: "
            f"{capabilities.varying.why_not}; the simulator varies the graph of {varied}"
        )


def _refuse_in_ranks(asked: list[str], faulty: str, varying: str) -> NoReturn:
    """The distributed runtime's refusal of the faults and varying graph ``asked``."""
    note = ""
    if varying != "none":
        ranked = ", ".join(
            other.name for other in ALGORITHMS.values() if _varies_in_ranks(other.capabilities)
        )
        note = (
            f" (of the varying graphs it runs topology.varying = one_peer, for {ranked}, "
            "without faults)"
        )
    raise UsageError(
        f"the distributed runtime does not inject faults ({', '.join(asked)}): "
        f"its messages travel for real; run {faulty} in the simulator with `murmur run`{note}"
    )


def distributed_varying(member: Member[object], config: Config) -> bool:
    """Whether the distributed runtime runs ``config``'s time-varying graph: the one-peer
    exponential topology without faults, for an algorithm that sends every agent's whole
    model to every neighbour at every step (each step's graph is a function of the
    iteration alone, and no neighbour needs a message of a step it did not talk in)."""
    return (
        config.topology.varying == "one_peer"
        and not config.faults.active
        and _varies_in_ranks(member.capabilities)
    )


def _varies_in_ranks(capabilities: Capabilities) -> bool:
    """Whether an algorithm of ``capabilities`` runs on a varying graph in ranks."""
    return (
        capabilities.varying.allowed
        and capabilities.full_exchange
        and "distributed" in capabilities.runtimes.allowed
    )


def _check_layer_crashes(config: Config) -> None:
    """Layer-wise nodes crash at the start of a layer after the first, for good."""
    if config.faults.crash_at < 1:
        raise UsageError(
            "faults.crash_at counts layers in a layer-wise run and must be at least 1: a "
            "node that crashes before layer 0 never had a model"
        )
    if config.faults.rejoin_at > 0:
        raise UsageError(
            "faults.rejoin_at must be 0 in a layer-wise run: a crashed node lacks the "
            "features of the layers it missed and cannot rejoin"
        )


def _check_checkpoints(member: Member[object], config: Config, runtime: Runtime) -> None:
    """UsageError unless ``runtime`` saves checkpoints of ``member``, when
    ``run.checkpoint_every`` asks for them."""
    every = config.run.checkpoint_every
    if every == 0 or runtime in member.capabilities.checkpoints:
        return
    if runtime == "distributed":
        raise UsageError(
            f"the distributed runtime saves no checkpoints of {member.name} "
            f"(run.checkpoint_every = {every}), only of {distributed_checkpointed_names()}; "
            "set it to 0, or run in the simulator with `murmur run`"
        )
    kinds = ", ".join(
        other.name for other in ALGORITHMS.values() if runtime in other.capabilities.checkpoints
    )
    raise UsageError(
        f"{member.name} saves no checkpoints (run.checkpoint_every = {every}); "
        f"set it to 0: the simulator saves checkpoints of {kinds}"
    )


def distributed_checkpointed_names() -> str:
    """The algorithms the distributed runtime checkpoints, by family, for a message."""
    groups = []
    for family in FAMILIES.values():
        names = [
            member.name
            for member in ALGORITHMS.values()
            if member.kind == family.kind
            and "distributed" in member.capabilities.checkpoints
            and "distributed" in member.capabilities.runtimes.allowed
        ]
        if names:
            groups.append(f"{family.title} ({', '.join(names)})")
    return ", ".join(groups[:-1]) + f" and {groups[-1]}" if len(groups) > 1 else groups[0]


def _check_compile(member: Member[object], config: Config, runtime: Runtime) -> None:
    """UsageError when ``run.compile = true`` asks for a fused step that ``runtime``
    does not take for ``member``: only the simulator's synchronous SGD rounds compile."""
    if config.run.compile is not True:
        return
    if runtime == "distributed":
        raise UsageError(
            "run.compile = true is for the simulator: the distributed runtime steps eagerly; "
            'set run.compile = "auto" or false'
        )
    if not member.capabilities.compiles:
        compiled = ", ".join(
            other.name for other in ALGORITHMS.values() if other.capabilities.compiles
        )
        raise UsageError(
            f"run.compile = true has no compiled step for {member.name}, only for {compiled}; "
            'set run.compile = "auto" or false'
        )


def _check_compiler(config: Config) -> None:
    """UsageError when ``run.compile = true`` cannot be had: faults and varying graphs
    step eagerly, and inductor needs a C++ compiler."""
    if config.run.compile is not True:
        return
    if config.faults.active or config.topology.varying != "none":
        raise UsageError(
            "run.compile = true needs a run without [faults] and with a fixed graph "
            '(those step eagerly); set run.compile = "auto" or false'
        )
    if not compiler_available():
        raise UsageError(
            "run.compile = true needs a C++ compiler (g++) for torch.compile; none found"
        )


def compiler_available() -> bool:
    """Whether inductor has a C++ compiler to build its kernels with."""
    return shutil.which("g++") is not None or shutil.which("c++") is not None


def _compiled(
    member: Member[object], config: Config, runtime: Runtime, work: int, in_turn: bool = False
) -> bool:
    """Whether the run steps through the fused, compiled mixing (``run.compile``; the
    cases ``true`` cannot have are refused before). ``auto`` leaves out networks whose
    gradients are taken agent by agent (``in_turn``: convolutions on the CPU, recurrent
    layers): their gradients cost far more than the mixing the compiled pass saves on,
    and its first, checked step holds copies of the whole state."""
    wanted = config.run.compile
    if runtime != "simulator" or not member.capabilities.compiles or wanted is False:
        return False
    if config.faults.active or config.topology.varying != "none":
        return False
    if wanted is True:
        return True
    if config.run.portable or in_turn:  # portable: inductor builds for this CPU only
        return False
    return work * config.run.iterations >= COMPILE_WORTH and compiler_available()


def _device(member: Member[object], config: Config, runtime: Runtime) -> str:
    """The device ``run.device`` asks for; UsageError, in one line, when this machine or
    this kind of run cannot use it."""
    if config.run.device == "cpu":
        return "cpu"
    if runtime != "simulator" or not member.capabilities.cuda:
        where = (
            f"{member.name} ({member.kind} training)"
            if runtime == "simulator"
            else "the distributed runtime"
        )
        raise UsageError(
            f"run.device = {config.run.device} is for the simulator's mini-batch and "
            f"server algorithms; {where} computes on the CPU: use run.device = cpu"
        )
    if not torch.cuda.is_available():
        raise UsageError(
            "run.device = cuda but torch finds no CUDA GPU on this machine "
            f"(torch {torch.__version__}); use run.device = cpu"
        )
    return config.run.device


def _checked_module(member: Member[object], module: nn.Module) -> nn.Module:
    """``module``, or its copy on the CPU, once it is known to be a model murmur can
    train in ``member``'s family."""
    if member.kind == "layerwise":
        raise UsageError(
            f"{member.name} builds its own layers and takes no model; "
            "give a model to the mini-batch algorithms only"
        )
    check_statistics(member, module)
    if any(parameter.device.type != "cpu" for parameter in module.parameters()):
        module = copy.deepcopy(module).cpu()  # checked and measured on the CPU
    return module


def check_statistics(member: Member[object], module: nn.Module) -> None:
    """A module with buffers (BatchNorm) trains in the SGD family, which keeps each
    agent's running statistics; servers and Hogwild, whose workers share one model,
    refuse it in one line."""
    if member.kind in ("server", "hogwild"):
        refuse_statistics(module, f"{member.name} ({member.kind})")


def _check_weights(config: Config) -> None:
    """Uniform weights need a regular graph in every iteration."""
    varying = config.topology.varying
    if varying != "none" and getattr(config.algorithm, "weights", None) == "uniform":
        raise UsageError(
            f"uniform weights 1/(d+1) need a regular graph in every iteration, and "
            f"topology.varying = {varying} does not give one in general; use "
            "algorithm.weights=metropolis (or laplacian)"
        )


def _sizes(
    member: Member[object],
    config: Config,
    info: DatasetInfo,
    module: nn.Module | None,
    workers: int,
    per_edge: bool,
) -> tuple[int, int, bool]:
    """Parameters of one model, the memory estimate of a run of ``workers`` sharing
    one model (0: none) and of a mailbox per directed edge or not (``per_edge``), the
    sizes checked against the dataset and this machine's memory, and whether the
    model's gradients are taken agent by agent (:func:`takes_agents_in_turn`)."""
    if member.decentralized:
        check_agents(config.topology.agents, info.train)
    if module is not None:
        check_module_shape(module, info.features, info.classes or None)
    elif member.kind != "layerwise" and config.model.name not in ("mlp", "linear"):
        # refused here, before the data loads
        module = build_model(
            config.model,
            info.features,
            max(info.classes, 1),
            seed=derive_seed(config.run.seed, "model"),
        )
    if module is not None:
        check_statistics(member, module)
    estimate = estimate_memory(config, info, module, workers=workers, per_edge=per_edge)
    memory = check_memory(estimate, config).total
    if member.kind == "layerwise":
        return 0, memory, False
    if module is not None:
        in_turn = takes_agents_in_turn(module, config.run.device)
        return sum(parameter.numel() for parameter in module.parameters()), memory, in_turn
    return parameter_count(config, info), memory, False


def check_module_shape(module: nn.Module, features: int, outputs: int | None) -> None:
    """UsageError when ``module`` does not map rows of ``features`` to ``outputs`` values
    (any width when None)."""
    rows = f"rows of {features} features (shape (rows, {features}))"
    try:
        with evaluating(module):
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


def _learners(member: Member[object], config: Config) -> tuple[int, int]:
    """Agents of the graph, and workers sharing one model (0: none)."""
    workers = getattr(config.algorithm, "workers", 0)
    if member.decentralized:
        return config.topology.agents, 0
    return 1, workers if member.kind in ("server", "hogwild") else 0


def _check_units(member: Member[object], config: Config, learners: int, workers: int) -> None:
    """The clock's speeds and stragglers and the crashes against the agents or workers."""
    if workers:
        config.timing.check_units(workers, "workers")
        config.faults.check_agents(workers, "workers")
    else:
        config.timing.check_units(learners, "agents")
    if member.decentralized:
        config.faults.check_agents(learners)


def _delivery(
    member: Member[object], config: Config, runtime: Runtime
) -> tuple[TransportKind, bool]:
    """How the run's messages travel, and whether the simulator steps its rounds through
    a schedule (``Plan.transport``, ``Plan.scheduled``)."""
    if runtime == "distributed":
        return "gloo", False
    if member.kind == "layerwise":
        return "gossip", False
    if member.kind == "server":
        return "server", False
    if member.kind == "hogwild":
        return "shared memory", False
    faults, topology = config.faults, config.topology
    scheduled = member.decentralized and (
        faults.link_down > 0 or faults.crash_count > 0 or topology.varying != "none"
    )
    if topology.varying != "none" and not faults.active and member.capabilities.full_exchange:
        return "in-memory", scheduled  # each graph's neighbours hold the senders' latest models
    return "per-edge" if faults.active or scheduled else "in-memory", scheduled


def block_algorithms() -> list[str]:
    """The algorithms whose ranks may hold a block of agents: synchronous SGD."""
    return [
        member.name
        for member in ALGORITHMS.values()
        if member.capabilities.blocks and "distributed" in member.capabilities.runtimes.allowed
    ]


def _ranks(member: Member[object], config: Config, agents_per_rank: int) -> int:
    """Ranks of a distributed run, each holding ``agents_per_rank`` agents."""
    check_blocks(config, agents_per_rank)
    needed = FAMILIES[member.kind].processes(config.algorithm, config.topology.agents)
    return needed // agents_per_rank


def check_blocks(config: Config, agents_per_rank: int) -> None:
    """UsageError unless ranks of ``config`` can hold ``agents_per_rank`` agents each:
    at least 1, dividing topology.agents, and more than 1 only for synchronous SGD
    (:func:`block_algorithms`)."""
    if agents_per_rank < 1:
        raise UsageError(f"--agents-per-rank must be at least 1, not {agents_per_rank}")
    if agents_per_rank == 1:
        return
    name = config.algorithm.name
    agents = config.topology.agents
    supported = block_algorithms()
    if name not in supported:
        raise UsageError(
            f"--agents-per-rank {agents_per_rank}: blocks of agents per rank run "
            f"{', '.join(supported)} only, not {name}; drop --agents-per-rank to run "
            "one agent (or worker) per rank"
        )
    if agents % agents_per_rank != 0:
        raise UsageError(
            f"--agents-per-rank {agents_per_rank} does not divide topology.agents = {agents}"
        )


def check_world(
    config: Config, world: int, what: str = "WORLD_SIZE", agents_per_rank: int = 1
) -> None:
    """UsageError unless ``world`` processes (``what``: how the user set that number)
    are the ranks the algorithm needs, each holding ``agents_per_rank`` agents."""
    algorithm = config.algorithm
    member = ALGORITHMS[algorithm.name]
    check_blocks(config, agents_per_rank)
    agents = config.topology.agents
    if agents_per_rank > 1:
        if world * agents_per_rank != agents:
            raise UsageError(
                f"{what} is {world} with --agents-per-rank {agents_per_rank}, "
                f"{world * agents_per_rank} agents, but topology.agents is {agents} "
                f"(--nproc {agents // agents_per_rank} for {agents_per_rank} agents per rank)"
            )
        return
    needed = FAMILIES[member.kind].processes(algorithm, agents)
    if world == needed:
        return
    if member.kind == "server":
        raise UsageError(
            f"{what} is {world} but {algorithm.name} with algorithm.workers = {needed - 1} "
            f"needs {needed} ranks (the server on rank 0 and one per worker)"
        )
    raise UsageError(
        f"{what} is {world} but topology.agents is {needed}; the distributed runtime runs "
        f"one agent per process (--nproc {needed} or --set topology.agents={world}) "
        "unless --agents-per-rank says more"
    )


def write_plan_file(path: Path, checked: Plan, name: str, preset: str) -> None:
    """Write ``checked`` with the run's name and preset, for ranks that start elsewhere
    (``murmur run --plan FILE``)."""
    path.write_text(json.dumps({"plan": checked.to_json(), "name": name, "preset": preset}))


def read_plan_file(path: Path) -> tuple[Plan, str, str]:
    """The plan, name and preset :func:`write_plan_file` wrote; UsageError, in one line,
    for a file that is not one."""
    try:
        saved = json.loads(path.read_text())
        return Plan.from_json(saved["plan"]), str(saved["name"]), str(saved["preset"])
    except OSError as error:
        raise UsageError(f"cannot read the plan {path}: {error.strerror or error}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise UsageError(f"{path} is not a plan murmur launch wrote: {error}") from None
