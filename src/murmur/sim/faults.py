"""Link failures, crashed agents and time-varying graphs in the simulator.

Each iteration of a synchronous run, :class:`NetworkSchedule` says who talks to
whom, drawn from streams of the run's seed (the same seed replays the same
faults, whatever the algorithm):

- the graph of the iteration (``topology.varying``, from the ``"topology"``
  stream): the run's graph; every ``topology.every`` iterations a random maximal
  matching of its edges, one random edge of it, or the graph built again from a
  new seed (a new Erdos-Renyi graph). The algorithms derive their mixing weights
  from it (``transport.graph``), so a matching's pairs average with weight 1/2;
- links (``faults.link_down``, ``faults.link_up``, from the ``"links"`` stream):
  each link is a two-state Markov chain, up at the start; in every iteration an
  up link goes down with probability ``link_down`` and a down one comes back
  with probability ``link_up``, so a link is down a share
  link_down / (link_down + link_up) of the time, for 1 / link_up iterations on
  average;
- crashes (``faults.crashes``, the agents drawn from the ``"crashes"`` stream
  when only their number is given): the crashed agents miss every step from
  ``faults.crash_at`` until ``faults.rejoin_at`` (never when 0).

A directed edge is active when it is in the iteration's graph, its link is up
and both its ends are alive. The transport (:class:`~murmur.sim.lossy.LossyTransport`)
sends and counts messages over active edges only and moves the weight of every
inactive one to the diagonal of the mixing operator; :class:`FaultyAlgorithm`
wraps the algorithm so that a crashed agent computes nothing: its rows of the
state are put back after each step, so it keeps the model (and the trackers,
estimates) it had when it crashed, and its neighbours stop mixing with it, so
they are not dragged towards its frozen model. A rejoining agent restarts from
its own frozen state (``faults.rejoin_from = "own"``) or with a copy of the
model of its live neighbour of lowest index (``"neighbour"``; its other state,
such as DETSGRAD-GT's tracker, stays its own). Either way its neighbours hold
the last value it sent before it crashed, and an event-triggered agent sends
again once its model has moved that far from it.

The records count ``down_links`` (links down in the latest iteration),
``down_link_iterations`` (links down, summed over the iterations so far) and
``crashed_agents``; ``accuracy_mean`` / ``min`` / ``max`` stay over all agents,
crashed ones with their frozen models included, and ``live_accuracy_mean`` /
``live_accuracy_min`` are over the agents alive at the evaluation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from murmur.algorithms.protocols import Algorithm, Transport, Wrapped
from murmur.metrics.record_types import FaultCounts
from murmur.sections import FaultsConfig, TopologyConfig
from murmur.seeding import derive_seed, generator
from murmur.sim.lossy import LossyTransport
from murmur.sim.transport import InMemoryTransport
from murmur.topology import (
    Graph,
    complete,
    one_peer_exponential,
    random_edge,
    random_matching,
)
from murmur.training.setup import topology_graph


@dataclass(frozen=True)
class Round:
    """Who talks to whom in one iteration."""

    graph: Graph
    """The graph the agents talk over (before faults)."""
    active: torch.Tensor
    """Bool, one per directed edge of the schedule's ``links`` graph (its edges (i, j),
    then (j, i)): in ``graph``, link up, both ends alive."""
    alive: torch.Tensor
    """Bool, (agents,): not crashed."""
    rejoined: list[int]
    """Agents that come back in this iteration."""


class NetworkSchedule:
    """The rounds of a run, one per iteration, drawn in order; see the module docstring."""

    def __init__(
        self, faults: FaultsConfig, topology: TopologyConfig, graph: Graph, seed: int
    ) -> None:
        """``graph``: the run's graph; ``seed``: the run's seed."""
        self.faults = faults
        self.topology = topology
        self.graph = graph
        self.seed = seed
        resampled = topology.varying == "resample" and topology.graph == "erdos_renyi"
        self.links = complete(graph.agents) if resampled else graph
        """Every link an iteration's graph may use: the run's graph, or every pair when
        an Erdos-Renyi graph is drawn again; the transport keeps a mailbox per link."""
        self._keys = self.links.edges[:, 0] * graph.agents + self.links.edges[:, 1]
        self.down = torch.zeros(self.links.num_edges, dtype=torch.bool)
        """Links down now."""
        self.down_link_iterations = 0
        """Links down, summed over the iterations so far."""
        self.crashed = crashed_agents(faults, graph.agents, seed)
        """The agents that crash, sorted."""
        self.alive = torch.ones(graph.agents, dtype=torch.bool)
        self.current = graph
        self._link_stream = generator(seed, "links")
        self._topology_stream = generator(seed, "topology")
        self._draws = 0

    def round(self, iteration: int) -> Round:
        """The next iteration's round; call once per iteration, in order."""
        self._advance_graph(iteration)
        if self.faults.link_down > 0:
            chance = torch.rand(self.links.num_edges, generator=self._link_stream)
            self.down = torch.where(
                self.down, chance >= self.faults.link_up, chance < self.faults.link_down
            )
            self.down_link_iterations += int(self.down.sum())
        rejoined = self._crash_or_rejoin(iteration)
        left, right = self.links.edges[:, 0], self.links.edges[:, 1]
        active = self._in_current() & ~self.down & self.alive[left] & self.alive[right]
        return Round(self.current, torch.cat([active, active]), self.alive.clone(), rejoined)

    def graph_round(self, iteration: int) -> Graph:
        """The next iteration's graph alone, for a schedule whose only change is the graph
        (no link fails, no agent crashes): :meth:`round` without the masks it would
        compute, drawing the same graphs."""
        if self.faults.link_down > 0 or self.crashed:
            raise ValueError("graph_round is for schedules without failing links or crashes")
        self._advance_graph(iteration)
        return self.current

    def _advance_graph(self, iteration: int) -> None:
        """Draw the time-varying topology's next graph when one is due at ``iteration``."""
        if self.topology.varying != "none" and iteration % self.topology.every == 0:
            self.current = self._draw_graph()

    @property
    def crashed_now(self) -> int:
        """Agents crashed now."""
        return int((~self.alive).sum())

    def _crash_or_rejoin(self, iteration: int) -> list[int]:
        """Crash the agents at ``crash_at``, bring them back at ``rejoin_at``; the
        agents that come back now."""
        if not self.crashed:
            return []
        if iteration == self.faults.crash_at:
            self.alive[self.crashed] = False
        if self.faults.rejoin_at > 0 and iteration == self.faults.rejoin_at:
            self.alive[self.crashed] = True
            return list(self.crashed)
        return []

    def _draw_graph(self) -> Graph:
        """The next graph of a time-varying topology."""
        varying = self.topology.varying
        if varying == "matching":
            return random_matching(self.graph, self._topology_stream)
        if varying == "edge":
            return random_edge(self.graph, self._topology_stream)
        if varying == "one_peer":
            self._draws += 1
            return one_peer_exponential(self.graph, self._draws - 1)
        # "resample": the first graph is the run's own, then one per new seed.
        self._draws += 1
        if self._draws == 1:
            return self.graph
        return topology_graph(self.topology, derive_seed(self.seed, "graph", self._draws - 1))

    def _in_current(self) -> torch.Tensor:
        """Which links are edges of the current graph."""
        if self.current is self.links:
            return torch.ones(self.links.num_edges, dtype=torch.bool)
        agents = self.graph.agents
        keys = self.current.edges[:, 0] * agents + self.current.edges[:, 1]
        return torch.isin(self._keys, keys)

    def state_dict(self) -> dict[str, Any]:
        """Where the schedule stands between two iterations, for a checkpoint."""
        return {
            "down": self.down,
            "down_link_iterations": self.down_link_iterations,
            "alive": self.alive,
            "current": {
                "agents": self.current.agents,
                "edges": self.current.edges,
                "name": self.current.name,
            },
            "link_stream": self._link_stream.get_state(),
            "topology_stream": self._topology_stream.get_state(),
            "draws": self._draws,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`state_dict`."""
        self.down = state["down"].clone()
        self.down_link_iterations = state["down_link_iterations"]
        self.alive = state["alive"].clone()
        current = Graph(**state["current"])
        self.current = self.graph if current == self.graph else current
        self._link_stream.set_state(state["link_stream"])
        self._topology_stream.set_state(state["topology_stream"])
        self._draws = state["draws"]

    def counts(self) -> FaultCounts:
        """What the records and summary.json count of the links and crashes."""
        counts: FaultCounts = {}
        if self.faults.link_down > 0:
            counts["down_links"] = int(self.down.sum())
            counts["down_link_iterations"] = self.down_link_iterations
        if self.crashed:
            counts["crashed_agents"] = self.crashed_now
        return counts


def crashed_agents(faults: FaultsConfig, agents: int, seed: int) -> list[int]:
    """The agents (or workers) listed, or as many as asked drawn from the ``"crashes"``
    stream of run seed ``seed``, sorted."""
    if isinstance(faults.crashes, tuple):
        return sorted(faults.crashes)
    order = torch.randperm(agents, generator=generator(seed, "crashes"))
    return sorted(order[: faults.crashes].tolist())


class VaryingGraph(Wrapped):
    """An algorithm whose agents talk over each iteration's graph of a schedule through
    lossless delivery (an :class:`~murmur.sim.transport.InMemoryTransport`): where every
    agent sends its whole model to every neighbour at every step (DSGD), a neighbour
    holds the sender's latest value whatever graph came before, so no mailbox per edge
    is needed, and the numbers are those of the per-edge transport without losses."""

    def __init__(
        self, algorithm: Algorithm, schedule: NetworkSchedule, transport: InMemoryTransport
    ) -> None:
        super().__init__(algorithm)
        self.schedule = schedule
        self.transport = transport

    def step(self, state: Any, grads: torch.Tensor, iteration: int, transport: Transport) -> Any:
        self.transport.use_graph(self.schedule.graph_round(iteration))
        return self.algorithm.step(state, grads, iteration, transport)


class FaultyAlgorithm(Wrapped):
    """An algorithm stepped under a schedule's rounds: it tells the transport each
    round, and keeps crashed agents where they were; see the module docstring."""

    def __init__(
        self,
        algorithm: Algorithm,
        schedule: NetworkSchedule,
        transport: LossyTransport,
        rejoin_from: str,
    ) -> None:
        super().__init__(algorithm)
        self.schedule = schedule
        self.transport = transport
        self.rejoin_from = rejoin_from

    def step(self, state: Any, grads: torch.Tensor, iteration: int, transport: Transport) -> Any:
        now = self.schedule.round(iteration)
        self.transport.enter(now.graph, now.active, now.alive)
        if self.rejoin_from == "neighbour":
            self._restart_from_neighbours(state, now)
        crashed = ~now.alive
        if not bool(crashed.any()):
            return self.algorithm.step(state, grads, iteration, transport)
        kept = _rows(state, crashed)
        state = self.algorithm.step(state, grads, iteration, transport)
        for path, rows in kept.items():
            _field(state, path)[crashed] = rows
        return state

    def _restart_from_neighbours(self, state: Any, now: Round) -> None:
        """Each agent back now takes the model of its live neighbour of lowest index
        (its own if none is alive)."""
        params = self.algorithm.params(state)
        for agent in now.rejoined:
            live = [j for j in self.schedule.graph.neighbors(agent) if bool(now.alive[j])]
            live = [j for j in live if j not in now.rejoined] or live
            if live:
                params[agent].copy_(params[live[0]])


def _rows(
    state: Any, agents: torch.Tensor, path: tuple[int | str, ...] = ()
) -> dict[tuple[int | str, ...], torch.Tensor]:
    """Copies of ``agents``' rows of every per-agent tensor of a state record: its
    fields that are tensors with one row per agent, and theirs of the records and
    dicts it holds (a local optimizer's state, a compressor's warm starts), by their
    positions (or keys) from the outer record."""
    count = agents.shape[0]
    rows: dict[tuple[int | str, ...], torch.Tensor] = {}
    items = state.items() if isinstance(state, dict) else enumerate(state)
    for position, value in items:
        if isinstance(value, dict) or (isinstance(value, tuple) and hasattr(value, "_fields")):
            rows.update(_rows(value, agents, (*path, position)))
        elif isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == count:
            rows[(*path, position)] = value[agents].clone()
    return rows


def _field(state: Any, path: tuple[int | str, ...]) -> Any:
    """The field of the (nested) state record at ``path``."""
    for position in path:
        state = state[position]
    return state
