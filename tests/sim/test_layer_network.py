"""The simulated network turns the work a layer solver reports into virtual time."""

from __future__ import annotations

import pytest

from murmur.algorithms.protocols import RoundsWork
from murmur.metrics.counters import MessageCounters
from murmur.sections import TimingConfig
from murmur.sim.events import ComputeTimes, EventLoop, LinkDelays
from murmur.sim.layerwise import SimulatedNetwork
from murmur.topology import ring

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
    """setup + iterations x (update + rounds x (message + mix)), each at the slowest node."""
    network = _network()
    network.work_in_rounds(
        RoundsWork(
            setup_flops=[100.0, 100.0, 10.0],
            update_flops=50.0,
            mix_flops=[10.0, 10.0, 10.0],
            message_bytes=20,
            rounds=2,
            iterations=3,
        )
    )
    setup = max(100.0 / 100.0, 100.0 / 200.0, 10.0 / 50.0)  # 1.0
    update = 50.0 / 50.0  # the slowest node (speed 0.5)
    mix = 10.0 / 50.0
    message = 0.5 + 20 / 10.0
    expected = setup + 3 * (update + 2 * (message + mix))
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
