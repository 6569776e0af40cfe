"""Workers and one shared model on the virtual clock: AsySG-con, sync-ps, AsySG-incon.

Every worker loops: read the model, compute a mini-batch gradient (its compute
time from ``[timing]``, stragglers included), hand the gradient over. With a
parameter server (``asysg-con``, ``sync-ps``) reading and handing over are
messages of the whole model, each taking ``latency + bytes / bandwidth``; in
shared memory (``asysg-incon``) they are instant, and a read mixes versions.
The update rules are in ``murmur.algorithms.asysg``; what the server does with
each gradient (updates, staleness, evaluations, the end, whom to answer) is
``murmur.algorithms.param_server.ParameterServer``. This module keeps the time:
compute times, message delays, the event loop.

Workers may crash (``faults.crashes``, AsySG-con and AsySG-incon): when the
server applies update ``faults.crash_at`` the crashed workers stop, and what
they were doing is lost (the gradient they were computing or pushing, the model
on its way to them). When it applies update ``faults.rejoin_at`` they come back
and start from the server's current model, sent to each of them (one message
each; in shared memory they read it): a worker keeps nothing of its own, so
``faults.rejoin_from`` changes nothing here. The others carry on meanwhile, a
group of M gradients filling from whoever pushes. The records count
``crashed_agents`` (workers down at the evaluation) and ``lost_gradients``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from tqdm import tqdm

from murmur.algorithms.asysg import WorkersConfig
from murmur.algorithms.param_server import ParameterServer, model_metrics
from murmur.metrics.records import Outcome
from murmur.seeding import derive_seed, generator
from murmur.sim.events import ComputeTimes, EventLoop, LinkDelays
from murmur.sim.faults import crashed_agents
from murmur.training.setup import Setup

OnRecord = Callable[[dict[str, Any]], None]


def run_server(setup: Setup, config: WorkersConfig, on_record: OnRecord, progress: bool) -> Outcome:
    """Train ``config`` (asysg-con, sync-ps or asysg-incon) on ``setup``."""
    return _ServerRun(setup, config, on_record, progress).train()


class _ServerRun:
    def __init__(
        self, setup: Setup, config: WorkersConfig, on_record: OnRecord, progress: bool
    ) -> None:
        run = setup.config.run
        self.on_record = on_record
        self.problem = setup.problem
        self.server = ParameterServer(
            config,
            setup.initial[0],
            run.iterations,
            run.eval_every,
            batch_size=self.problem.sampler.batch_size,
            reads=generator(run.seed, "inconsistent-reads"),
        )
        self.compute = ComputeTimes(
            setup.config.timing, config.workers, derive_seed(run.seed, "timing")
        )
        links = LinkDelays(setup.config.timing)
        shared_memory = self.server.shared_memory
        self.message_seconds = 0.0 if shared_memory else links.seconds(self.server.message_bytes)
        self.flops = 6.0 * self.x.numel() * self.problem.sampler.batch_size
        self.loop = EventLoop()
        faults = setup.config.faults
        self.crashed = crashed_agents(faults, config.workers, run.seed)
        """The workers that crash (none without ``faults.crashes``)."""
        self.crash_at, self.rejoin_at = faults.crash_at, faults.rejoin_at
        self.down: set[int] = set()
        """Workers down now."""
        self.lives = [0] * config.workers
        """How many times each worker came back: what it was doing before is lost."""
        self.lost_gradients = 0
        self.bar = tqdm(
            total=run.iterations, disable=not progress, unit="it", leave=False, dynamic_ncols=True
        )
        self.started = time.perf_counter()

    @property
    def x(self) -> torch.Tensor:
        return self.server.x

    # ------------------------------------------------------------------ run

    def train(self) -> Outcome:
        server = self.server
        self._crash_or_rejoin()
        self._evaluate()
        for worker in range(server.workers):
            if worker not in self.down:
                self._start(worker, self.x.clone(), 0)
        self.loop.run(stop=lambda: server.done)
        self.loop.clear()
        self.bar.close()
        if server.final_evaluation_due:
            self._evaluate()
        train_seconds = time.perf_counter() - self.started
        extra = {
            "virtual_seconds": self.loop.now,
            **server.extra("virtual_seconds"),
            **self._fault_counts(),
        }
        return server.outcome(train_seconds, extra)

    # --------------------------------------------------------------- faults

    def _crash_or_rejoin(self) -> None:
        """At update ``crash_at`` the crashed workers stop; at ``rejoin_at`` they start
        again from the current model."""
        if not self.crashed:
            return
        version = self.server.version
        if version == self.crash_at:
            self.down.update(self.crashed)
        if self.rejoin_at > 0 and version == self.rejoin_at:
            for worker in self.crashed:
                self.down.discard(worker)
                self.lives[worker] += 1
                if self.server.shared_memory:
                    self._start(worker, *self.server.read())
                else:
                    self._send(worker)

    def _alive(self, worker: int, life: int) -> bool:
        """Whether something ``worker`` began in its ``life``-th life still matters."""
        return worker not in self.down and self.lives[worker] == life

    def _fault_counts(self) -> dict[str, int]:
        if not self.crashed:
            return {}
        return {"crashed_agents": len(self.down), "lost_gradients": self.lost_gradients}

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
        life = self.lives[worker]
        self.loop.after(seconds, lambda: self._arrive(worker, gradient, read_version, life))

    def _arrive(self, worker: int, gradient: torch.Tensor, read_version: int, life: int) -> None:
        if not self._alive(worker, life):  # it crashed while computing or pushing
            self.lost_gradients += 1
            return
        server = self.server
        arrival = server.receive(worker, gradient, read_version)  # ignored once done
        if arrival.applied:
            self.bar.update(1)
            self._crash_or_rejoin()
        for answered in server.answers(arrival, self._evaluate):
            if answered not in self.down:
                self._send(answered)
        if server.shared_memory and not server.done and worker not in self.down:
            self._start(worker, *server.read())  # no message: it reads again at once

    def _send(self, worker: int) -> None:
        model, version = self.server.read()
        self.server.sent()
        life = self.lives[worker]

        def receive() -> None:
            if self._alive(worker, life):  # else the model reached a crashed worker
                self._start(worker, model, version)

        self.loop.after(self.message_seconds, receive)

    # ----------------------------------------------------------- evaluation

    def _evaluate(self) -> dict[str, Any]:
        problem = self.problem
        clock = {
            "wall_seconds": time.perf_counter() - self.started,
            "virtual_seconds": self.loop.now,
        }
        train, test = (problem.x_train, problem.y_train), (problem.x_test, problem.y_test)
        metrics = model_metrics(
            problem.model, self.x, train, test, gradient_norm=self.server.config.gradient_norm
        )
        record = self.server.record(clock, metrics)
        record.update(self._fault_counts())
        self.on_record(record)
        return record
