"""The in-process simulator: all agents in one process, agent axis first.

Each iteration every agent draws a mini-batch from its shard, the gradients of
all N model copies come from one ``torch.func`` call, and the algorithm steps
all agents at once, talking through an in-memory transport. Evaluation records
are handed to a callback every ``eval_every`` iterations and at the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from tqdm import tqdm

from murmur.algorithms.protocols import Algorithm, Transport
from murmur.metrics.evaluation import consensus_distance, test_set_metrics
from murmur.sim.events import ComputeTimes, LinkDelays
from murmur.training.setup import Problem


@dataclass
class Trained:
    """The end of a simulated run."""

    params: torch.Tensor
    train_seconds: float
    samples: int
    last_record: dict[str, Any]
    virtual_seconds: float = 0.0
    """Time the run would take on the virtual clock (see :class:`RoundClock`)."""


@dataclass
class RoundClock:
    """Virtual time of synchronous mini-batch rounds.

    Each iteration every agent computes its gradient (about 6 flops per
    parameter and sample: forward and backward) and the round lasts as long as
    the slowest agent; an iteration in which some agent sends adds one message
    time (all messages of a round travel in parallel).
    """

    compute: ComputeTimes
    links: LinkDelays
    flops_per_agent: float
    message_bytes: int

    def round_seconds(self, sent: bool) -> float:
        seconds = self.compute.round_seconds(self.flops_per_agent)
        return seconds + (self.links.seconds(self.message_bytes) if sent else 0.0)


def simulate(
    problem: Problem,
    algorithm: Algorithm,
    transport: Transport,
    initial: torch.Tensor,
    iterations: int,
    eval_every: int,
    on_record: Callable[[dict[str, Any]], None],
    progress: bool = False,
    clock: RoundClock | None = None,
) -> Trained:
    """Run ``iterations`` steps of ``algorithm`` from stacked ``initial`` parameters."""
    started = time.perf_counter()
    train_seconds = 0.0
    virtual_seconds = 0.0
    samples = 0
    state = algorithm.init(initial)
    loss_sum, loss_steps = 0.0, 0
    record = _record(problem, algorithm.params(state), transport, 0, 0, None, 0.0)
    on_record(record)
    bar = tqdm(total=iterations, disable=not progress, unit="it", leave=False, dynamic_ncols=True)
    for iteration in range(iterations):
        step_started = time.perf_counter()
        indices = problem.sampler.next()
        losses, grads = problem.model.loss_and_grad(
            algorithm.params(state), problem.x_train[indices], problem.y_train[indices]
        )
        events_before = transport.counters.events if clock is not None else 0
        state = algorithm.step(state, grads, iteration, transport)
        train_seconds += time.perf_counter() - step_started
        if clock is not None:
            virtual_seconds += clock.round_seconds(transport.counters.events > events_before)
        samples += indices.numel()
        loss_sum += float(losses.mean())
        loss_steps += 1
        done = iteration + 1
        if done % eval_every == 0 or done == iterations:
            record = _record(
                problem,
                algorithm.params(state),
                transport,
                done,
                samples,
                loss_sum / loss_steps,
                time.perf_counter() - started,
            )
            record["virtual_seconds"] = virtual_seconds
            on_record(record)
            loss_sum, loss_steps = 0.0, 0
            if record["accuracy_mean"] is not None:
                bar.set_postfix(acc=f"{record['accuracy_mean']:.3f}", msgs=record["messages"])
        bar.update(1)
    bar.close()
    return Trained(algorithm.params(state), train_seconds, samples, record, virtual_seconds)


def _record(
    problem: Problem,
    params: torch.Tensor,
    transport: Transport,
    iteration: int,
    samples: int,
    train_loss: float | None,
    wall_seconds: float,
) -> dict[str, Any]:
    counters = transport.counters
    return {
        "iteration": iteration,
        "samples": samples,
        "wall_seconds": wall_seconds,
        **test_set_metrics(problem.model, params, problem.x_test, problem.y_test),
        "train_loss": train_loss,
        "consensus_distance": consensus_distance(params),
        "events": counters.events,
        "messages": counters.messages,
        "bytes": counters.bytes,
        "events_per_agent": counters.events_per_agent.tolist(),
    }
