"""Names -> algorithms: the one place that knows every algorithm by name, how it is
built, and which runtimes run it (with what to run instead where one does not)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeVar

from murmur.algorithms.arock import AsyncSolver, DssfnAsyncConfig
from murmur.algorithms.asysg import AsysgConfig, AsysgInconConfig, SyncPsConfig, WorkersConfig
from murmur.algorithms.centralized import Centralized, CentralizedConfig
from murmur.algorithms.choco import Choco, ChocoConfig
from murmur.algorithms.detsgrad import Detsgrad, DetsgradConfig
from murmur.algorithms.detsgrad_gt import DetsgradGt, DetsgradGtConfig
from murmur.algorithms.dsgd import Dsgd, DsgdConfig
from murmur.algorithms.dssfn import DssfnConfig, SyncSolver
from murmur.algorithms.hogwild import HogwildConfig
from murmur.algorithms.protocols import Algorithm, BuildContext, LayerSolver
from murmur.algorithms.sparq import Sparq, SparqConfig
from murmur.algorithms.ssfn import CentralSolver, SsfnConfig
from murmur.errors import UsageError
from murmur.sections import AlgorithmConfig, FaultsConfig, RunConfig
from murmur.topology import Graph

C = TypeVar("C", bound=AlgorithmConfig)
Kind = Literal["sgd", "layerwise", "server", "hogwild"]
Runtime = Literal["simulator", "distributed"]
Built = Algorithm | LayerSolver | WorkersConfig | HogwildConfig
"""What a spec builds, by kind: an ``Algorithm`` (sgd), a ``LayerSolver``
(layerwise), or the workers' config from which the runner builds the parameter
server or the shared-memory processes (server, hogwild), since those need the
run's initial model and length too."""


@dataclass(frozen=True)
class AlgorithmSpec:
    """How to build one algorithm, what it needs from the run, where it runs."""

    config: type[AlgorithmConfig]
    build: Callable[[AlgorithmConfig, Graph, BuildContext], Built]
    summary: str
    decentralized: bool
    """False: one learner on all data, or workers sharing one model."""
    kind: Kind = "sgd"
    """How it is trained: ``sgd``: synchronous rounds; ``layerwise``: SSFN;
    ``server``: workers and a parameter server; ``hogwild``: real processes on one
    shared-memory model (``murmur run`` starts them itself)."""
    runtimes: tuple[Runtime, ...] = ("simulator", "distributed")
    varying: bool = False
    """Whether it runs on a time-varying graph (``topology.varying``): it derives its
    mixing weights from each iteration's graph, or, being one learner, has none."""
    instead: str = ""
    """Where the distributed runtime does not run it: why, and what to run instead."""

    def processes(self, config: AlgorithmConfig, agents: int) -> int:
        """Ranks a distributed run needs: one per agent, or the workers and a server."""
        if self.kind == "server" and isinstance(config, WorkersConfig):
            return config.workers + 1
        return agents


def _detsgrad(config: AlgorithmConfig, graph: Graph, context: BuildContext) -> Built:
    return Detsgrad(_as(config, DetsgradConfig), graph, context)


def _detsgrad_gt(config: AlgorithmConfig, graph: Graph, context: BuildContext) -> Built:
    return DetsgradGt(_as(config, DetsgradGtConfig), graph, context)


def _choco(config: AlgorithmConfig, graph: Graph, context: BuildContext) -> Built:
    return Choco(_as(config, ChocoConfig), graph, context)


def _sparq(config: AlgorithmConfig, graph: Graph, context: BuildContext) -> Built:
    return Sparq(_as(config, SparqConfig), graph, context)


def _dsgd(config: AlgorithmConfig, graph: Graph, context: BuildContext) -> Built:
    return Dsgd(_as(config, DsgdConfig), graph)


def _centralized(config: AlgorithmConfig, graph: Graph, context: BuildContext) -> Built:
    return Centralized(_as(config, CentralizedConfig))


def _workers(config: AlgorithmConfig, graph: Graph, context: BuildContext) -> Built:
    return _as(config, WorkersConfig)


def _hogwild(config: AlgorithmConfig, graph: Graph, context: BuildContext) -> Built:
    return _as(config, HogwildConfig)


def _ssfn(config: AlgorithmConfig, graph: Graph, context: BuildContext) -> Built:
    return CentralSolver(_as(config, SsfnConfig))


def _dssfn(config: AlgorithmConfig, graph: Graph, context: BuildContext) -> Built:
    return SyncSolver(_as(config, DssfnConfig), graph)


def _dssfn_async(config: AlgorithmConfig, graph: Graph, context: BuildContext) -> Built:
    return AsyncSolver(_as(config, DssfnAsyncConfig), graph)


def _as(config: AlgorithmConfig, cls: type[C]) -> C:
    if not isinstance(config, cls):
        raise TypeError(f"expected a {cls.__name__}, not a {type(config).__name__}")
    return config


_ONE_LEARNER = ("simulator",)

ALGORITHMS: dict[str, AlgorithmSpec] = {
    "detsgrad": AlgorithmSpec(
        DetsgradConfig,
        _detsgrad,
        "event-triggered decentralized SGD",
        decentralized=True,
        varying=True,
    ),
    "dsgd": AlgorithmSpec(
        DsgdConfig,
        _dsgd,
        "decentralized SGD, every agent sends every step",
        decentralized=True,
        varying=True,
    ),
    "detsgrad-gt": AlgorithmSpec(
        DetsgradGtConfig,
        _detsgrad_gt,
        "event-triggered decentralized SGD with gradient tracking",
        decentralized=True,
    ),
    "choco-sgd": AlgorithmSpec(
        ChocoConfig,
        _choco,
        "decentralized SGD with compressed gossip of differences to public estimates",
        decentralized=True,
    ),
    "sparq-sgd": AlgorithmSpec(
        SparqConfig,
        _sparq,
        "local steps, event-triggered and compressed gossip (CHOCO-SGD with triggers)",
        decentralized=True,
    ),
    "centralized": AlgorithmSpec(
        CentralizedConfig,
        _centralized,
        "one learner on all the data",
        decentralized=False,
        runtimes=_ONE_LEARNER,
        instead="it is one learner: `murmur run centralized`",
        varying=True,
    ),
    "asysg-con": AlgorithmSpec(
        AsysgConfig,
        _workers,
        "asynchronous SGD, parameter server applying stale gradients as they arrive",
        decentralized=False,
        kind="server",
    ),
    "sync-ps": AlgorithmSpec(
        SyncPsConfig,
        _workers,
        "synchronous parameter server: waits for all workers every update",
        decentralized=False,
        kind="server",
    ),
    "asysg-incon": AlgorithmSpec(
        AsysgInconConfig,
        _workers,
        "asynchronous SGD in shared memory, reads mixing recent versions",
        decentralized=False,
        kind="server",
        runtimes=_ONE_LEARNER,
        instead="its workers share one model in memory: its real-process form is "
        "`murmur run hogwild`, processes on one machine",
    ),
    "hogwild": AlgorithmSpec(
        HogwildConfig,
        _hogwild,
        "Hogwild!: lock-free SGD of W processes on one shared-memory model",
        decentralized=False,
        kind="hogwild",
        runtimes=_ONE_LEARNER,
        instead="it already runs real processes on one machine: `murmur run hogwild`",
    ),
    "ssfn": AlgorithmSpec(
        SsfnConfig,
        _ssfn,
        "SSFN, layers solved by ADMM on all the data",
        decentralized=False,
        kind="layerwise",
        runtimes=_ONE_LEARNER,
        instead="it is one learner: `murmur run` it, or dssfn / dssfn-async distributed",
    ),
    "dssfn": AlgorithmSpec(
        DssfnConfig,
        _dssfn,
        "decentralized SSFN, synchronous ADMM with gossip",
        decentralized=True,
        kind="layerwise",
    ),
    "dssfn-async": AlgorithmSpec(
        DssfnAsyncConfig,
        _dssfn_async,
        "decentralized SSFN, asynchronous ADMM (ARock)",
        decentralized=True,
        kind="layerwise",
    ),
}


def check_runtime(name: str, runtime: Runtime) -> AlgorithmSpec:
    """The spec of ``name``; UsageError, saying what to run instead, unless ``runtime``
    runs it."""
    spec = ALGORITHMS[name]
    if runtime not in spec.runtimes:
        raise UsageError(f"the {runtime} runtime does not run {name}: {spec.instead}")
    return spec


def check_faults(name: str, faults: FaultsConfig, runtime: Runtime, varying: str = "none") -> None:
    """UsageError, saying why and what runs them, unless ``runtime`` can inject
    ``faults`` into a run of ``name`` and vary its graph as ``varying``
    (``topology.varying``) asks: only the simulator can. Synchronous SGD rounds
    take every fault (centralized SGD sends nothing and never crashes, so that a
    comparison with it runs under the same faults); asynchronous dSSFN loses
    pushes (centralized SSFN sends none); a time-varying graph needs an algorithm
    that derives its weights from each iteration's graph."""
    asked = [faults.describe()] if faults.active else []
    if varying != "none":
        asked.append(f"topology.varying = {varying}")
    if not asked:
        return
    what = ", ".join(asked)
    injected = {"drop": faults.drop > 0, "link_down": faults.link_down > 0}
    injected["crashes"] = faults.crash_count > 0
    wanted = [fault for fault, on in injected.items() if on]
    faulty = ", ".join(
        other
        for other, spec in ALGORITHMS.items()
        if (spec.decentralized or spec.kind == "server")
        and all(_takes_fault(other, fault) for fault in wanted)
    )
    if runtime == "distributed":
        raise UsageError(
            f"the distributed runtime does not inject faults ({what}): "
            f"its messages travel for real; run {faulty} in the simulator with `murmur run`"
        )
    spec = ALGORITHMS[name]
    if not all(_takes_fault(name, fault) for fault in wanted):
        raise UsageError(
            f"{name} cannot run with {faults.describe()}: {_no_faults(name)}; "
            f"the simulator injects them into {faulty}"
        )
    if spec.kind == "layerwise" and faults.crash_count > 0:
        _check_layer_crashes(faults)
    if varying != "none" and not spec.varying:
        varied = ", ".join(
            name for name, spec in ALGORITHMS.items() if spec.varying and spec.decentralized
        )
        why = (
            "its mixing weights and consensus step are fixed for the run's graph when it is built"
            if spec.kind == "sgd"
            else _NO_VARYING[spec.kind]
        )
        raise UsageError(
            f"{name} cannot run with topology.varying = {varying}: {why}; "
            f"the simulator varies the graph of {varied}"
        )


CHECKPOINTED: tuple[Kind, ...] = ("sgd", "layerwise", "server")
"""The kinds of algorithm whose simulated runs save checkpoints and resume."""


DISTRIBUTED_LAYERWISE_CHECKPOINTED = ("dssfn",)
"""The layer-wise algorithms whose distributed runs save checkpoints and continue
from them: synchronous dSSFN, whose ranks finish every layer together."""


def checkpointed_distributed(name: str) -> bool:
    """Whether the distributed runtime saves checkpoints of ``name`` and resumes it."""
    kind = ALGORITHMS[name].kind
    return kind in ("sgd", "server") or name in DISTRIBUTED_LAYERWISE_CHECKPOINTED


def distributed_checkpointed_names() -> str:
    """The algorithms the distributed runtime checkpoints, for a message."""
    synchronous = ", ".join(
        other
        for other, spec in ALGORITHMS.items()
        if spec.kind == "sgd" and "distributed" in spec.runtimes
    )
    layerwise = ", ".join(DISTRIBUTED_LAYERWISE_CHECKPOINTED)
    servers = ", ".join(
        other
        for other, spec in ALGORITHMS.items()
        if spec.kind == "server" and "distributed" in spec.runtimes
    )
    return (
        f"synchronous SGD ({synchronous}), synchronous dSSFN ({layerwise}) "
        f"and the parameter server ({servers})"
    )


def check_checkpoints(name: str, run: RunConfig, runtime: Runtime) -> None:
    """UsageError unless ``runtime`` saves checkpoints of a run of ``name``, when
    ``run.checkpoint_every`` asks for them."""
    if run.checkpoint_every == 0:
        return
    if runtime == "distributed" and not checkpointed_distributed(name):
        raise UsageError(
            f"the distributed runtime saves no checkpoints of {name} (run.checkpoint_every = "
            f"{run.checkpoint_every}), only of {distributed_checkpointed_names()}; set it to 0, "
            "or run in the simulator with `murmur run`"
        )
    if ALGORITHMS[name].kind not in CHECKPOINTED:
        kinds = ", ".join(other for other, spec in ALGORITHMS.items() if spec.kind in CHECKPOINTED)
        raise UsageError(
            f"{name} saves no checkpoints (run.checkpoint_every = {run.checkpoint_every}); "
            f"set it to 0: the simulator saves checkpoints of {kinds}"
        )


def check_compile(name: str, run: RunConfig, runtime: Runtime) -> None:
    """UsageError when ``run.compile = true`` asks for a fused step that ``runtime``
    does not take for ``name``: only the simulator's synchronous SGD rounds compile."""
    if run.compile is not True:
        return
    if runtime == "distributed":
        raise UsageError(
            "run.compile = true is for the simulator: the distributed runtime steps eagerly; "
            'set run.compile = "auto" or false'
        )
    if ALGORITHMS[name].kind != "sgd":
        compiled = ", ".join(other for other, spec in ALGORITHMS.items() if spec.kind == "sgd")
        raise UsageError(
            f"run.compile = true has no compiled step for {name}, only for {compiled}; "
            'set run.compile = "auto" or false'
        )


_BEYOND_SGD: dict[str, tuple[str, ...]] = {
    "drop": ("ssfn", "dssfn-async"),
    "link_down": (),
    "crashes": ("asysg-con", "asysg-incon", "dssfn-async"),
}
"""Besides synchronous SGD, the algorithms that run under each fault: centralized SSFN
sends nothing to lose, asynchronous dSSFN's nodes act on whatever news arrives, and
an asynchronous server's updates fill from whichever workers push."""

_WHY_NOT: dict[str, str] = {
    "dssfn": "synchronous dSSFN's consensus ADMM takes each gossip round's average as "
    "exact, and needs every node in every round",
    "ssfn": "centralized SSFN is one learner, with no links to take down, whose crash "
    "would end the run",
    "dssfn-async": "asynchronous dSSFN has no model of links that go down and come back "
    "(faults.link_down counts synchronous rounds)",
    "sync-ps": "its barrier waits for every worker, and its pushes and pulls have no model "
    "of lost messages or down links",
    "server": "a parameter server's pushes and pulls have no model of lost messages or down links",
    "hogwild": "its workers are real processes that share one model in memory",
}
"""Why an algorithm (or, failing its name, its kind) refuses the faults it refuses."""


def _check_layer_crashes(faults: FaultsConfig) -> None:
    """Layer-wise nodes crash at the start of a layer after the first, for good."""
    if faults.crash_at < 1:
        raise UsageError(
            "faults.crash_at counts layers in a layer-wise run and must be at least 1: a "
            "node that crashes before layer 0 never had a model"
        )
    if faults.rejoin_at > 0:
        raise UsageError(
            "faults.rejoin_at must be 0 in a layer-wise run: a crashed node lacks the "
            "features of the layers it missed and cannot rejoin"
        )


_NO_VARYING: dict[Kind, str] = {
    "layerwise": "layer-wise SSFN solves each layer over one fixed graph",
    "server": "its workers talk to one server, over no graph",
    "hogwild": "its workers share one model in memory, over no graph",
}
"""Why each kind of algorithm but synchronous SGD refuses a time-varying graph."""


def _takes_fault(name: str, fault: str) -> bool:
    return ALGORITHMS[name].kind == "sgd" or name in _BEYOND_SGD[fault]


def _no_faults(name: str) -> str:
    """Why ``name`` refuses the faults it refuses."""
    return _WHY_NOT.get(name) or _WHY_NOT[ALGORITHMS[name].kind]
