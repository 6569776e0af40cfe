"""Workers and one shared model on the virtual clock: AsySG-con, sync-ps, AsySG-incon.

Every worker loops: read the model, compute a mini-batch gradient (its compute
time from ``[timing]``, stragglers included), hand the gradient over. With a
parameter server (``asysg-con``, ``sync-ps``) reading and handing over are
messages of the whole model, each taking ``latency + bytes / bandwidth``; in
shared memory (``asysg-incon``) they are instant, and a read mixes versions.
The update rules are in ``murmur.algorithms.asysg``. Every applied gradient's
staleness is counted; the model is evaluated every ``run.eval_every`` server
updates, and the run stops after ``run.iterations`` updates or as soon as the
training loss reaches ``algorithm.target_loss``.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from typing import Any

import torch
from tqdm import tqdm

from murmur.algorithms.asysg import AsysgConfig, AsysgInconConfig, SyncPsConfig, WorkersConfig
from murmur.metrics.counters import MessageCounters
from murmur.metrics.evaluation import test_set_metrics
from murmur.metrics.records import Outcome
from murmur.seeding import derive_seed, generator
from murmur.sim.events import ComputeTimes, EventLoop, LinkDelays
from murmur.training.setup import Setup


def run_server(setup: Setup, config: WorkersConfig, on_record, progress: bool) -> Outcome:
    """Train ``config`` (asysg-con, sync-ps or asysg-incon) on ``setup``."""
    return _ServerRun(setup, config, on_record, progress).train()


class _ServerRun:
    def __init__(self, setup: Setup, config: WorkersConfig, on_record, progress: bool) -> None:
        run = setup.config.run
        self.setup = setup
        self.config = config
        self.on_record = on_record
        self.problem = setup.problem
        self.workers = config.workers
        self.iterations = run.iterations
        self.eval_every = run.eval_every
        self.shared_memory = isinstance(config, AsysgInconConfig)
        self.synchronous = isinstance(config, SyncPsConfig)
        self.group = (
            config.group
            if isinstance(config, AsysgConfig)
            else self.workers
            if self.synchronous
            else 1
        )
        self.x = setup.initial[0].clone()
        parameters = self.x.numel()
        self.compute = ComputeTimes(
            setup.config.timing, self.workers, derive_seed(run.seed, "timing")
        )
        self.links = LinkDelays(setup.config.timing)
        self.message_bytes = parameters * self.x.element_size()
        self.message_seconds = 0.0 if self.shared_memory else self.links.seconds(self.message_bytes)
        self.flops = 6.0 * parameters * self.problem.sampler.batch_size
        self.step = config.gradient_step()
        self.loop = EventLoop()
        self.counters = MessageCounters(self.workers)
        self.server_messages = 0
        self.version = 0
        self.pending: list[tuple[torch.Tensor, int]] = []
        self.waiting: list[int] = []
        self.staleness: Counter[int] = Counter()
        self.gradients = 0
        self.done = False
        self.reached: dict[str, Any] | None = None
        self.history: deque[torch.Tensor] = deque(maxlen=getattr(config, "max_delay", 0) + 1)
        self.history.append(self.x.clone())
        self.mixing = generator(run.seed, "inconsistent-reads")
        self.bar = tqdm(
            total=self.iterations, disable=not progress, unit="it", leave=False, dynamic_ncols=True
        )
        self.started = time.perf_counter()
        self.last_record: dict[str, Any] = {}

    # ------------------------------------------------------------------ run

    def train(self) -> Outcome:
        self._evaluate()
        for worker in range(self.workers):
            self._start(worker, self.x.clone(), 0)
        self.loop.run(stop=lambda: self.done)
        self.loop.clear()
        self.bar.close()
        if self.last_record.get("iteration") != self.version:
            self._evaluate()
        train_seconds = time.perf_counter() - self.started
        counters = self.counters
        largest = max(self.staleness, default=0)
        histogram = [self.staleness.get(tau, 0) for tau in range(largest + 1)]
        applied = sum(histogram)
        extra = {
            "virtual_seconds": self.loop.now,
            "workers": self.workers,
            "group": self.group,
            "staleness": {
                "mean": sum(tau * count for tau, count in enumerate(histogram)) / max(applied, 1),
                "max": max(self.staleness, default=0),
                "histogram": histogram,
            },
            "train_loss": self.last_record["train_loss"],
            "target_loss": self.config.target_loss,
            "iterations_to_target": self.reached["iteration"] if self.reached else None,
            "virtual_seconds_to_target": (
                self.reached["virtual_seconds"] if self.reached else None
            ),
            "server_messages": self.server_messages,
        }
        return Outcome(
            agents=self.workers,
            topology="shared memory" if self.shared_memory else "parameter server",
            iterations=self.version,
            last_record=self.last_record,
            events_per_agent=counters.events_per_agent.tolist(),
            messages=counters.messages + self.server_messages,
            bytes=counters.bytes + self.server_messages * self.message_bytes,
            train_seconds=train_seconds,
            samples=self.gradients * self.problem.sampler.batch_size,
            parameters=self.x.view(1, -1),
            extra=extra,
        )

    # --------------------------------------------------------------- events

    def _start(self, worker: int, model: torch.Tensor, read_version: int) -> None:
        """Worker ``worker`` has read ``model`` (version ``read_version``): compute and push."""
        problem = self.problem
        indices = problem.sampler.next_for(worker)
        _, grads = problem.model.loss_and_grad(
            model.view(1, -1), problem.x_train[indices][None], problem.y_train[indices][None]
        )
        gradient = grads[0].clone()  # the model's gradient buffer is reused by the next call
        seconds = self.compute.seconds(worker, self.flops) + self.message_seconds
        self.loop.after(seconds, lambda: self._arrive(worker, gradient, read_version))

    def _arrive(self, worker: int, gradient: torch.Tensor, read_version: int) -> None:
        if self.done:
            return
        if not self.shared_memory:
            self.counters.record_event(worker, 1, self.message_bytes)
        self.pending.append((gradient, read_version))
        self.gradients += 1
        if len(self.pending) == self.group:
            self._apply()
        if self.done:
            return
        if self.synchronous:
            self.waiting.append(worker)
            if not self.pending:  # just updated: everyone gets the new model
                for waiting in self.waiting:
                    self._send(waiting)
                self.waiting = []
        elif self.shared_memory:
            self._start(worker, self._mixed_read(), self.version)
        else:
            self._send(worker)

    def _send(self, worker: int) -> None:
        model, version = self.x.clone(), self.version
        self.server_messages += 1
        self.loop.after(self.message_seconds, lambda: self._start(worker, model, version))

    def _apply(self) -> None:
        alpha = self.step(self.version)
        total = torch.stack([gradient for gradient, _ in self.pending]).mean(dim=0)
        self.x.add_(total, alpha=-alpha)
        for _, read_version in self.pending:
            self.staleness[self.version - read_version] += 1
        self.pending = []
        self.version += 1
        if self.shared_memory:
            self.history.append(self.x.clone())
        self.bar.update(1)
        if self.version % self.eval_every == 0 or self.version >= self.iterations:
            record = self._evaluate()
            target = self.config.target_loss
            if self.reached is None and target > 0 and record["train_loss"] <= target:
                self.reached = record
                self.done = True
        if self.version >= self.iterations:
            self.done = True

    def _mixed_read(self) -> torch.Tensor:
        """Each coordinate from one of the stored versions (the last T + 1), uniformly."""
        versions = len(self.history)
        if versions == 1:
            return self.x.clone()
        stacked = torch.stack(list(self.history))
        choice = torch.randint(0, versions, (1, self.x.numel()), generator=self.mixing)
        return stacked.gather(0, choice)[0]

    # ----------------------------------------------------------- evaluation

    def _evaluate(self) -> dict[str, Any]:
        problem = self.problem
        flat = self.x.view(1, -1)
        train_accuracy, train_loss = problem.model.evaluate(flat, problem.x_train, problem.y_train)
        applied = sum(self.staleness.values())
        record = {
            "iteration": self.version,
            "samples": self.gradients * problem.sampler.batch_size,
            "wall_seconds": time.perf_counter() - self.started,
            "virtual_seconds": self.loop.now,
            **test_set_metrics(problem.model, flat, problem.x_test, problem.y_test),
            "train_loss": float(train_loss[0]),
            "train_accuracy": float(train_accuracy[0]) if train_accuracy is not None else None,
            "consensus_distance": 0.0,
            "events": self.counters.events,
            "messages": self.counters.messages + self.server_messages,
            "bytes": self.counters.bytes + self.server_messages * self.message_bytes,
            "events_per_agent": self.counters.events_per_agent.tolist(),
            "staleness_mean": (
                sum(tau * count for tau, count in self.staleness.items()) / applied
                if applied
                else 0.0
            ),
        }
        self.on_record(record)
        self.last_record = record
        return record
