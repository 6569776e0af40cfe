"""The virtual clock: event order, barriers, and the seeded compute and link time models."""

from __future__ import annotations

import math
import statistics

import pytest

from murmur.config import TimingConfig
from murmur.errors import UsageError
from murmur.sim.events import ComputeTimes, EventLoop, LinkDelays

# ------------------------------------------------------------------ EventLoop


def test_actions_run_in_time_order_and_ties_in_scheduling_order():
    loop = EventLoop()
    log = []

    def note(name):
        return lambda: log.append((name, loop.now))

    loop.at(3.0, note("c"))
    loop.at(1.0, note("a"))
    loop.at(3.0, note("d"))
    loop.after(2.0, note("b"))
    loop.at(3.0, note("e"))
    assert loop.pending == 5
    loop.run()
    assert log == [("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", 3.0), ("e", 3.0)]
    assert loop.now == 3.0 and loop.pending == 0


def test_actions_scheduled_while_running_keep_the_order():
    loop = EventLoop()
    log = []

    def first():
        log.append("first")
        loop.after(0.0, lambda: log.append("same time, scheduled later"))
        loop.after(0.5, lambda: log.append("later"))

    loop.at(1.0, first)
    loop.at(1.0, lambda: log.append("same time, scheduled earlier"))
    loop.run()
    assert log == ["first", "same time, scheduled earlier", "same time, scheduled later", "later"]
    assert loop.now == 1.5


def test_scheduling_in_the_past_is_refused():
    loop = EventLoop(start=5.0)
    with pytest.raises(ValueError, match="before the current time"):
        loop.at(4.9, lambda: None)
    with pytest.raises(ValueError):
        loop.after(-0.1, lambda: None)
    with pytest.raises(ValueError):
        loop.at(math.nan, lambda: None)
    loop.at(5.0, lambda: None)  # now itself is allowed
    assert loop.pending == 1


def test_advance_is_a_barrier_and_refuses_pending_events():
    loop = EventLoop(start=1.0)
    loop.advance(2.5)
    assert loop.now == 3.5
    with pytest.raises(ValueError):
        loop.advance(-1.0)
    loop.after(1.0, lambda: None)
    with pytest.raises(RuntimeError, match="pending"):
        loop.advance(1.0)
    assert loop.now == 3.5
    loop.run()
    loop.advance(0.5)
    assert loop.now == 5.0


def test_run_stops_when_asked_and_resumes_later():
    loop = EventLoop()
    ran = []
    for time in (1.0, 2.0, 3.0, 4.0, 5.0):
        loop.at(time, lambda time=time: ran.append(time))
    loop.run(stop=lambda: len(ran) >= 2)
    assert ran == [1.0, 2.0]
    assert loop.now == 2.0 and loop.pending == 3
    loop.run()
    assert ran == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_clear_drops_pending_actions_and_keeps_the_time():
    loop = EventLoop()
    ran = []
    loop.at(1.0, lambda: ran.append(1))
    loop.run()
    loop.at(2.0, lambda: ran.append(2))
    loop.clear()
    loop.run()
    assert ran == [1] and loop.now == 1.0 and loop.pending == 0


# ------------------------------------------------------------------ ComputeTimes


def test_constant_noise_gives_flops_over_speed_exactly():
    timing = TimingConfig(flops_per_second=2e9, speeds=(1.0, 0.5, 4.0))
    times = ComputeTimes(timing, agents=3, seed=0)
    assert times.seconds(0, 4e9) == 4e9 / (2e9 * 1.0)
    assert times.seconds(1, 4e9) == 4e9 / (2e9 * 0.5)
    assert times.seconds(2, 3e9) == 3e9 / (2e9 * 4.0)
    assert times.seconds(2, 3e9) == times.seconds(2, 3e9)  # no noise


def test_stragglers_are_the_first_agents_slowed_by_the_factor():
    timing = TimingConfig(
        flops_per_second=1e9, speeds=(1.0, 2.0, 2.0, 1.0), stragglers=2, straggler_factor=3.0
    )
    slow = ComputeTimes(timing, agents=4, seed=0)
    assert slow.speeds == pytest.approx([1.0 / 3.0, 2.0 / 3.0, 2.0, 1.0], rel=1e-15)
    assert [slow.seconds(agent, 1e9) for agent in range(4)] == pytest.approx(
        [3.0, 1.5, 0.5, 1.0], rel=1e-15
    )
    assert timing.speeds == (1.0, 2.0, 2.0, 1.0)  # the config itself is left alone


def test_wrong_number_of_speeds_or_too_many_stragglers_is_a_usage_error():
    with pytest.raises(UsageError, match="timing.speeds has 2 values for 3 agents"):
        ComputeTimes(TimingConfig(speeds=(1.0, 2.0)), agents=3, seed=0)
    with pytest.raises(UsageError, match="timing.stragglers"):
        ComputeTimes(TimingConfig(stragglers=4), agents=3, seed=0)


@pytest.mark.parametrize(
    "noise, spread",
    [("exponential", 1.0), ("lognormal", math.sqrt(math.exp(0.5**2) - 1.0))],
    ids=["exponential", "lognormal"],
)
def test_random_factors_have_mean_one_and_their_spread(noise, spread):
    timing = TimingConfig(flops_per_second=1.0, compute_noise=noise, noise_sigma=0.5)
    times = ComputeTimes(timing, agents=1, seed=3)
    draws = [times.seconds(0, 1.0) for _ in range(20000)]
    assert all(draw > 0 for draw in draws)
    assert statistics.fmean(draws) == pytest.approx(1.0, rel=0.05)
    assert statistics.pstdev(draws) == pytest.approx(spread, rel=0.1)


@pytest.mark.parametrize("noise", ["exponential", "lognormal"])
def test_random_factors_are_a_function_of_the_seed(noise):
    timing = TimingConfig(compute_noise=noise)

    def draws(seed):
        times = ComputeTimes(timing, agents=2, seed=seed)
        return [times.seconds(agent % 2, 1e10) for agent in range(50)]

    assert draws(7) == draws(7)
    assert draws(7) != draws(8)


def test_round_seconds_waits_for_the_slowest_agent():
    times = ComputeTimes(TimingConfig(flops_per_second=1.0, speeds=(1.0, 0.5, 2.0)), 3, seed=0)
    assert times.round_seconds(4.0) == 8.0  # agent 1, half speed
    assert times.round_seconds([4.0, 1.0, 12.0]) == 6.0  # agent 2: 12 / 2
    assert times.round_seconds([5.0, 1.0, 2.0]) == 5.0  # agent 0


# ------------------------------------------------------------------ LinkDelays and TimingConfig


def test_link_delay_is_latency_plus_bytes_over_bandwidth():
    links = LinkDelays(TimingConfig(latency=2e-3, bandwidth=1e6))
    assert links.seconds(0) == 2e-3
    assert links.seconds(5000) == pytest.approx(2e-3 + 5e-3, rel=1e-15)


@pytest.mark.parametrize(
    "values, key",
    [
        ({"straggler_factor": 0.5}, "timing.straggler_factor"),
        ({"bandwidth": 0.0}, "timing.bandwidth"),
        ({"bandwidth": -1.0}, "timing.bandwidth"),
        ({"latency": -1e-3}, "timing.latency"),
        ({"speeds": (1.0, 0.0)}, "timing.speeds"),
        ({"speeds": (1.0, -2.0)}, "timing.speeds"),
        ({"flops_per_second": 0.0}, "timing.flops_per_second"),
        ({"stragglers": -1}, "timing.stragglers"),
    ],
)
def test_bad_timing_values_are_usage_errors(values, key):
    with pytest.raises(UsageError, match=key):
        TimingConfig(**values)


def test_boundary_timing_values_are_accepted():
    timing = TimingConfig(straggler_factor=1.0, latency=0.0, speeds=(0.25, 3.0))
    assert LinkDelays(timing).seconds(125) == 125 / timing.bandwidth
