"""AsySG-con and sync-ps in the distributed runtime: a parameter server on rank 0,
workers on 1..W.

Workers loop: compute a mini-batch gradient on their own batch stream (worker
``w`` on rank ``w + 1`` draws ``sampler.next_for(w)``), push it (PUSH, header
``step`` = the version read), receive the next model (MODEL, header ``step`` =
the server's version) from rank 0. The first model is the initial one, which
every rank builds from the seed, so no message brings it (as in the simulator).
The server has one receiving thread per worker (a pending gloo receive cannot be
polled) feeding one queue; it applies the mean of every M gradients with the
step schedule as they arrive, counts each one's staleness (server version at
apply - version read) and answers each push with its current model. It stops
after ``run.iterations`` updates or once the training loss (evaluated every
``run.eval_every`` updates) reaches ``algorithm.target_loss``, then sends STOP
to the workers still there.

Every wait has a deadline (``timeout``). A worker whose connection closes, that
sends something malformed, or that sends nothing for ``timeout`` seconds since
the start or since it was sent the model is dropped and listed in ``failed_workers``; the server
carries on with the others, and fails (PeerFailure) only when none is left. A
worker whose server stops answering fails on its own deadline. Rank 0 writes
the run folder; the records carry real wall-clock times only.

sync-ps is the same server holding every answer until all W gradients of the
current model are in; it applies their mean (summed in worker order, as the
simulator does with equal workers) and sends the new model to all. Being
synchronous, it does not carry on without a worker: when one fails, the server
tells the others (ABORT naming it) and every rank stops with one line naming it.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
import torch.distributed as dist
from tqdm import tqdm

from murmur.config import Config
from murmur.errors import UsageError
from murmur.metrics.evaluation import test_set_metrics
from murmur.metrics.records import Outcome
from murmur.dist.mailbox import (
    Kind,
    Outbox,
    PeerFailure,
    PeerTimeout,
    receive_loop,
)

SERVER = 0


def check_world(config: Config, world: int) -> None:
    """UsageError unless ``world`` is the workers plus the server."""
    workers = config.algorithm.workers
    if world != workers + 1:
        raise UsageError(
            f"WORLD_SIZE is {world} but {config.algorithm.name} with algorithm.workers = "
            f"{workers} needs {workers + 1} ranks (the server on rank 0 and one per worker)"
        )


def server_runner(config: Config, rank: int, world: int, timeout: float) -> Callable:
    """The runner of this rank of an AsySG-con or sync-ps run: the server on rank 0,
    a worker on the others. UsageError unless ``world`` is the workers plus one."""
    check_world(config, world)
    if rank == SERVER:
        return partial(_serve, timeout=timeout)
    return partial(_work, rank=rank, timeout=timeout)


# ---------------------------------------------------------------- receiving


def _listen(
    group: Any, rank: int, sources: list[int], kinds: dict[int, int]
) -> tuple[queue.Queue, list[threading.Thread]]:
    """One receiving thread per source, all feeding one queue: ``(source, kind, step,
    payload)`` per message, ``(source, None, reason, None)`` once a source's connection
    fails or it sends garbage. ``kinds``: accepted kind -> payload length (0: none)."""
    arrivals: queue.Queue = queue.Queue()

    def listen(source: int) -> None:
        def take(kind: Kind, step: int, payload: torch.Tensor | None) -> bool:
            arrivals.put((source, kind, step, payload))
            return kind not in (Kind.STOP, Kind.ABORT)

        receive_loop(
            group, source, kinds, take, lambda why: arrivals.put((source, None, why, None))
        )

    threads = [
        threading.Thread(
            target=listen, args=(source,), name=f"murmur-ps-{rank}-from-{source}", daemon=True
        )
        for source in sources
    ]
    for thread in threads:
        thread.start()
    return arrivals, threads


def _close(outbox: Outbox, threads: list[threading.Thread], timeout: float) -> None:
    """End the outbox and wait (at most ``timeout`` s) for the threads that are ending:
    a process that exits while one of them is still inside gloo aborts."""
    outbox.close()
    deadline = time.monotonic() + timeout
    for thread in [*outbox._threads, *threads]:
        thread.join(timeout=max(deadline - time.monotonic(), 0.0))


# ---------------------------------------------------------------- a worker


def _work(
    setup: Any, algorithm: Any, on_record: Callable, progress: bool, *, rank: int, timeout: float
) -> Outcome:
    """Worker ``rank - 1``: compute, push, pull until the server says STOP. The first
    model is the initial one, which every rank builds from the seed (as in the
    simulator, no message brings it)."""
    problem = setup.problem
    worker = rank - 1
    group = dist.group.WORLD
    length = setup.initial.shape[1]
    arrivals, threads = _listen(
        group, rank, [SERVER], {Kind.MODEL: length, Kind.STOP: 0, Kind.ABORT: 0}
    )
    outbox = Outbox(group, rank, [SERVER])
    outbox.start()
    started = time.perf_counter()
    pushes, computing = 0, 0.0
    message_bytes = length * 4
    # sync-ps holds the model until every worker's gradient is in, and names a silent
    # worker after one timeout: wait for its word a timeout longer than that.
    patience = 2 * timeout if algorithm.name == "sync-ps" else timeout
    model, version = setup.initial[0].to(torch.float32), 0
    try:
        while True:
            began = time.perf_counter()
            indices = problem.sampler.next_for(worker)
            _, grads = problem.model.loss_and_grad(
                model.view(1, -1), problem.x_train[indices][None], problem.y_train[indices][None]
            )
            gradient = grads[0].to(torch.float32).contiguous()
            computing += time.perf_counter() - began
            outbox.send(Kind.PUSH, version, [SERVER], timeout, gradient)
            pushes += 1
            try:
                _, kind, version, model = arrivals.get(timeout=patience)
            except queue.Empty:
                raise PeerTimeout(
                    [SERVER], f"the server (rank 0) sent nothing within {patience:g} s"
                ) from None
            if kind is None:
                raise PeerFailure([SERVER], f"the server (rank 0) {version}")
            if kind == Kind.ABORT:
                failed = version
                raise PeerFailure(
                    [failed], f"rank {failed} failed (the server stopped because of it)"
                )
            if kind == Kind.STOP:
                outbox.send(Kind.STOP, version, [SERVER], timeout)  # done: nothing more comes
                break
    finally:
        _close(outbox, threads, timeout)
    return Outcome(
        agents=1,
        topology="parameter server",
        iterations=pushes,
        last_record={},
        events_per_agent=[pushes],
        messages=pushes,
        bytes=pushes * message_bytes,
        train_seconds=computing or (time.perf_counter() - started),
        samples=pushes * problem.sampler.batch_size,
        extra={"runtime": "distributed", "worker": worker},
    )


# ---------------------------------------------------------------- the server


def _serve(
    setup: Any, config: Any, on_record: Callable, progress: bool, *, timeout: float
) -> Outcome:
    return _Server(setup, config, on_record, progress, timeout).train()


class _Server:
    def __init__(
        self, setup: Any, config: Any, on_record: Callable, progress: bool, timeout: float
    ) -> None:
        run_config = setup.config.run
        self.setup, self.config, self.on_record = setup, config, on_record
        self.problem = setup.problem
        self.timeout = timeout
        self.workers = config.workers
        self.ranks = list(range(1, self.workers + 1))
        self.synchronous = config.name == "sync-ps"
        self.group = self.workers if self.synchronous else config.group
        self.held: list[int] = []
        """sync-ps: workers whose gradient is in, waiting for the next model."""
        self.iterations = run_config.iterations
        self.eval_every = run_config.eval_every
        self.step = config.gradient_step()
        self.x = setup.initial[0].to(torch.float32).clone()
        self.message_bytes = self.x.numel() * 4
        self.version = 0
        self.pending: list[tuple[int, torch.Tensor, int]] = []
        """(rank, gradient, version read) of the gradients of the next update."""
        self.staleness: Counter[int] = Counter()
        self.gradients = 0
        self.pushes = [0] * self.workers
        self.server_messages = 0
        """MODEL messages sent."""
        self.control_messages = 0
        """STOP messages sent (headers only, not in ``messages`` or ``bytes``)."""
        self.failed: dict[int, str] = {}
        self.waiting_since: dict[int, float] = {}
        self.reached: dict[str, Any] | None = None
        self.last_record: dict[str, Any] = {}
        self.bar = tqdm(
            total=self.iterations, disable=not progress, unit="it", leave=False, dynamic_ncols=True
        )
        self.started = time.perf_counter()
        self.outbox = Outbox(dist.group.WORLD, SERVER, self.ranks)
        self.arrivals, self.threads = _listen(
            dist.group.WORLD, SERVER, self.ranks, {Kind.PUSH: self.x.numel(), Kind.STOP: 0}
        )

    def train(self) -> Outcome:
        self.outbox.start()
        self._evaluate()
        try:
            started = time.monotonic()  # every worker starts from the initial model
            self.waiting_since = dict.fromkeys(self.ranks, started)
            done = self.iterations <= 0
            while not done:
                self._require_workers()
                rank, kind, step, payload = self._next()
                if rank is None or rank in self.failed:
                    continue
                if kind != Kind.PUSH:
                    self._fail(rank, step if kind is None else "stopped before it was told to")
                    continue
                done = self._arrive(rank, payload, step)
                if done:
                    break
                if rank in self.failed:  # its gradient was refused
                    continue
                if not self.synchronous:
                    self._send_model(rank)
                    continue
                self.held.append(rank)
                if not self.pending:  # just updated: everyone gets the new model
                    for held in self.held:
                        self._send_model(held)
                    self.held = []
            self.bar.close()
            if self.last_record.get("iteration") != self.version:
                self._evaluate()
            self._stop_workers()
        finally:
            live = [self.threads[rank - 1] for rank in self.ranks if rank not in self.failed]
            _close(self.outbox, live, self.timeout)
        return self._outcome()

    def _require_workers(self) -> None:
        if self.synchronous and self.failed:
            rank, why = min(self.failed.items())
            self._abort_workers(rank)
            raise PeerFailure([rank], f"worker rank {rank} {why}; sync-ps cannot go on without it")
        if len(self.failed) == self.workers:
            reasons = "; ".join(f"rank {rank}: {why}" for rank, why in sorted(self.failed.items()))
            raise PeerFailure(sorted(self.failed), f"every worker failed ({reasons})")

    def _abort_workers(self, failed: int) -> None:
        """Best effort: tell the workers still there that rank ``failed`` failed."""
        live = [rank for rank in self.ranks if rank not in self.failed]
        if live:
            try:
                self.outbox.send(Kind.ABORT, failed, live, min(self.timeout, 2.0))
            except PeerFailure:
                pass  # going down too; nothing more to tell
            self.control_messages += len(live)

    def _next(self) -> tuple[Any, Any, Any, Any]:
        """The next arrival, or (None, ...) once a silent worker has been dropped: one
        that sent nothing for ``timeout`` s after it was sent the model, checked at every
        arrival (the others may keep the queue busy) and at the earliest deadline."""
        now = time.monotonic()
        silent = [r for r, since in self.waiting_since.items() if now - since >= self.timeout]
        for rank in silent:
            self._fail(rank, f"sent no gradient within {self.timeout:g} s")
        if silent:
            return None, None, None, None
        deadline = min(self.waiting_since.values(), default=now) + self.timeout
        try:
            return self.arrivals.get(timeout=max(deadline - now, 0.0))
        except queue.Empty:
            return None, None, None, None

    def _fail(self, rank: int, why: str) -> None:
        self.failed[rank] = why
        self.waiting_since.pop(rank, None)

    def _send_model(self, rank: int) -> None:
        try:
            self.outbox.send(Kind.MODEL, self.version, [rank], self.timeout, self.x)
        except PeerFailure as failure:
            self._fail(rank, f"did not take the model ({failure})")
            return
        self.server_messages += 1
        self.waiting_since[rank] = time.monotonic()

    def _arrive(self, rank: int, gradient: torch.Tensor, read_version: int) -> bool:
        """Take worker ``rank``'s gradient; True when the run is over."""
        self.waiting_since.pop(rank, None)
        if not 0 <= read_version <= self.version:
            self._fail(rank, f"pushed a gradient of version {read_version} of {self.version}")
            return False
        self.pushes[rank - 1] += 1
        self.gradients += 1
        self.pending.append((rank, gradient, read_version))
        if len(self.pending) < self.group:
            return False
        if self.synchronous:  # summed in worker order, whatever the order of arrival
            self.pending.sort(key=lambda item: item[0])
        alpha = self.step(self.version)
        total = torch.stack([g for _, g, _ in self.pending]).mean(dim=0)
        self.x.add_(total.to(self.x.dtype), alpha=-alpha)
        for _, _, read in self.pending:
            self.staleness[self.version - read] += 1
        self.pending = []
        self.version += 1
        self.bar.update(1)
        if self.version % self.eval_every == 0 or self.version >= self.iterations:
            record = self._evaluate()
            target = self.config.target_loss
            if self.reached is None and target > 0 and record["train_loss"] <= target:
                self.reached = record
                return True
        return self.version >= self.iterations

    def _stop_workers(self) -> None:
        """STOP to the workers still there, and wait (with the deadline) for theirs: a
        worker computing when it is told sends that gradient first (taken, not applied).
        One that does not take STOP or does not answer is listed as failed."""
        live = [rank for rank in self.ranks if rank not in self.failed]
        if not live:
            return
        try:
            self.outbox.send(Kind.STOP, self.version, live, self.timeout)
        except PeerFailure as failure:
            for rank in failure.ranks:
                self.failed.setdefault(rank, f"did not take STOP ({failure})")
        self.control_messages += len(live)
        waiting = {rank for rank in live if rank not in self.failed}
        deadline = time.monotonic() + self.timeout
        while waiting:
            try:
                rank, kind, step, _ = self.arrivals.get(
                    timeout=max(deadline - time.monotonic(), 0.0)
                )
            except queue.Empty:
                for rank in sorted(waiting):
                    self.failed[rank] = f"did not finish within {self.timeout:g} s"
                return
            if rank not in waiting:
                continue
            if kind == Kind.STOP:
                waiting.discard(rank)
            elif kind is None:
                waiting.discard(rank)
                self.failed[rank] = f"{step} before it finished"

    def _staleness_mean(self) -> float:
        applied = sum(self.staleness.values())
        total = sum(tau * count for tau, count in self.staleness.items())
        return total / applied if applied else 0.0

    def _evaluate(self) -> dict[str, Any]:
        problem = self.problem
        flat = self.x.view(1, -1)
        train_accuracy, train_loss = problem.model.evaluate(flat, problem.x_train, problem.y_train)
        record = {
            "iteration": self.version,
            "samples": self.gradients * problem.sampler.batch_size,
            "wall_seconds": time.perf_counter() - self.started,
            **test_set_metrics(problem.model, flat, problem.x_test, problem.y_test),
            "train_loss": float(train_loss[0]),
            "train_accuracy": float(train_accuracy[0]) if train_accuracy is not None else None,
            "consensus_distance": 0.0,
            "events": self.gradients,
            "messages": self.gradients + self.server_messages,
            "bytes": (self.gradients + self.server_messages) * self.message_bytes,
            "events_per_agent": list(self.pushes),
            "staleness_mean": self._staleness_mean(),
        }
        self.on_record(record)
        self.last_record = record
        return record

    def _outcome(self) -> Outcome:
        largest = max(self.staleness, default=0)
        histogram = [self.staleness.get(tau, 0) for tau in range(largest + 1)]
        extra = {
            "runtime": "distributed",
            "world_size": self.workers + 1,
            "workers": self.workers,
            "group": self.group,
            "staleness": {
                "mean": self._staleness_mean(),
                "max": largest,
                "histogram": histogram,
            },
            "train_loss": self.last_record["train_loss"],
            "target_loss": self.config.target_loss,
            "iterations_to_target": self.reached["iteration"] if self.reached else None,
            "wall_seconds_to_target": self.reached["wall_seconds"] if self.reached else None,
            "server_messages": self.server_messages,
            "control_messages": self.control_messages,
            "failed_workers": sorted(self.failed),
            "failures": {str(rank): why for rank, why in sorted(self.failed.items())},
        }
        return Outcome(
            agents=self.workers,
            topology="parameter server",
            iterations=self.version,
            last_record=self.last_record,
            events_per_agent=list(self.pushes),
            messages=self.gradients + self.server_messages,
            bytes=(self.gradients + self.server_messages) * self.message_bytes,
            train_seconds=time.perf_counter() - self.started,
            samples=self.gradients * self.problem.sampler.batch_size,
            parameters=self.x.view(1, -1).clone(),
            extra=extra,
        )
