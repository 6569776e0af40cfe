"""Names -> algorithms, grouped in families: the one place that knows every algorithm
by name, how it is built, and what it can do, as data.

A :class:`Family` is a way of training: synchronous mini-batch rounds (``sgd``),
layer-wise SSFN (``layerwise``), workers and a parameter server (``server``), or
real processes on one shared-memory model (``hogwild``). It builds what its runners
train (``Family[B]``: an :class:`~murmur.algorithms.protocols.Algorithm`, a
:class:`~murmur.algorithms.protocols.LayerSolver`, or the workers' own config, from
which the runner builds the server or the processes), and gives its members default
:class:`Capabilities`. A :class:`Member` is one algorithm: its config class, a typed
builder, and the capabilities where it differs from its family's. Adding an algorithm
is one ``add`` call; adding a capability is one field of :class:`Capabilities`.

Nothing here checks a run: :mod:`murmur.training.plan` reads these capabilities and
refuses, in one line, what a run asks for that its algorithm or runtime cannot do.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Generic, Literal, TypeVar

from murmur.algorithms.arock import AsyncSolver, DssfnAsyncConfig
from murmur.algorithms.asysg import AsysgConfig, AsysgInconConfig, SyncPsConfig, WorkersConfig
from murmur.algorithms.beer import Beer, BeerConfig
from murmur.algorithms.centralized import Centralized, CentralizedConfig
from murmur.algorithms.choco import Choco, ChocoConfig, GossipConfig
from murmur.algorithms.detsgrad import Detsgrad, DetsgradConfig
from murmur.algorithms.detsgrad_gt import DetsgradGt, DetsgradGtConfig
from murmur.algorithms.dsgd import Dsgd, DsgdConfig
from murmur.algorithms.dssfn import DssfnConfig, SyncSolver
from murmur.algorithms.hogwild import HogwildConfig
from murmur.algorithms.lead import Lead, LeadConfig
from murmur.algorithms.motef import Motef, MotefConfig
from murmur.algorithms.optimizers import with_optimizer
from murmur.algorithms.protocols import Algorithm, BuildContext, LayerSolver
from murmur.algorithms.schedules import Optimizer
from murmur.algorithms.sparq import Sparq, SparqConfig
from murmur.algorithms.ssfn import CentralSolver, SsfnConfig
from murmur.errors import UsageError
from murmur.origins import BUILT_IN, RegistrationError, current, refuse_taken
from murmur.sections import AlgorithmConfig
from murmur.topology import Graph

C = TypeVar("C", bound=AlgorithmConfig)
T = TypeVar("T")
B = TypeVar("B", covariant=True)
FamilyKind = Literal["sgd", "layerwise", "server", "hogwild"]
Runtime = Literal["simulator", "distributed"]
Fault = Literal["drop", "link_down", "crashes"]
FAULTS: tuple[Fault, ...] = ("drop", "link_down", "crashes")
BOTH: tuple[Runtime, ...] = ("simulator", "distributed")
SIMULATOR: tuple[Runtime, ...] = ("simulator",)


@dataclass(frozen=True)
class SearchRange:
    """One key of ``[algorithm]`` that ``murmur tune`` searches: a number from ``low`` to
    ``high``, drawn on a log scale (``log``) or a linear one. ``--sampler grid`` tries
    ``points`` values spread evenly on that scale from ``low`` to ``high``."""

    key: str
    """The key in ``[algorithm]``: ``a``, ``v0``, ``gamma``."""
    low: float
    high: float
    points: int = 3
    log: bool = True

    def __post_init__(self) -> None:
        if not self.low < self.high or (self.log and self.low <= 0):
            scale = "a log scale from a positive low end" if self.log else "a range"
            raise ValueError(
                f"algorithm.{self.key}: {self.low:g} to {self.high:g} is not {scale} "
                "up to a higher high end"
            )
        if self.points < 2:
            raise ValueError(f"algorithm.{self.key}: a grid needs 2 points or more")

    def grid(self) -> tuple[float, ...]:
        """The values ``--sampler grid`` tries: ``points`` of them, ``low`` and ``high``
        included, evenly spaced on the range's scale, each to 3 significant digits."""
        ends = (math.log(self.low), math.log(self.high)) if self.log else (self.low, self.high)
        values = []
        for index in range(self.points):
            place = ends[0] + (ends[1] - ends[0]) * index / (self.points - 1)
            value = float(f"{math.exp(place) if self.log else place:.3g}")
            values.append(min(max(value, self.low), self.high))
        return tuple(values)


STEP = SearchRange("a", 0.01, 1.0, points=5)
"""The gradient step of a synchronous SGD algorithm: 0.01, 0.0316, 0.1, 0.316, 1."""
SMALL_STEP = SearchRange("a", 0.005, 0.5, points=5)
"""The gradient step of the parameter servers, Hogwild! and BEER, whose presets step a
quarter as far: 0.005, 0.0158, 0.05, 0.158, 0.5."""
GAMMA = SearchRange("gamma", 0.01, 1.0, points=3)
"""The consensus step on the public estimates, in (0, 1]: 0.01, 0.1, 1."""
MOMENTUM_WEIGHT = SearchRange("lam", 0.01, 1.0, points=3)
"""MoTEF's weight of a new gradient in its momentum: 0.01, 0.1, 1 (BEER)."""
OPTIMIZER_STEPS: dict[Optimizer, SearchRange] = {
    "momentum": SearchRange("a", 0.001, 0.1, points=5),
    "nesterov": SearchRange("a", 0.001, 0.1, points=5),
    "adam": SearchRange("a", 1e-5, 1e-2, points=4),
}
"""The step ``a`` under a local optimizer (``algorithm.optimizer``), which replaces the
algorithm's own range for ``a``: momentum's long-run step is a / (1 - mu), ten times
a at mu = 0.9, and Adam moves each coordinate by about a."""


@dataclass(frozen=True)
class Ability(Generic[T]):
    """A capability an algorithm may lack: what it allows, and where that falls short,
    why (the end of the refusal's sentence)."""

    allowed: T
    why_not: str = ""


STATE_COPIES = 12
"""Model-sized arrays an algorithm keeps per agent (and a worker or a server per model):
parameters, what its neighbours last received, gradient, mixing result, trackers,
momentum, scratch (DETSGRAD-GT, the largest, peaks near 11 on a ring of 256)."""

DenseStep = Callable[[AlgorithmConfig], bool | None]
"""Whether a run of a config tunes a consensus step on a dense (agents, agents) mixing
matrix W (the step ``"auto"``): True, or False where the step is set; None for an
algorithm that tunes none that way (whether its run builds dense matrices is its
graph's matter then)."""


def _no_dense_step(config: AlgorithmConfig) -> bool | None:
    """An algorithm that tunes no step on a dense W."""
    return None


@dataclass(frozen=True)
class Capabilities:
    """What runs of an algorithm can be: each field one capability, an :class:`Ability`
    where the algorithm may lack it for a reason its refusal gives, and the facts the
    memory estimate reads (``training.memory``)."""

    runtimes: Ability[tuple[Runtime, ...]] = Ability(BOTH)
    """The runtimes that run it; why the distributed runtime does not, and what to run
    instead."""
    faults: Ability[frozenset[Fault]] = Ability(frozenset(FAULTS))
    """The faults the simulator injects into it (``[faults]``); why it refuses the others."""
    varying: Ability[bool] = Ability(False)
    """Whether it runs on a time-varying graph (``topology.varying``): it derives its
    mixing weights from each iteration's graph, or, being one learner, has none."""
    full_exchange: bool = False
    """Whether every agent sends its whole model to every neighbour at every step, so
    that on a time-varying graph without faults the simulator delivers through the
    lossless transport, with no mailbox per edge."""
    checkpoints: tuple[Runtime, ...] = BOTH
    """The runtimes that save its checkpoints and resume it (``run.checkpoint_every``)."""
    compiles: bool = False
    """Whether the simulator steps it through the fused, compiled pass (``run.compile``)."""
    blocks: bool = False
    """Whether a distributed rank may hold a block of its agents (``--agents-per-rank``)."""
    cuda: bool = False
    """Whether the simulator computes its gradients on a GPU (``run.device = cuda``)."""
    optimizers: Ability[bool] = Ability(True)
    """Whether it takes an ``algorithm.optimizer`` other than sgd, or a weight decay."""
    validation: Ability[bool] = Ability(True)
    """Whether its evaluations measure a validation split (``data.validation``,
    ``data.validation_path``) beside the test set."""
    tuned: Ability[tuple[SearchRange, ...]] = Ability(())
    """What ``murmur tune`` searches, each key over its range: the algorithm's steps with
    plain SGD (a local optimizer's own range replaces ``a``'s: :data:`OPTIMIZER_STEPS`);
    why it has nothing to search."""
    state_copies: int = STATE_COPIES
    """Model-sized arrays it keeps per agent (:data:`STATE_COPIES`)."""
    dense_step: DenseStep = _no_dense_step
    """Whether a run of a config tunes a step on a dense W (:data:`DenseStep`)."""


@dataclass(frozen=True)
class Member(Generic[B]):
    """One algorithm of a family: its config class, builder and capabilities."""

    name: str
    config: type[AlgorithmConfig]
    summary: str
    decentralized: bool
    """False: one learner on all data, or workers sharing one model."""
    kind: FamilyKind
    capabilities: Capabilities
    build: Callable[[AlgorithmConfig, Graph, BuildContext], B]
    """What the family's runners train, from the algorithm's config (checked to be of
    ``config``), the run's graph and the rest of the run."""
    origin: str = BUILT_IN
    """Where the algorithm comes from: ``murmur`` for a built-in one, else the plugin
    that registered it (its file or module, or an installed package's entry point)."""


ALGORITHMS: dict[str, Member[object]] = {}
"""Every algorithm by name, built-in ones in the order of ``murmur presets`` and error
messages, then those of plugins in the order they registered."""

SGD_RULE = ("init", "initial_sent", "params", "step", "chosen_steps")
"""What a synchronous SGD rule must have (:class:`~murmur.algorithms.protocols.Algorithm`)."""
NAME_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_.")


def forget(name: str) -> None:
    """Take the algorithm ``name`` out of the registry (a plugin that failed to load)."""
    member = ALGORITHMS.pop(name)
    family = FAMILIES[member.kind]
    if isinstance(family, Family):
        family.members.pop(name, None)


def _checked_name(config: type[AlgorithmConfig]) -> str:
    """``config.name``, refused where it is not an algorithm's section or its name is
    malformed or taken."""
    if not (isinstance(config, type) and issubclass(config, AlgorithmConfig)):
        raise RegistrationError(
            f"{config!r} is not a config class: derive it from AlgorithmConfig "
            "(SgdConfig for a mini-batch rule) and make it a frozen dataclass"
        )
    if not dataclasses.is_dataclass(config):
        raise RegistrationError(
            f"{config.__name__} is not a dataclass: add @dataclass(frozen=True)"
        )
    name = config.name
    if not isinstance(name, str) or not name or not set(name) <= NAME_CHARACTERS:
        raise RegistrationError(
            f"{config.__name__}.name must be a name of lower-case letters, digits, '-', "
            f"'_' and '.', not {name!r}"
        )
    refuse_taken("algorithm", name, ALGORITHMS[name].origin if name in ALGORITHMS else None)
    return name


def _checked_rule(name: str, build: Callable[..., object]) -> None:
    """Refuse a synchronous SGD rule class that lacks a method its runners call."""
    missing = [method for method in SGD_RULE if not callable(getattr(build, method, None))]
    if inspect.isclass(build) and missing:
        raise RegistrationError(
            f"algorithm '{name}': {build.__name__} lacks {', '.join(missing)} "
            f"(a rule has {', '.join(SGD_RULE)})"
        )


@dataclass(frozen=True)
class FamilyInfo:
    """A way of training and its members' default capabilities."""

    kind: FamilyKind
    title: str
    """What a message calls the family's runs: "synchronous SGD"."""
    unit: str
    """What its runs count and checkpoint: "iteration", "layer" or "update"."""
    crash_unit: Literal["iteration", "layer"]
    """What ``faults.crash_at`` and ``faults.rejoin_at`` count in its runs."""
    defaults: Capabilities

    def processes(self, config: AlgorithmConfig, agents: int) -> int:
        """Ranks a distributed run needs: one per agent, or the workers and a server."""
        if isinstance(config, WorkersConfig) and self.kind == "server":
            return config.workers + 1
        return agents


@dataclass(frozen=True)
class Family(FamilyInfo, Generic[B]):
    """A family and its members, by name."""

    members: dict[str, Member[B]] = field(default_factory=dict)

    def add(
        self,
        config: type[C],
        build: Callable[[C, Graph, BuildContext], B],
        summary: str,
        *,
        decentralized: bool,
        capabilities: Capabilities | None = None,
    ) -> None:
        """Add the algorithm ``config.name``, built by ``build``, to this family and to
        :data:`ALGORITHMS`; ``capabilities``: the family's defaults with the fields
        where it differs replaced (``replace(FAMILY.defaults, ...)``), None where it
        differs in none. Refuses (:class:`RegistrationError`) a name already taken."""
        name = _checked_name(config)
        member = Member(
            name,
            config,
            summary,
            decentralized,
            self.kind,
            self.defaults if capabilities is None else capabilities,
            _checked(config, build),
            current(),
        )
        self.members[name] = member
        ALGORITHMS[name] = member

    def build(self, config: AlgorithmConfig, graph: Graph, context: BuildContext) -> B:
        """What this family's runners train for the algorithm ``config`` configures."""
        return self.members[config.name].build(config, graph, context)


def _checked(
    cls: type[C], build: Callable[[C, Graph, BuildContext], B]
) -> Callable[[AlgorithmConfig, Graph, BuildContext], B]:
    """``build``, taking any algorithm config and refusing one not of ``cls``."""

    def checked(config: AlgorithmConfig, graph: Graph, context: BuildContext) -> B:
        if not isinstance(config, cls):
            raise TypeError(f"expected a {cls.__name__}, not a {type(config).__name__}")
        return build(config, graph, context)

    return checked


def _itself(config: C, graph: Graph, context: BuildContext) -> C:
    """The workers of a server or shared-memory run: the runner builds them from their
    config, with the run's initial model and length."""
    return config


@dataclass(frozen=True)
class RoundsFamily(Family[Algorithm]):
    """Synchronous SGD: each member wrapped with the local optimizer its config asks for
    (:func:`~murmur.algorithms.optimizers.with_optimizer`; plain SGD is left alone)."""

    def build(self, config: AlgorithmConfig, graph: Graph, context: BuildContext) -> Algorithm:
        rule = super().build(config, graph, context)
        missing = [method for method in SGD_RULE if not callable(getattr(rule, method, None))]
        if missing:
            member = self.members[config.name]
            raise UsageError(
                f"algorithm '{config.name}' ({member.origin}): what its build returned, a "
                f"{type(rule).__name__}, lacks {', '.join(missing)} (a rule has "
                f"{', '.join(SGD_RULE)})"
            )
        return with_optimizer(rule, config)


def _gamma_on_dense_w(config: AlgorithmConfig) -> bool | None:
    """Compressed gossip tunes its gamma on a dense W when it is ``"auto"``."""
    return isinstance(config, GossipConfig) and config.gamma == "auto"


def _compressed_b_on_dense_w(config: AlgorithmConfig) -> bool | None:
    """DETSGRAD-GT tunes its b on a dense W when it compresses and b is ``"auto"``; an
    uncompressed one takes b from its graph's spectrum."""
    if not isinstance(config, DetsgradGtConfig) or not config.compresses():
        return None
    return config.b == "auto"


SGD: Family[Algorithm] = RoundsFamily(
    "sgd",
    "synchronous SGD",
    unit="iteration",
    crash_unit="iteration",
    defaults=Capabilities(
        varying=Ability(
            False,
            "its mixing weights and consensus step are fixed for the run's graph when it is built",
        ),
        compiles=True,
        blocks=True,
        cuda=True,
        tuned=Ability((STEP,)),
    ),
)
VARIES = Ability(True)
"""A time-varying graph, for an algorithm that derives its mixing weights from each
iteration's graph or, being one learner, has none."""

SERVER: Family[WorkersConfig] = Family(
    "server",
    "the parameter server",
    unit="update",
    crash_unit="iteration",
    defaults=Capabilities(
        faults=Ability(
            frozenset({"crashes"}),
            "a parameter server's pushes and pulls have no model of lost messages or down links",
        ),
        varying=Ability(False, "its workers talk to one server, over no graph"),
        cuda=True,
        tuned=Ability((SMALL_STEP,)),
    ),
)

HOGWILD: Family[HogwildConfig] = Family(
    "hogwild",
    "shared-memory processes",
    unit="iteration",
    crash_unit="iteration",
    defaults=Capabilities(
        runtimes=Ability(
            SIMULATOR, "it already runs real processes on one machine: `murmur run hogwild`"
        ),
        faults=Ability(
            frozenset(), "its workers are real processes that share one model in memory"
        ),
        varying=Ability(False, "its workers share one model in memory, over no graph"),
        checkpoints=(),
        optimizers=Ability(
            False,
            "its processes write one shared model without locks and keep no "
            "optimizer state; asysg-con and sync-ps apply the optimizer on their server",
        ),
        tuned=Ability((SMALL_STEP,)),
    ),
)

LAYERWISE: Family[LayerSolver] = Family(
    "layerwise",
    "synchronous dSSFN",
    unit="layer",
    crash_unit="layer",
    defaults=Capabilities(
        faults=Ability(frozenset()),
        varying=Ability(False, "layer-wise SSFN solves each layer over one fixed graph"),
        checkpoints=SIMULATOR,
        validation=Ability(
            False,
            "layer-wise SSFN carries the test set alone through its layers and "
            "measures each layer on it",
        ),
        tuned=Ability(
            (), "layer-wise SSFN takes no gradient steps and measures no validation split"
        ),
    ),
)

FAMILIES: dict[FamilyKind, FamilyInfo] = {
    family.kind: family for family in (SGD, LAYERWISE, SERVER, HOGWILD)
}
"""Every family, by kind, in the order messages list them."""


def register_algorithm(
    config: type[C],
    build: Callable[[C, Graph, BuildContext], object],
    summary: str,
    *,
    family: FamilyKind = "sgd",
    decentralized: bool = True,
    capabilities: Capabilities | None = None,
) -> None:
    """Make the algorithm ``config.name`` known to every runtime and command.

    ``config``: its ``[algorithm]`` section, a frozen dataclass derived from
    :class:`~murmur.sections.AlgorithmConfig` (``SgdConfig`` for a mini-batch rule)
    whose class attribute ``name`` is the name runs give; ``build(config, graph,
    context)``: what the family's runners train (for ``sgd``, an
    :class:`~murmur.algorithms.protocols.Algorithm`; a rule's class with that
    signature will do); ``summary``: one line for listings; ``family``: ``sgd``,
    ``server``, ``hogwild`` or ``layerwise``; ``capabilities``: what its runs can be,
    the family's defaults (:func:`family_defaults`) with the fields where it differs
    replaced. Refuses (:class:`RegistrationError`) a taken or malformed name and a rule
    class that lacks a method its runners call.
    """
    if family not in FAMILIES:
        raise RegistrationError(f"family must be one of {', '.join(FAMILIES)}, not {family!r}")
    name = _checked_name(config)
    if family == "sgd":
        _checked_rule(name, build)
    target = FAMILIES[family]
    assert isinstance(target, Family)
    target.add(config, build, summary, decentralized=decentralized, capabilities=capabilities)


def family_defaults(family: FamilyKind) -> Capabilities:
    """The capabilities a member of ``family`` has unless it says otherwise."""
    return FAMILIES[family].defaults


register_algorithm(
    DetsgradConfig,
    Detsgrad,
    "event-triggered decentralized SGD",
    family="sgd",
    decentralized=True,
    capabilities=replace(
        SGD.defaults,
        varying=VARIES,
        # the threshold is v0 times the step: the two are tuned together
        tuned=Ability((STEP, SearchRange("v0", 0.5, 50.0))),
    ),
)

register_algorithm(
    DsgdConfig,
    lambda config, graph, context: Dsgd(config, graph),
    "decentralized SGD, every agent sends every step",
    family="sgd",
    decentralized=True,
    capabilities=replace(
        SGD.defaults,
        varying=VARIES,
        full_exchange=True,
        # its parameters, what was sent, the gradient and the mixing result (its peak at
        # 10,000 and 100,000 agents, benchmarks/many_agents.py, is within 30 % of the
        # memory estimate)
        state_copies=4,
    ),
)

register_algorithm(
    DetsgradGtConfig,
    DetsgradGt,
    "event-triggered decentralized SGD with gradient tracking",
    family="sgd",
    decentralized=True,
    capabilities=replace(
        SGD.defaults,
        tuned=Ability((STEP, SearchRange("v0", 1.5, 150.0), SearchRange("vy", 0.3, 30.0))),
        dense_step=_compressed_b_on_dense_w,
    ),
)

register_algorithm(
    ChocoConfig,
    Choco,
    "decentralized SGD with compressed gossip of differences to public estimates",
    family="sgd",
    decentralized=True,
    capabilities=replace(SGD.defaults, tuned=Ability((STEP, GAMMA)), dense_step=_gamma_on_dense_w),
)

register_algorithm(
    BeerConfig,
    Beer,
    "decentralized SGD with compressed gradient tracking (model and tracker estimates)",
    family="sgd",
    decentralized=True,
    capabilities=replace(
        SGD.defaults, tuned=Ability((SMALL_STEP, GAMMA)), dense_step=_gamma_on_dense_w
    ),
)

register_algorithm(
    MotefConfig,
    Motef,
    "BEER's compressed model and tracker messages with a tracker of gradient momentum",
    family="sgd",
    decentralized=True,
    capabilities=replace(
        SGD.defaults,
        tuned=Ability((SMALL_STEP, GAMMA, MOMENTUM_WEIGHT)),
        dense_step=_gamma_on_dense_w,
    ),
)

register_algorithm(
    LeadConfig,
    Lead,
    "compressed exact diffusion: one compressed message a step and a dual variable kept at home",
    family="sgd",
    decentralized=True,
    capabilities=replace(
        SGD.defaults,
        tuned=Ability((SMALL_STEP, GAMMA)),
        faults=Ability(
            frozenset({"crashes"}),
            "a lost message or a down link leaves the holders of an estimate different "
            "copies, and its dual integrates the difference: the duals stop summing to zero "
            "and the average model drifts away",
        ),
    ),
)

register_algorithm(
    SparqConfig,
    Sparq,
    "local steps, event-triggered and compressed gossip (CHOCO-SGD with triggers)",
    family="sgd",
    decentralized=True,
    capabilities=replace(SGD.defaults, tuned=Ability((STEP, GAMMA)), dense_step=_gamma_on_dense_w),
)

register_algorithm(
    CentralizedConfig,
    lambda config, graph, context: Centralized(config),
    "one learner on all the data",
    family="sgd",
    decentralized=False,
    capabilities=replace(
        SGD.defaults,
        runtimes=Ability(SIMULATOR, "it is one learner: `murmur run centralized`"),
        varying=VARIES,
        blocks=False,
    ),
)

register_algorithm(
    AsysgConfig,
    _itself,
    "asynchronous SGD, parameter server applying stale gradients as they arrive",
    family="server",
    decentralized=False,
)

register_algorithm(
    SyncPsConfig,
    _itself,
    "synchronous parameter server: waits for all workers every update",
    family="server",
    decentralized=False,
    capabilities=replace(
        SERVER.defaults,
        faults=Ability(
            frozenset(),
            "its barrier waits for every worker, and its pushes and pulls have no model "
            "of lost messages or down links",
        ),
    ),
)

register_algorithm(
    AsysgInconConfig,
    _itself,
    "asynchronous SGD in shared memory, reads mixing recent versions",
    family="server",
    decentralized=False,
    capabilities=replace(
        SERVER.defaults,
        runtimes=Ability(
            SIMULATOR,
            "its workers share one model in memory: its real-process form is "
            "`murmur run hogwild`, processes on one machine",
        ),
    ),
)

register_algorithm(
    HogwildConfig,
    _itself,
    "Hogwild!: lock-free SGD of W processes on one shared-memory model",
    family="hogwild",
    decentralized=False,
)

register_algorithm(
    SsfnConfig,
    lambda config, graph, context: CentralSolver(config),
    "SSFN, layers solved by ADMM on all the data",
    family="layerwise",
    decentralized=False,
    capabilities=replace(
        LAYERWISE.defaults,
        runtimes=Ability(
            SIMULATOR, "it is one learner: `murmur run` it, or dssfn / dssfn-async distributed"
        ),
        faults=Ability(
            frozenset({"drop"}),
            "centralized SSFN is one learner, with no links to take down, whose crash "
            "would end the run",
        ),
    ),
)

register_algorithm(
    DssfnConfig,
    lambda config, graph, context: SyncSolver(config, graph),
    "decentralized SSFN, synchronous ADMM with gossip",
    family="layerwise",
    decentralized=True,
    capabilities=replace(
        LAYERWISE.defaults,
        faults=Ability(
            frozenset(),
            "synchronous dSSFN's consensus ADMM takes each gossip round's average as "
            "exact, and needs every node in every round",
        ),
        checkpoints=BOTH,
    ),
)

register_algorithm(
    DssfnAsyncConfig,
    lambda config, graph, context: AsyncSolver(config, graph),
    "decentralized SSFN, asynchronous ADMM (ARock)",
    family="layerwise",
    decentralized=True,
    capabilities=replace(
        LAYERWISE.defaults,
        faults=Ability(
            frozenset({"drop", "crashes"}),
            "asynchronous dSSFN has no model of links that go down and come back "
            "(faults.link_down counts synchronous rounds)",
        ),
    ),
)


def family_of(name: str) -> FamilyInfo:
    """The family of the algorithm called ``name``."""
    return FAMILIES[ALGORITHMS[name].kind]
