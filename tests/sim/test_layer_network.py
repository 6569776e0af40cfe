"""The simulated network turns the work a layer solver reports into virtual time."""

from __future__ import annotations

import pytest
import torch

from murmur.algorithms.protocols import AsyncWork, RoundsWork
from murmur.metrics.counters import MessageCounters
from murmur.sections import TimingConfig
from murmur.sim.events import ComputeTimes, EventLoop, LinkDelays
from murmur.sim.layer_network import SimulatedNetwork
from murmur.topology import complete, ring

TIMING = TimingConfig(flops_per_second=100.0, latency=0.5, bandwidth=10.0, speeds=(1.0, 2.0, 0.5))


def _network() -> SimulatedNetwork:
    graph = ring(3)
    return SimulatedNetwork(
        graph=graph,
        counters=MessageCounters(3),
        clock=EventLoop(),
        compute=ComputeTimes(TIMING, 3, seed=0),
        links=LinkDelays(TIMING),
    )


def test_synchronous_rounds_wait_for_the_slowest_node_and_one_message_per_gossip_round():
    """setup + iterations x update + rounds x (message + mix), each at the slowest node
    (``rounds``: all iterations together)."""
    network = _network()
    network.work_in_rounds(
        RoundsWork(
            setup_flops=[100.0, 100.0, 10.0],
            update_flops=50.0,
            mix_flops=[10.0, 10.0, 10.0],
            message_bytes=20,
            rounds=6,
            iterations=3,
        )
    )
    setup = max(100.0 / 100.0, 100.0 / 200.0, 10.0 / 50.0)  # 1.0
    update = 50.0 / 50.0  # the slowest node (speed 0.5)
    mix = 10.0 / 50.0
    message = 0.5 + 20 / 10.0
    expected = setup + 3 * update + 6 * (message + mix)
    assert network.virtual_seconds == pytest.approx(expected)
    assert network.ready == [pytest.approx(expected)] * 3


def test_no_gossip_costs_only_the_updates_and_work_alone_is_the_nodes_own():
    """rounds = 0 adds no message time; a lone node's work takes its own speed."""
    network = _network()
    network.work_in_rounds(
        RoundsWork(
            [0.0] * 3,
            update_flops=50.0,
            mix_flops=[1.0] * 3,
            message_bytes=20,
            rounds=0,
            iterations=4,
        )
    )
    assert network.virtual_seconds == pytest.approx(4 * 1.0)
    network.work_alone(1, 400.0)  # speed 2: 400 / 200
    assert network.virtual_seconds == pytest.approx(4.0 + 2.0)


class _Scripted:
    """An asynchronous node that answers ``next_action`` from a script and logs arrivals."""

    def __init__(self, index: int, neighbour: int, actions: list[str]) -> None:
        self.index = index
        self.neighbour = neighbour
        self.actions = actions
        self.updates = 0
        self.received: list[tuple[int, int]] = []

    def update(self) -> dict[int, torch.Tensor]:
        self.updates += 1
        return {self.neighbour: torch.zeros(1)}

    @property
    def stamp(self) -> int:
        return self.updates - 1

    def next_action(self) -> str:
        return self.actions.pop(0)

    def receive(self, sender: int, stamp: int, block: torch.Tensor) -> bool:
        self.received.append((sender, stamp))
        return True


def _pair() -> SimulatedNetwork:
    """Two nodes of speed 1 at 1 flop per second; a message takes 1 second."""
    timing = TimingConfig(flops_per_second=1.0, latency=1.0, bandwidth=10.0)
    return SimulatedNetwork(
        graph=complete(2),
        counters=MessageCounters(2),
        clock=EventLoop(),
        compute=ComputeTimes(timing, 2, seed=0),
        links=LinkDelays(timing),
    )


def _work(setup: list[float]) -> AsyncWork:
    return AsyncWork(setup_flops=setup, update_flops=2.0, values=0, dtype=torch.float64)


def test_an_asynchronous_node_updates_again_at_once_or_finishes_when_its_state_says_so():
    """Updates take 2 s: node 0 updates twice (done at 4), node 1 once (done at 2)."""
    network = _pair()
    nodes = [_Scripted(0, 1, ["update", "done"]), _Scripted(1, 0, ["done"])]
    network.run_async(nodes, _work([0.0, 0.0]))
    assert [node.updates for node in nodes] == [2, 1]
    assert network.ready == [4.0, 2.0]
    assert network.counters.events_per_agent.tolist() == [2, 1]


def test_a_waiting_node_is_woken_by_the_next_arrival_and_a_busy_one_is_not():
    """Node 1 starts at 10 s; its push (sent 12 s, arrives 13 s) wakes node 0, done at 15 s."""
    network = _pair()
    nodes = [_Scripted(0, 1, ["wait", "done"]), _Scripted(1, 0, ["done"])]
    network.run_async(nodes, _work([0.0, 10.0]))
    assert [node.updates for node in nodes] == [2, 1]
    assert network.ready == [15.0, 12.0]
    assert nodes[0].received == [(1, 0)] and nodes[1].received == [(0, 0), (0, 1)]


def test_the_transport_of_a_layer_counts_on_the_networks_counters():
    """Gossip of every layer adds to the run's one set of counters."""
    network = _network()
    transport = network.transport_for(4, torch.float64)
    transport.broadcast(torch.tensor([True, False, False]), torch.ones(3, 4, dtype=torch.float64))
    assert network.counters.events_per_agent.tolist() == [1, 0, 0]
    assert network.counters.bytes == 2 * 4 * 8


def test_a_single_gossip_round_costs_one_message_and_one_mix_per_iteration():
    """One round per iteration (two in all): iterations x (update + message + mix)."""
    network = _network()
    network.work_in_rounds(
        RoundsWork(
            [0.0] * 3,
            update_flops=50.0,
            mix_flops=[10.0] * 3,
            message_bytes=20,
            rounds=2,
            iterations=2,
        )
    )
    assert network.virtual_seconds == pytest.approx(2 * (1.0 + (0.5 + 2.0) + 0.2))
