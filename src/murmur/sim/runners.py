"""The simulator's runners: synchronous SGD rounds and layer-wise training on the
virtual clock, from a prepared run to its outcome."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from murmur.algorithms.protocols import Algorithm, LayerSolver
from murmur.errors import UsageError
from murmur.metrics.counters import MessageCounters
from murmur.metrics.evaluation import measured_agents
from murmur.metrics.record_types import EvaluationRecord, FaultCounts, LayerRecord, SummaryExtra
from murmur.metrics.records import Outcome
from murmur.seeding import derive_seed, generator
from murmur.sim.events import ComputeTimes, EventLoop, LinkDelays
from murmur.sim.faults import FaultyAlgorithm, NetworkSchedule, VaryingGraph, crashed_agents
from murmur.sim.layer_network import SimulatedNetwork
from murmur.sim.lossy import LossyTransport
from murmur.sim.simulator import RoundClock, agents_evaluation
from murmur.sim.transport import InMemoryTransport
from murmur.training.layer_loop import (
    LayerHooks,
    LayerProgress,
    LayerSnapshot,
    layerwise_extra,
    train_layerwise_run,
)
from murmur.training.reducer import AgentTotals, RunFacts, run_outcome
from murmur.training.runs import OnRecord
from murmur.training.setup import LayerSetup, SgdSetup
from murmur.training.sgd_checkpoint import SgdSnapshot, resume_sgd, sgd_snapshot
from murmur.training.sgd_loop import SgdBlock, SgdHooks, SgdProgress, SgdTrained, train_sgd


def run_sgd(
    setup: SgdSetup,
    algorithm: Algorithm,
    on_record: OnRecord,
    progress: bool,
) -> Outcome:
    """Synchronous mini-batch algorithms, stepped by the simulator."""
    config = setup.config
    initial = _initial(setup)
    schedule = _schedule(setup)
    transport = _transport(setup, algorithm, schedule, initial)
    algorithm = _under_schedule(algorithm, schedule, transport, config.faults.rejoin_from)
    clock = RoundClock(
        compute=ComputeTimes(
            config.timing, setup.graph.agents, derive_seed(config.run.seed, "timing")
        ),
        links=LinkDelays(config.timing),
        flops_per_agent=6.0 * setup.initial.shape[1] * setup.problem.sampler.batch_size,
    )
    # A run resumed from its last iteration's checkpoint makes no record of its own.
    records: list[EvaluationRecord] = list(setup.checkpoints.kept if setup.checkpoints else [])

    measured = _measured_agents(setup)

    def keep(record: EvaluationRecord) -> None:
        record.update(_fault_counts(transport, schedule))
        if schedule is not None and schedule.crashed:
            alive = schedule.alive if measured is None else schedule.alive[measured]
            record.update(_live_accuracy(record, alive.tolist()))
        records.append(record)
        on_record(record)

    def snapshot(at: SgdProgress) -> SgdSnapshot:
        problem = setup.problem
        saved = sgd_snapshot(at, transport, problem.sampler, problem.model.statistics)
        saved["schedule"] = schedule.state_dict() if schedule is not None else None
        saved["clock"] = clock.compute.state_dict()
        return saved

    checkpoints = setup.checkpoints
    resumed = checkpoints.resumed if checkpoints is not None else None
    start = None
    if resumed is not None:
        start = _resume(resumed, setup, algorithm, transport, schedule, clock, initial)
    trained = train_sgd(
        SgdBlock(setup.problem, algorithm, transport, initial, setup.problem.sampler.next),
        config.run.iterations,
        config.run.eval_every,
        agents_evaluation(setup.problem, transport, measured, keep),
        SgdHooks(
            round_seconds=clock.round_seconds,
            checkpoints=checkpoints,
            snapshot=snapshot,
            stop=setup.stop_requested,
        ),
        progress=progress,
        start=start,
    )
    return _sgd_outcome(setup, trained, records, _fault_counts(transport, schedule), transport)


def _initial(setup: SgdSetup) -> torch.Tensor:
    """The agents' initial parameters where the run computes: on a GPU every agent's
    parameters, the algorithm's state, the mailboxes and the counters live there."""
    device = setup.problem.model.device
    if device is None:
        return setup.initial
    return setup.initial[:1].to(device).expand(setup.initial.shape[0], -1)


def _measured_agents(setup: SgdSetup) -> torch.Tensor | None:
    """The agents each evaluation measures (None: all of them; ``run.eval_agents``)."""
    if not setup.plan.decentralized:
        return None
    run = setup.config.run
    return measured_agents(run.eval_agents, setup.graph.agents, run.seed)


def _under_schedule(
    algorithm: Algorithm,
    schedule: NetworkSchedule | None,
    transport: InMemoryTransport | LossyTransport,
    rejoin_from: str,
) -> Algorithm:
    """``algorithm`` stepped under the schedule's rounds, where the run has one: its
    faults through the per-edge transport, or only its graphs through the lossless one."""
    if schedule is None:
        return algorithm
    if isinstance(transport, LossyTransport):
        return FaultyAlgorithm(algorithm, schedule, transport, rejoin_from)
    return VaryingGraph(algorithm, schedule, transport)


def _sgd_outcome(
    setup: SgdSetup,
    trained: SgdTrained,
    records: list[EvaluationRecord],
    faults: FaultCounts,
    transport: InMemoryTransport | LossyTransport,
) -> Outcome:
    """What a simulated SGD run hands back: its last record and totals."""
    iterations = trained.iterations  # fewer than run.iterations where a rule stopped it
    outcome = run_outcome(
        records[-1],
        AgentTotals.of(transport.counters),
        RunFacts(
            topology=_topology_name(setup) if setup.plan.decentralized else "none",
            iterations=iterations,
            train_seconds=trained.train_seconds,
            samples=trained.samples,
            rounds=iterations,
        ),
        parameters=trained.params.cpu(),
        extra={
            "virtual_seconds": trained.virtual_seconds,
            **faults,
            **_live(records[-1]),
            **_measured(records[-1]),
            **_compile_fallback(transport),
        },
    )
    statistics = setup.problem.model.statistics
    if statistics is not None:
        outcome.statistics = statistics.final(trained.params.shape[0])
    return outcome


def _measured(record: EvaluationRecord) -> SummaryExtra:
    """The sampled agents a record measured, for the summary (nothing: all of them)."""
    if "measured_agents" in record:
        return {"measured_agents": record["measured_agents"]}
    return {}


def _resume(
    checkpoint: dict[str, Any],
    setup: SgdSetup,
    algorithm: Algorithm,
    transport: InMemoryTransport | LossyTransport,
    schedule: NetworkSchedule | None,
    clock: RoundClock,
    initial: torch.Tensor,
) -> SgdProgress:
    """Put the simulator where ``checkpoint`` left it: the SGD family's state
    (:func:`~murmur.training.sgd_checkpoint.resume_sgd`), the fault schedule and the
    clock; the loop's progress from there."""
    saved = checkpoint["state"]
    try:
        if schedule is not None:
            schedule.load_state_dict(saved["schedule"])
        clock.compute.load_state_dict(saved["clock"])
    except (KeyError, TypeError, ValueError, RuntimeError) as error:
        raise UsageError(f"the checkpoint does not fit this run: {error}") from None
    problem = setup.problem
    return resume_sgd(
        saved,
        checkpoint["done"],
        algorithm,
        initial,
        transport,
        problem.sampler,
        statistics=problem.model.statistics,
    )


def _compile_fallback(transport: InMemoryTransport | LossyTransport) -> SummaryExtra:
    """Why a compiled run stepped eagerly after all, for the summary (nothing: it did
    not, or was not compiled)."""
    reason = transport.compile_fallback
    return {"compile_fallback": reason} if reason is not None else {}


def _topology_name(setup: SgdSetup) -> str:
    """The graph's name, and how it varies: ``matching(complete) every 1``."""
    topology = setup.config.topology
    if topology.varying == "none":
        return setup.graph.name
    return f"{topology.varying}({setup.graph.name}) every {topology.every}"


def _schedule(setup: SgdSetup) -> NetworkSchedule | None:
    """The rounds of a decentralized run whose links fail, agents crash or graph
    varies, where the plan schedules them; None for any other run (centralized SGD
    never crashes)."""
    if not setup.plan.scheduled:
        return None
    config = setup.config
    return NetworkSchedule(config.faults, config.topology, setup.graph, config.run.seed)


def _transport(
    setup: SgdSetup,
    algorithm: Algorithm,
    schedule: NetworkSchedule | None,
    initial: torch.Tensor,
) -> InMemoryTransport | LossyTransport:
    """Lossless delivery over a fixed graph, or one mailbox per directed edge (of every
    link the schedule may use) when messages get lost or the rounds change, as the
    plan chose."""
    sent = algorithm.initial_sent(initial)
    plan = setup.plan
    if plan.transport == "in-memory":
        return InMemoryTransport(setup.graph, sent, compiled=plan.compiled)
    links = schedule.links if schedule is not None else setup.graph
    stream = generator(plan.config.run.seed, "faults")
    faults = plan.config.faults
    return LossyTransport(links, sent, faults.drop, stream, resend=faults.resend)


def _fault_counts(
    transport: InMemoryTransport | LossyTransport, schedule: NetworkSchedule | None
) -> FaultCounts:
    """What the records and summary.json count of the faults: nothing without them."""
    counts: FaultCounts = {}
    if isinstance(transport, LossyTransport):
        counts["dropped_messages"] = transport.dropped
    if schedule is not None:
        counts.update(schedule.counts())
    return counts


def _live(record: EvaluationRecord) -> FaultCounts:
    """The live accuracies of ``record``, where it has them (a run with crashes)."""
    live: FaultCounts = {}
    if "live_accuracy_mean" in record:
        live["live_accuracy_mean"] = record["live_accuracy_mean"]
    if "live_accuracy_min" in record:
        live["live_accuracy_min"] = record["live_accuracy_min"]
    return live


def _live_accuracy(record: EvaluationRecord, alive: list[bool]) -> FaultCounts:
    """Mean and lowest test accuracy of the agents alive now (None for regression)."""
    accuracy = record.get("test_accuracy")
    if accuracy is None:
        return {"live_accuracy_mean": None, "live_accuracy_min": None}
    live = [value for value, up in zip(accuracy, alive, strict=True) if up]
    return {"live_accuracy_mean": sum(live) / len(live), "live_accuracy_min": min(live)}


def run_layerwise(
    setup: LayerSetup,
    solver: LayerSolver,
    on_record: Callable[[LayerRecord], None],
    progress: bool,
) -> Outcome:
    """SSFN and its decentralized forms, layer by layer on the virtual clock."""
    config, graph = setup.config, setup.graph
    drop = config.faults.drop
    network = _network(setup)
    records: list[EvaluationRecord] = list(setup.checkpoints.kept if setup.checkpoints else [])

    def faults() -> FaultCounts:
        counts: FaultCounts = {"dropped_messages": network.dropped} if drop > 0 else {}
        if config.faults.crash_count > 0:
            counts["crashed_agents"] = len(network.down)
        return counts

    def keep(record: LayerRecord) -> None:
        record.update(faults())
        if config.faults.crash_count > 0:
            alive = [node not in network.down for node in range(graph.agents)]
            record.update(_live_accuracy(record, alive))
        records.append(record)
        on_record(record)

    start = _resume_layers(setup, network)

    def snapshot(at: LayerProgress) -> LayerSnapshot:
        return {"layers": at.to_plain(), "network": network.state_dict()}

    hooks = LayerHooks(
        on_record=keep,
        checkpoints=setup.checkpoints,
        snapshot=snapshot,
        stop=setup.stop_requested,
    )
    trained = train_layerwise_run(setup, solver, network, setup.shards, hooks, progress, start)
    decentralized = setup.plan.decentralized
    return run_outcome(
        trained.last_record,
        AgentTotals.of(network.counters),
        RunFacts(
            topology=graph.name if decentralized else "none",
            iterations=trained.admm_iterations,
            train_seconds=trained.train_seconds,
            samples=int(sum(shard.numel() for shard in setup.shards)),
        ),
        parameters=trained.outputs,
        extra={
            "virtual_seconds": _virtual_seconds(trained.virtual_seconds),
            **layerwise_extra(trained, trained.records, graph, decentralized),
            **faults(),
            **_live(records[-1]),
        },
    )


def _virtual_seconds(seconds: float | None) -> float:
    """The virtual time a simulated layer-wise run took (its network has a clock)."""
    if seconds is None:
        raise RuntimeError("a simulated layer-wise run ended without its virtual time")
    return seconds


def _network(setup: LayerSetup) -> SimulatedNetwork:
    """The simulated network of a layer-wise run: its clock, links, lost pushes and
    crashed nodes."""
    config, graph = setup.config, setup.graph
    drop = config.faults.drop
    return SimulatedNetwork(
        graph=graph,
        counters=MessageCounters(graph.agents),
        clock=EventLoop(),
        compute=ComputeTimes(config.timing, graph.agents, derive_seed(config.run.seed, "timing")),
        links=LinkDelays(config.timing),
        drop=drop,
        faults=generator(config.run.seed, "faults") if drop > 0 else None,
        crashes=(
            crashed_agents(config.faults, graph.agents, config.run.seed),
            config.faults.crash_at,
        ),
    )


def _resume_layers(setup: LayerSetup, network: SimulatedNetwork) -> LayerProgress | None:
    """Put ``network`` where the run's checkpoint left it; the layers done by then
    (None: the run starts afresh)."""
    checkpoint = setup.checkpoints.resumed if setup.checkpoints is not None else None
    if checkpoint is None:
        return None
    try:
        network.load_state_dict(checkpoint["state"]["network"])
        return LayerProgress.from_plain(checkpoint["state"]["layers"])
    except (KeyError, TypeError, ValueError, RuntimeError) as error:
        raise UsageError(f"the checkpoint does not fit this run: {error}") from None
