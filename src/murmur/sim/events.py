"""Explicit time: a discrete-event loop on a virtual clock, and seeded time models.

Asynchronous algorithms are written as handlers that an :class:`EventLoop`
calls at their virtual times: "agent i finishes its update", "a message from j
arrives at i". How long things take comes from two seeded models built from
the ``[timing]`` config:

- :class:`ComputeTimes`: an update of ``flops`` floating-point operations on
  agent ``i`` takes ``flops / (flops_per_second * speed_i)`` seconds, times a
  random factor of mean 1 (constant, exponential or log-normal); stragglers
  are agents whose speed is divided by ``straggler_factor``;
- :class:`LinkDelays`: a message of ``b`` bytes takes ``latency + b / bandwidth``.

A synchronous algorithm uses the same models through :meth:`EventLoop.advance`,
waiting for the slowest agent and the slowest message of each round.
All times are virtual: they say what a network of such machines would take,
not how long the simulation ran.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence

import torch

from murmur.sections import TimingConfig
from murmur.seeding import generator


class EventLoop:
    """A virtual clock and the actions scheduled on it, run in time order.

    Actions scheduled for the same time run in the order they were scheduled,
    so a run is a deterministic function of its seed.
    """

    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._scheduled = 0

    def at(self, time: float, action: Callable[[], None]) -> None:
        """Run ``action`` when the clock reaches ``time`` (not before now)."""
        if not time >= self.now:
            raise ValueError(f"cannot schedule at {time}, before the current time {self.now}")
        heapq.heappush(self._queue, (time, self._scheduled, action))
        self._scheduled += 1

    def after(self, delay: float, action: Callable[[], None]) -> None:
        """Run ``action`` ``delay`` seconds from now."""
        self.at(self.now + delay, action)

    def advance(self, seconds: float) -> None:
        """Move the clock forward with nothing pending: a synchronous round's barrier."""
        if self._queue:
            raise RuntimeError("advance() with events still pending; run() them first")
        if seconds < 0:
            raise ValueError("cannot move the clock backwards")
        self.now += seconds

    @property
    def pending(self) -> int:
        return len(self._queue)

    def run(self, stop: Callable[[], bool] | None = None) -> None:
        """Run actions in time order until none is left or ``stop()`` is true."""
        while self._queue and not (stop is not None and stop()):
            time, _, action = heapq.heappop(self._queue)
            self.now = time
            action()

    def clear(self) -> None:
        """Drop every pending action (the clock stays where it is)."""
        self._queue.clear()


class ComputeTimes:
    """Seeded compute time of each agent's updates."""

    def __init__(self, config: TimingConfig, agents: int, seed: int) -> None:
        config.check_units(agents, "agents")
        speeds = list(config.speeds) if config.speeds else [1.0] * agents
        for agent in range(config.stragglers):
            speeds[agent] /= config.straggler_factor
        self.speeds = speeds
        self.flops_per_second = config.flops_per_second
        self.noise = config.compute_noise
        self.sigma = config.noise_sigma
        self._generator = generator(seed, "compute-times")

    @property
    def agents(self) -> int:
        return len(self.speeds)

    def seconds(self, agent: int, flops: float) -> float:
        """Virtual seconds that agent ``agent`` takes for ``flops`` operations."""
        return self.mean_seconds(agent, flops) * self._factor()

    def mean_seconds(self, agent: int, flops: float) -> float:
        """What ``seconds`` takes on average (its random factor has mean 1); draws nothing."""
        return flops / (self.flops_per_second * self.speeds[agent])

    def round_seconds(self, flops: float | Sequence[float]) -> float:
        """A synchronous round: every agent computes, the slowest sets the time."""
        if self.noise == "constant" and not isinstance(flops, Sequence):
            return flops / (self.flops_per_second * min(self.speeds))
        per_agent = flops if isinstance(flops, Sequence) else [flops] * self.agents
        return max(self.seconds(agent, work) for agent, work in enumerate(per_agent))

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The random stream of the compute times, for a checkpoint."""
        return {"stream": self._generator.get_state()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self._generator.set_state(state["stream"])

    def _factor(self) -> float:
        if self.noise == "constant":
            return 1.0
        uniform = float(torch.rand((), generator=self._generator, dtype=torch.float64))
        uniform = min(max(uniform, 1e-12), 1.0 - 1e-12)
        if self.noise == "exponential":
            return -math.log(1.0 - uniform)
        # Log-normal with mean 1: exp(sigma z - sigma^2 / 2).
        normal = math.sqrt(2.0) * torch.special.erfinv(torch.tensor(2.0 * uniform - 1.0)).item()
        return math.exp(self.sigma * normal - self.sigma**2 / 2.0)


class LinkDelays:
    """Time a message takes on any link: latency plus its bytes over the bandwidth."""

    def __init__(self, config: TimingConfig) -> None:
        self.latency = config.latency
        self.bandwidth = config.bandwidth

    def seconds(self, nbytes: int) -> float:
        return self.latency + nbytes / self.bandwidth
