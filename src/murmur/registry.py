"""Names -> builders: the one place that knows every algorithm by name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from murmur.algorithms.arock import AsyncSolver, DssfnAsyncConfig
from murmur.algorithms.asysg import AsysgConfig, AsysgInconConfig, SyncPsConfig
from murmur.algorithms.centralized import Centralized, CentralizedConfig
from murmur.algorithms.detsgrad import Detsgrad, DetsgradConfig
from murmur.algorithms.dsgd import Dsgd, DsgdConfig
from murmur.algorithms.dssfn import DssfnConfig, SyncSolver
from murmur.algorithms.hogwild import HogwildConfig
from murmur.algorithms.ssfn import CentralSolver, SsfnConfig
from murmur.config import AlgorithmConfig
from murmur.topology import Graph


@dataclass(frozen=True)
class AlgorithmSpec:
    """How to build one algorithm, and what it needs from the run."""

    config: type[AlgorithmConfig]
    build: Callable[[AlgorithmConfig, Graph], Any]
    """An ``Algorithm`` (kind ``sgd``) or a ``LayerSolver`` (kind ``layerwise``)."""
    summary: str
    decentralized: bool
    """False: one learner on all data (agents x batch_size samples per step)."""
    kind: Literal["sgd", "layerwise", "server", "hogwild"] = "sgd"
    """How it is trained (``experiment._RUNNERS``): ``sgd``: synchronous rounds stepped
    by the simulator; ``layerwise``: SSFN; ``server``: workers and a parameter server
    on the virtual clock; ``hogwild``: real processes on one shared-memory model."""


ALGORITHMS: dict[str, AlgorithmSpec] = {
    "detsgrad": AlgorithmSpec(
        DetsgradConfig,
        lambda config, graph: Detsgrad(config, graph),
        "event-triggered decentralized SGD",
        decentralized=True,
    ),
    "dsgd": AlgorithmSpec(
        DsgdConfig,
        lambda config, graph: Dsgd(config, graph),
        "decentralized SGD, every agent sends every step",
        decentralized=True,
    ),
    "centralized": AlgorithmSpec(
        CentralizedConfig,
        lambda config, graph: Centralized(config),
        "one learner on all the data",
        decentralized=False,
    ),
    "asysg-con": AlgorithmSpec(
        AsysgConfig,
        lambda config, graph: config,
        "asynchronous SGD, parameter server applying stale gradients as they arrive",
        decentralized=False,
        kind="server",
    ),
    "sync-ps": AlgorithmSpec(
        SyncPsConfig,
        lambda config, graph: config,
        "synchronous parameter server: waits for all workers every update",
        decentralized=False,
        kind="server",
    ),
    "asysg-incon": AlgorithmSpec(
        AsysgInconConfig,
        lambda config, graph: config,
        "asynchronous SGD in shared memory, reads mixing recent versions",
        decentralized=False,
        kind="server",
    ),
    "hogwild": AlgorithmSpec(
        HogwildConfig,
        lambda config, graph: config,
        "Hogwild!: lock-free SGD of W processes on one shared-memory model",
        decentralized=False,
        kind="hogwild",
    ),
    "ssfn": AlgorithmSpec(
        SsfnConfig,
        lambda config, graph: CentralSolver(config),
        "SSFN, layers solved by ADMM on all the data",
        decentralized=False,
        kind="layerwise",
    ),
    "dssfn": AlgorithmSpec(
        DssfnConfig,
        lambda config, graph: SyncSolver(config, graph),
        "decentralized SSFN, synchronous ADMM with gossip",
        decentralized=True,
        kind="layerwise",
    ),
    "dssfn-async": AlgorithmSpec(
        DssfnAsyncConfig,
        lambda config, graph: AsyncSolver(config, graph),
        "decentralized SSFN, asynchronous ADMM (ARock)",
        decentralized=True,
        kind="layerwise",
    ),
}
