"""AsySG-con and sync-ps in the distributed runtime: a parameter server on rank 0,
workers on 1..W.

Workers loop: compute a mini-batch gradient on their own batch stream (worker
``w`` on rank ``w + 1`` draws ``sampler.next_for(w)``), push it (PUSH, header
``step`` = the version read), receive the next model (MODEL, header ``step`` =
the server's version) from rank 0. The first model is the initial one, which
every rank builds from the seed, so no message brings it (as in the simulator).
The server has one receiving thread per worker (a pending gloo receive cannot be
polled) feeding one queue. What it does with each gradient is the rule of
``murmur.algorithms.param_server.ParameterServer``, shared with the simulator:
it applies the mean of every M gradients with the step schedule as they
arrive, counts each one's staleness (server version at apply - version read)
and answers each push with its current model. It stops after
``run.iterations`` updates or once the training loss (evaluated every
``run.eval_every`` updates) reaches ``algorithm.target_loss``, or once a rule of
``[collapse]`` stops the run at an evaluation (the server alone makes the records, so
it alone judges them), then sends STOP to the workers still there. This module is the
wire: threads, outbox, deadlines, failures, STOP and ABORT, and the workers' loop.

Every wait has a deadline (``timeout``). A worker whose connection closes, that
sends something malformed, or that sends nothing for ``timeout`` seconds since
the start or since it was sent the model is dropped and listed in
``failed_workers`` (so is one that pushes a gradient of a version the server
never had); the server carries on with the others, and fails (PeerFailure) only when none is left. A
worker whose server stops answering fails on its own deadline. Rank 0 writes
the run folder; the records carry real wall-clock times only.

sync-ps is the same server holding every answer until all W gradients of the
current model are in; it applies their mean (summed in worker order, as the
simulator does with equal workers) and sends the new model to all. Being
synchronous, it does not carry on without a worker: when one fails, the server
tells the others (ABORT naming it) and every rank stops with one line naming it.

With ``run.checkpoint_every = k`` the server saves the run every k updates, its
answers sent, as rank 0's file of :mod:`murmur.distributed.checkpoints`: the rule's state,
its counters and how many records it wrote. A resumed or restarted run restores
it and tells the workers (two broadcasts, before any message) the model, its
version and how many gradients it took from each; a worker moves its batch
stream past those and starts again from that model.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple, TypedDict

import torch
import torch.distributed as dist

from murmur.algorithms.asysg import SyncPsConfig, WorkersConfig
from murmur.algorithms.param_server import ParameterServer, Times, model_metrics
from murmur.config import Config
from murmur.distributed.checkpoints import RankCheckpoints, Start, rank_file, readable_iterations
from murmur.distributed.failures import PeerFailure, PeerTimeout
from murmur.distributed.outbox import Outbox
from murmur.distributed.transport import world_group
from murmur.distributed.wire import Kind, receive_loop
from murmur.errors import UsageError
from murmur.metrics.record_types import EvaluationRecord, ServerRecord, SummaryExtra
from murmur.metrics.records import Outcome
from murmur.training.checkpoint import read_checkpoint
from murmur.training.progress import progress_bar
from murmur.training.setup import Problem, SgdSetup

SERVER = 0

OnRecord = Callable[[EvaluationRecord], None]


class Received(NamedTuple):
    """A message a receiving thread queued: from ``source``, of ``kind``, numbered
    ``step``."""

    source: int
    kind: Kind
    step: int
    payload: torch.Tensor | None

    def floats(self) -> torch.Tensor:
        """The payload of a MODEL or a PUSH (accepted with a model's floats only)."""
        if self.payload is None:
            raise ValueError(f"a {self.kind.name} without a payload")
        return self.payload


class Lost(NamedTuple):
    """What a receiving thread queues once ``source`` is heard no more: its connection
    failed, or it sent something malformed (``reason``)."""

    source: int
    reason: str


Message = Received | Lost
"""What a receiving thread queues."""


def _workers(config: Config) -> int:
    """The workers of the run's algorithm, a parameter-server one."""
    algorithm = config.algorithm
    if not isinstance(algorithm, WorkersConfig):
        raise TypeError(f"{algorithm.name} has no parameter server and no workers")
    return algorithm.workers


def server_runner(
    rank: int,
    timeout: float,
    saves: RankCheckpoints | None = None,
    start: Start = "new",
) -> Callable:
    """The runner of this rank of an AsySG-con or sync-ps run: the server on rank 0,
    a worker on the others (the plan checked that the ranks are the workers plus one).
    ``saves``: where and how often the server saves the run (every k updates);
    ``start``: "resume" and "restart" continue from the server's newest checkpoint
    (:func:`_resumed`)."""
    if rank == SERVER:
        return partial(_serve, timeout=timeout, saves=saves, start=start)
    return partial(_work, rank=rank, timeout=timeout, start=start, saves=saves)


# ---------------------------------------------------------------- checkpoints


def newest_server_checkpoint(saves: RankCheckpoints, config: Config) -> dict[str, Any] | None:
    """The server's newest readable checkpoint (rank 0's file), or None."""
    if saves.path is None:
        return None
    held = readable_iterations(saves.path, SERVER, config)
    if not held:
        return None
    return read_checkpoint(rank_file(saves.path, SERVER, held[-1]), config)


def _resumed(
    setup: SgdSetup, saves: RankCheckpoints | None, rank: int, start: Start
) -> tuple[dict[str, Any] | None, int, torch.Tensor | None, list[int]]:
    """Collective, before any message: the server's newest checkpoint, told to every
    rank. Returns (the server's saved state (rank 0 only), the version, its model,
    each worker's pushes taken); (None, 0, None, []) to start over, when the server
    saved none and the ranks were restarted. Only the server saves: a worker's
    batch stream stands at the gradients the server took from it, and it starts
    again from the saved model (gradients in flight at the kill are computed
    again). Later files of the server, which the run saves again, are removed."""
    config = setup.config
    workers = _workers(config)
    saved = None
    if rank == SERVER and saves is not None:
        saved = newest_server_checkpoint(saves, config)
    head = torch.full((2 + workers,), -1, dtype=torch.int64)
    if saved is not None:
        server = saved["state"]["server"]
        head[0], head[1] = saved["done"], server["version"]
        head[2:] = torch.tensor(server["pushes"], dtype=torch.int64)
    dist.broadcast(head, SERVER)
    done = int(head[0])
    if done < 0:
        if start == "resume":
            raise UsageError(
                f"rank {rank}: the server (rank 0) holds no checkpoint; there is nothing "
                "to resume from"
            )
        if rank == SERVER and saves is not None:
            saves.discard_after(-1)
        return None, 0, None, []
    model = setup.initial[0].to(torch.float32).clone()
    if saved is not None:
        model.copy_(saved["state"]["server"]["x"])
    dist.broadcast(model, SERVER)
    if rank == SERVER and saves is not None:
        saves.discard_after(done)
    state = saved["state"] if saved is not None else None
    return state, int(head[1]), model, head[2:].tolist()


# ---------------------------------------------------------------- receiving


def _listen(
    group: dist.ProcessGroup, rank: int, sources: list[int], kinds: dict[int, int]
) -> tuple[queue.Queue[Message], list[threading.Thread]]:
    """One receiving thread per source, all feeding one queue: a :class:`Received` per
    message, a :class:`Lost` once a source's connection fails or it sends garbage.
    ``kinds``: accepted kind -> payload length (0: none)."""
    arrivals: queue.Queue[Message] = queue.Queue()

    def listen(source: int) -> None:
        def take(kind: Kind, step: int, payload: torch.Tensor | None) -> bool:
            arrivals.put(Received(source, kind, step, payload))
            return kind not in (Kind.STOP, Kind.ABORT)

        receive_loop(group, source, kinds, take, lambda why: arrivals.put(Lost(source, why)))

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
    setup: SgdSetup,
    algorithm: WorkersConfig,
    on_record: OnRecord,
    progress: bool,
    *,
    rank: int,
    timeout: float,
    start: Start = "new",
    saves: RankCheckpoints | None = None,
) -> Outcome:
    """Worker ``rank - 1``: compute, push, pull until the server says STOP. The first
    model is the initial one, which every rank builds from the seed (as in the
    simulator, no message brings it); a resumed worker's is the server's saved one."""
    problem = setup.problem
    worker = rank - 1
    group = world_group()
    length = setup.initial.shape[1]
    model, version = _first_model(setup, saves, rank, start)
    arrivals, threads = _listen(
        group, rank, [SERVER], {Kind.MODEL: length, Kind.STOP: 0, Kind.ABORT: 0}
    )
    outbox = Outbox(group, rank, [SERVER])
    outbox.start()
    started = time.perf_counter()
    pushes, computing = 0, 0.0
    # sync-ps holds the model until every worker's gradient is in, and names a silent
    # worker after one timeout: wait for its word a timeout longer than that.
    patience = 2 * timeout if algorithm.name == "sync-ps" else timeout
    try:
        while True:
            began = time.perf_counter()
            gradient = _gradient(problem, worker, model)
            computing += time.perf_counter() - began
            outbox.send(Kind.PUSH, version, [SERVER], timeout, gradient)
            pushes += 1
            word = _from_server(arrivals, patience)
            version = word.step
            if word.kind == Kind.STOP:
                outbox.send(Kind.STOP, version, [SERVER], timeout)  # done: nothing more comes
                break
            model = word.floats()
    finally:
        _close(outbox, threads, timeout)
    train_seconds = computing or (time.perf_counter() - started)
    return _worker_outcome(problem, worker, pushes, length * 4, train_seconds)


def _first_model(
    setup: SgdSetup, saves: RankCheckpoints | None, rank: int, start: Start
) -> tuple[torch.Tensor, int]:
    """The model worker ``rank - 1`` starts from, and its version: the initial one, or
    when resumed (collective: :func:`_resumed`) the server's saved one, the worker's
    batch stream then moved past the gradients the server took from it."""
    model, version = setup.initial[0].to(torch.float32), 0
    if start != "new":
        worker = rank - 1
        _, saved_version, saved_model, taken = _resumed(setup, saves, rank, start)
        if saved_model is not None:
            model, version = saved_model, saved_version
            for _ in range(taken[worker]):  # the batches of the gradients the server took
                setup.problem.sampler.next_for(worker)
    return model, version


def _gradient(problem: Problem, worker: int, model: torch.Tensor) -> torch.Tensor:
    """Worker ``worker``'s gradient of ``model`` on its next mini-batch, float32."""
    _, grads = problem.model.loss_and_grad(model.view(1, -1), *problem.worker_batch(worker))
    return grads[0].to(torch.float32).contiguous()


def _worker_outcome(
    problem: Problem, worker: int, pushes: int, message_bytes: int, train_seconds: float
) -> Outcome:
    """What a worker reports at the end: its ``pushes`` of ``message_bytes`` each."""
    return Outcome(
        agents=1,
        topology="parameter server",
        iterations=pushes,
        last_record={"iteration": pushes},  # a worker evaluates nothing
        events_per_agent=[pushes],
        messages=pushes,
        bytes=pushes * message_bytes,
        train_seconds=train_seconds,
        samples=pushes * problem.sampler.batch_size,
        extra={"runtime": "distributed", "worker": worker},
    )


def _from_server(arrivals: queue.Queue[Message], patience: float) -> Received:
    """The server's next word to a worker: a MODEL or STOP; PeerTimeout after
    ``patience`` s of silence, PeerFailure if its connection failed or it sent ABORT
    (naming the rank that failed)."""
    try:
        word = arrivals.get(timeout=patience)
    except queue.Empty:
        raise PeerTimeout(
            [SERVER], f"the server (rank 0) sent nothing within {patience:g} s"
        ) from None
    if isinstance(word, Lost):
        raise PeerFailure([SERVER], f"the server (rank 0) {word.reason}")
    if word.kind == Kind.ABORT:
        raise PeerFailure(
            [word.step], f"rank {word.step} failed (the server stopped because of it)"
        )
    return word


# ---------------------------------------------------------------- the server


def _serve(
    setup: SgdSetup,
    config: WorkersConfig,
    on_record: OnRecord,
    progress: bool,
    *,
    timeout: float,
    saves: RankCheckpoints | None = None,
    start: Start = "new",
) -> Outcome:
    resumed = _resumed(setup, saves, SERVER, start)[0] if start != "new" else None
    server = _Server(setup, config, on_record, progress, timeout, saves)
    return server.train(resumed)


class ServerRankSnapshot(TypedDict):
    """What the server's checkpoint file holds after an update, its answers sent."""

    server: dict[str, Any]
    """The server's rule (:meth:`~murmur.algorithms.param_server.ParameterServer.state_dict`)."""
    control_messages: int
    records: int
    """Records written to metrics.jsonl so far."""


class _Server:
    """The wire side of the server: receiving, answering, deadlines and failures. What
    to do with each gradient is ``self.server``'s (``ParameterServer``)."""

    def __init__(
        self,
        setup: SgdSetup,
        config: WorkersConfig,
        on_record: OnRecord,
        progress: bool,
        timeout: float,
        saves: RankCheckpoints | None = None,
    ) -> None:
        run_config = setup.config.run
        self.saves = saves if saves is not None and saves.every > 0 else None
        self.records = 0
        """Records written so far."""
        self.on_record = on_record
        self.stop_requested = setup.stop_requested
        """Whether a rule of ``[collapse]`` ended the run at the evaluation just made."""
        self.problem = setup.problem
        self.timeout = timeout
        self.workers = config.workers
        self.ranks = list(range(1, self.workers + 1))
        self.server = ParameterServer(
            config,
            setup.initial[0].to(torch.float32),
            run_config.iterations,
            run_config.eval_every,
            batch_size=self.problem.sampler.batch_size,
            # sync-ps: the arrival order of a round is not reproducible, worker order is
            order_by_worker=isinstance(config, SyncPsConfig),
        )
        self.control_messages = 0
        """STOP messages sent (headers only, not in ``messages`` or ``bytes``)."""
        self.failed: dict[int, str] = {}
        self.waiting_since: dict[int, float] = {}
        self.bar = progress_bar(progress, run_config.iterations)
        self.started = time.perf_counter()
        group = world_group()
        self.outbox = Outbox(group, SERVER, self.ranks)
        self.arrivals, self.threads = _listen(
            group, SERVER, self.ranks, {Kind.PUSH: self.server.x.numel(), Kind.STOP: 0}
        )

    def train(self, resumed: dict[str, Any] | None = None) -> Outcome:
        """Serve until done; from the ``resumed`` state of a checkpoint, if given."""
        server = self.server
        self.outbox.start()
        if resumed is None:
            self._evaluate()
        else:
            self._resume(resumed)
        try:
            started = time.monotonic()  # every worker starts from the initial model
            self.waiting_since = dict.fromkeys(self.ranks, started)
            while not server.done and not self.stop_requested():
                self._require_workers()
                message = self._next()
                if message is None or message.source in self.failed:
                    continue
                if isinstance(message, Lost):
                    self._fail(message.source, message.reason)
                elif message.kind != Kind.PUSH:
                    self._fail(message.source, "stopped before it was told to")
                else:
                    self._arrive(message.source, message.floats(), message.step)
            self.bar.close()
            if server.final_evaluation_due:
                self._evaluate()
            self._stop_workers()
        finally:
            live = [self.threads[rank - 1] for rank in self.ranks if rank not in self.failed]
            _close(self.outbox, live, self.timeout)
        return self._outcome()

    def _arrive(self, rank: int, gradient: torch.Tensor, read_version: int) -> None:
        """Take worker ``rank``'s gradient (refused, failing the worker, unless its
        version is one the server has had) and send the models it is owed."""
        server = self.server
        self.waiting_since.pop(rank, None)
        try:
            arrival = server.receive(rank - 1, gradient, read_version)
        except ValueError as refused:
            self._fail(rank, f"pushed {refused}")
            return
        if arrival.applied:
            self.bar.update(1)
        for worker in server.answers(arrival, self._evaluate):
            self._send_model(worker + 1)
        if arrival.applied and self.saves is not None and not server.done:
            if self.saves.due(server.version, server.iterations):
                self.saves.save(server.version, self._snapshot())

    def _snapshot(self) -> ServerRankSnapshot:
        """The server's part of the run after an update, its answers sent."""
        return {
            "server": self.server.state_dict(),
            "control_messages": self.control_messages,
            "records": self.records,
        }

    def _resume(self, saved: dict[str, Any]) -> None:
        """Continue from :meth:`_snapshot`; the workers start again from its model."""
        try:
            self.server.load_state_dict(saved["server"])
            self.control_messages = int(saved["control_messages"])
            self.records = int(saved["records"])
        except (KeyError, TypeError, ValueError, RuntimeError) as error:
            raise UsageError(f"the server's checkpoint does not fit this run: {error}") from None
        self.bar.update(self.server.version)

    def _require_workers(self) -> None:
        if self.server.synchronous and self.failed:
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

    def _next(self) -> Message | None:
        """The next arrival, or None once a silent worker has been dropped: one
        that sent nothing for ``timeout`` s after it was sent the model, checked at every
        arrival (the others may keep the queue busy) and at the earliest deadline."""
        now = time.monotonic()
        silent = [r for r, since in self.waiting_since.items() if now - since >= self.timeout]
        for rank in silent:
            self._fail(rank, f"sent no gradient within {self.timeout:g} s")
        if silent:
            return None
        deadline = min(self.waiting_since.values(), default=now) + self.timeout
        try:
            return self.arrivals.get(timeout=max(deadline - now, 0.0))
        except queue.Empty:
            return None

    def _fail(self, rank: int, why: str) -> None:
        self.failed[rank] = why
        self.waiting_since.pop(rank, None)

    def _send_model(self, rank: int) -> None:
        try:
            self.outbox.send(Kind.MODEL, self.server.version, [rank], self.timeout, self.server.x)
        except PeerFailure as failure:
            self._fail(rank, f"did not take the model ({failure})")
            return
        self.server.sent()
        self.waiting_since[rank] = time.monotonic()

    def _stop_workers(self) -> None:
        """STOP to the workers still there, and wait (with the deadline) for theirs: a
        worker computing when it is told sends that gradient first (taken, not applied).
        One that does not take STOP or does not answer is listed as failed."""
        live = [rank for rank in self.ranks if rank not in self.failed]
        if not live:
            return
        try:
            self.outbox.send(Kind.STOP, self.server.version, live, self.timeout)
        except PeerFailure as failure:
            for rank in failure.ranks:
                self.failed.setdefault(rank, f"did not take STOP ({failure})")
        self.control_messages += len(live)
        waiting = {rank for rank in live if rank not in self.failed}
        deadline = time.monotonic() + self.timeout
        while waiting:
            try:
                message = self.arrivals.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                for rank in sorted(waiting):
                    self.failed[rank] = f"did not finish within {self.timeout:g} s"
                return
            if message.source not in waiting:
                continue
            if isinstance(message, Lost):
                waiting.discard(message.source)
                self.failed[message.source] = f"{message.reason} before it finished"
            elif message.kind == Kind.STOP:
                waiting.discard(message.source)

    def _evaluate(self) -> ServerRecord:
        problem = self.problem
        clock: Times = {"wall_seconds": time.perf_counter() - self.started}
        train, test = (problem.x_train, problem.y_train), (problem.x_test, problem.y_test)
        metrics = model_metrics(
            problem.model,
            self.server.x,
            train,
            test,
            gradient_norm=self.server.config.gradient_norm,
            validation=problem.validation,
        )
        record = self.server.record(clock, metrics)
        self.on_record(record)
        self.records += 1
        return record

    def _outcome(self) -> Outcome:
        extra: SummaryExtra = {
            "runtime": "distributed",
            "world_size": self.workers + 1,
            **self.server.extra("wall_seconds"),
            "control_messages": self.control_messages,
            "failed_workers": sorted(self.failed),
            "failures": {str(rank): why for rank, why in sorted(self.failed.items())},
        }
        return self.server.outcome(time.perf_counter() - self.started, extra)
