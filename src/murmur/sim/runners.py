"""The simulator's runners: synchronous SGD rounds and layer-wise training on the
virtual clock, from a prepared run to its outcome."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from murmur.algorithms.protocols import Algorithm, LayerSolver
from murmur.metrics.counters import MessageCounters
from murmur.metrics.evaluation import accuracy_summary
from murmur.metrics.records import Outcome
from murmur.registry import ALGORITHMS
from murmur.seeding import derive_seed
from murmur.sim.events import ComputeTimes, EventLoop, LinkDelays
from murmur.sim.layerwise import SimulatedNetwork
from murmur.sim.simulator import RoundClock, simulate
from murmur.sim.transport import InMemoryTransport
from murmur.training.layerwise import train_layerwise_run
from murmur.training.setup import Setup


def run_sgd(
    setup: Setup,
    algorithm: Algorithm,
    on_record: Callable[[dict[str, Any]], None],
    progress: bool,
) -> Outcome:
    """Synchronous mini-batch algorithms, stepped by the simulator."""
    config = setup.config
    spec = ALGORITHMS[config.algorithm.name]
    transport = InMemoryTransport(setup.graph, setup.initial)
    parameters = setup.initial.shape[1]
    clock = RoundClock(
        compute=ComputeTimes(
            config.timing, setup.graph.agents, derive_seed(config.run.seed, "timing")
        ),
        links=LinkDelays(config.timing),
        flops_per_agent=6.0 * parameters * setup.problem.sampler.batch_size,
        message_bytes=parameters * setup.initial.element_size(),
    )
    trained = simulate(
        setup.problem,
        algorithm,
        transport,
        setup.initial,
        config.run.iterations,
        config.run.eval_every,
        on_record,
        progress=progress,
        clock=clock,
    )
    agents = setup.graph.agents
    counters = transport.counters
    return Outcome(
        agents=agents,
        topology=setup.graph.name if spec.decentralized else "none",
        iterations=config.run.iterations,
        last_record=trained.last_record,
        events_per_agent=counters.events_per_agent.tolist(),
        messages=counters.messages,
        bytes=counters.bytes,
        train_seconds=trained.train_seconds,
        samples=trained.samples,
        communication_saving=1.0 - counters.events / (agents * config.run.iterations),
        parameters=trained.params,
        extra={"virtual_seconds": trained.virtual_seconds},
    )


def run_layerwise(
    setup: Setup,
    solver: LayerSolver,
    on_record: Callable[[dict[str, Any]], None],
    progress: bool,
) -> Outcome:
    """SSFN and its decentralized forms, layer by layer on the virtual clock."""
    config, graph = setup.config, setup.graph
    network = SimulatedNetwork(
        graph=graph,
        counters=MessageCounters(graph.agents),
        clock=EventLoop(),
        compute=ComputeTimes(config.timing, graph.agents, derive_seed(config.run.seed, "timing")),
        links=LinkDelays(config.timing),
    )
    trained = train_layerwise_run(setup, solver, network, setup.shards, on_record, progress)
    last = trained.last_record
    counters = network.counters
    decentralized = ALGORITHMS[config.algorithm.name].decentralized
    return Outcome(
        agents=graph.agents,
        topology=graph.name if decentralized else "none",
        iterations=trained.admm_iterations,
        last_record=last,
        events_per_agent=counters.events_per_agent.tolist(),
        messages=counters.messages,
        bytes=counters.bytes,
        train_seconds=trained.train_seconds,
        samples=int(sum(shard.numel() for shard in setup.shards)),
        parameters=trained.outputs,
        extra={
            "virtual_seconds": trained.virtual_seconds,
            "layers": trained.sizes,
            "train_accuracy": accuracy_summary(last["train_accuracy"]),
            "train_nme": last["train_nme"],
            "admm_iterations": trained.admm_iterations,
            "mean_degree": float(graph.degrees().double().mean()) if decentralized else 0.0,
        },
    )
