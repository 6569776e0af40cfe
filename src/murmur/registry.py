"""Names -> builders: the one place that knows every algorithm by name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from murmur.algorithms.base import Algorithm
from murmur.algorithms.centralized import Centralized, CentralizedConfig
from murmur.algorithms.detsgrad import Detsgrad, DetsgradConfig
from murmur.algorithms.dsgd import Dsgd, DsgdConfig
from murmur.config import AlgorithmConfig
from murmur.topology import Graph


@dataclass(frozen=True)
class AlgorithmSpec:
    """How to build one algorithm, and what it needs from the run."""

    config: type[AlgorithmConfig]
    build: Callable[[AlgorithmConfig, Graph | None], Algorithm]
    summary: str
    decentralized: bool
    """False: one learner on all data (agents x batch_size samples per step)."""


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
}
