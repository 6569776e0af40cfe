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

Every pending event is a worker's read arriving (``start``) or its gradient
arriving (``arrive``), kept as data beside the loop, so that a checkpoint (after
every ``run.checkpoint_every`` updates, between two events) holds them with the
server's rule, the batch streams and the compute stream, and a resumed run
schedules them again in the same order.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypedDict

import torch

from murmur.algorithms.asysg import WorkersConfig
from murmur.algorithms.param_server import ParameterServer, Times, model_metrics
from murmur.errors import UsageError
from murmur.metrics.record_types import EvaluationRecord, FaultCounts, ServerRecord, SummaryExtra
from murmur.metrics.records import Outcome
from murmur.seeding import derive_seed, generator
from murmur.sim.events import ComputeTimes, EventLoop, LinkDelays
from murmur.sim.faults import crashed_agents
from murmur.training.progress import progress_bar
from murmur.training.setup import SgdSetup

OnRecord = Callable[[EvaluationRecord], None]


def run_server(
    setup: SgdSetup, config: WorkersConfig, on_record: OnRecord, progress: bool
) -> Outcome:
    """Train ``config`` (asysg-con, sync-ps or asysg-incon) on ``setup``."""
    return _ServerRun(setup, config, on_record, progress).train()


class ServerRunSnapshot(TypedDict):
    """What a checkpoint of a simulated server run holds, between two events."""

    now: float
    """The virtual clock."""
    events: list[list[object]]
    """The pending events in order: time, kind, worker, tensor, read version, life."""
    server: dict[str, Any]
    """The server's rule (:meth:`~murmur.algorithms.param_server.ParameterServer.state_dict`)."""
    sampler: dict[str, Any]
    compute: dict[str, torch.Tensor]
    down: list[int]
    """The workers down now."""
    lives: list[int]
    """How many times each worker has started."""
    lost_gradients: int


class _ServerRun:
    def __init__(
        self, setup: SgdSetup, config: WorkersConfig, on_record: OnRecord, progress: bool
    ) -> None:
        run = setup.config.run
        self.on_record = on_record
        self.problem = setup.problem
        device = self.problem.model.device
        self.server = ParameterServer(
            config,
            # On a GPU the server's model, its optimizer state and the gradients in
            # flight live there: a worker's read and push cross nothing.
            setup.initial[0] if device is None else setup.initial[0].to(device),
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
        self.events: dict[int, tuple[float, str, int, torch.Tensor, int, int]] = {}
        """The pending events by the order they were scheduled in: (time, kind, worker,
        tensor, version, life), ``start`` (a read model) or ``arrive`` (a gradient), of
        the worker's ``life``-th life (``lives``)."""
        self.scheduled = 0
        self.checkpoints = setup.checkpoints
        self.stop_requested = setup.stop_requested
        self.save_due = False
        self.bar = progress_bar(progress, run.iterations)
        self.started = time.perf_counter()

    @property
    def x(self) -> torch.Tensor:
        return self.server.x

    # ------------------------------------------------------------------ run

    def train(self) -> Outcome:
        server = self.server
        resumed = self.checkpoints.resumed if self.checkpoints is not None else None
        if resumed is None:
            self._crash_or_rejoin()
            self._evaluate()
            for worker in range(server.workers):
                if worker not in self.down:
                    self._start(worker, self.x.clone(), 0)
        else:
            self._resume(resumed["state"])
        while True:
            self.loop.run(stop=lambda: self._over() or self.save_due)
            if self._over() or not self.save_due or self.checkpoints is None:
                break
            self.save_due = False
            self.checkpoints.save(server.version, self._snapshot())
        self.loop.clear()
        self.bar.close()
        if server.final_evaluation_due:
            self._evaluate()
        train_seconds = time.perf_counter() - self.started
        extra: SummaryExtra = {
            "virtual_seconds": self.loop.now,
            **server.extra("virtual_seconds"),
            **self._fault_counts(),
        }
        return server.outcome(train_seconds, extra)

    def _over(self) -> bool:
        """Whether the run is over: its updates applied, its target reached, or stopped
        by a rule of ``[collapse]`` at the evaluation just made."""
        return self.server.done or self.stop_requested()

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

    def _fault_counts(self) -> FaultCounts:
        if not self.crashed:
            return {}
        return {"crashed_agents": len(self.down), "lost_gradients": self.lost_gradients}

    # --------------------------------------------------------------- events

    def _schedule(
        self, time: float, kind: str, worker: int, tensor: torch.Tensor, version: int
    ) -> None:
        key = self.scheduled
        self.scheduled += 1
        self.events[key] = (time, kind, worker, tensor, version, self.lives[worker])
        self.loop.at(time, lambda: self._fire(key))

    def _fire(self, key: int) -> None:
        _, kind, worker, tensor, version, life = self.events.pop(key)
        if not self._alive(worker, life):  # it crashed meanwhile: this is lost
            self.lost_gradients += int(kind == "arrive")
        elif kind == "start":
            self._start(worker, tensor, version)
        else:
            self._arrive(worker, tensor, version)

    def _start(self, worker: int, model: torch.Tensor, read_version: int) -> None:
        """Worker ``worker`` has read ``model`` (version ``read_version``): compute and push."""
        problem = self.problem
        _, grads = problem.model.loss_and_grad(model.view(1, -1), *problem.worker_batch(worker))
        gradient = grads[0].clone()  # the model's gradient buffer is reused by the next call
        seconds = self.compute.seconds(worker, self.flops) + self.message_seconds
        self._schedule(self.loop.now + seconds, "arrive", worker, gradient, read_version)

    def _arrive(self, worker: int, gradient: torch.Tensor, read_version: int) -> None:
        server = self.server
        arrival = server.receive(worker, gradient, read_version)  # ignored once done
        if arrival.applied:
            self.bar.update(1)
            self._crash_or_rejoin()
            if self.checkpoints is not None:
                self.save_due = self.checkpoints.due(server.version, server.iterations)
        for answered in server.answers(arrival, self._evaluate):
            if answered not in self.down:
                self._send(answered)
        if server.shared_memory and not server.done and worker not in self.down:
            self._start(worker, *server.read())  # no message: it reads again at once

    def _send(self, worker: int) -> None:
        model, version = self.server.read()
        self.server.sent()
        self._schedule(self.loop.now + self.message_seconds, "start", worker, model, version)

    # ---------------------------------------------------------- checkpoints

    def _snapshot(self) -> ServerRunSnapshot:
        """The run between two events: the clock, what is pending, the rule, the streams."""
        return {
            "now": self.loop.now,
            "events": [list(self.events[key]) for key in sorted(self.events)],
            "server": self.server.state_dict(),
            "sampler": self.problem.sampler.state_dict(),
            "compute": self.compute.state_dict(),
            "down": sorted(self.down),
            "lives": list(self.lives),
            "lost_gradients": self.lost_gradients,
        }

    def _resume(self, saved: dict[str, Any]) -> None:
        """Continue from :meth:`_snapshot`: the pending events keep their order."""
        try:
            self.server.load_state_dict(saved["server"])
            self.problem.sampler.load_state_dict(saved["sampler"])
            self.compute.load_state_dict(saved["compute"])
            self.loop.now = saved["now"]
            self.down = set(saved["down"])
            self.lives = list(saved["lives"])
            self.lost_gradients = saved["lost_gradients"]
            for when, kind, worker, tensor, version, life in saved["events"]:
                # a checkpoint holds CPU tensors: models and gradients go back where x is
                self._schedule(when, kind, worker, tensor.to(self.x.device), version)
                self.events[self.scheduled - 1] = (when, kind, worker, tensor, version, life)
        except (KeyError, TypeError, ValueError, RuntimeError) as error:
            raise UsageError(f"the checkpoint does not fit this run: {error}") from None
        self.bar.update(self.server.version)

    # ----------------------------------------------------------- evaluation

    def _evaluate(self) -> ServerRecord:
        problem = self.problem
        clock: Times = {
            "wall_seconds": time.perf_counter() - self.started,
            "virtual_seconds": self.loop.now,
        }
        train, test = (problem.x_train, problem.y_train), (problem.x_test, problem.y_test)
        metrics = model_metrics(
            problem.model,
            self.x,
            train,
            test,
            gradient_norm=self.server.config.gradient_norm,
            validation=problem.validation,
        )
        record = self.server.record(clock, metrics)
        record.update(self._fault_counts())
        self.on_record(record)
        return record
