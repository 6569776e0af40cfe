"""Hogwild! on this machine's cores: W processes, one shared-memory model, no locks.

The update rule is in :mod:`murmur.algorithms.hogwild`. Here the parameters are
one flat float32 vector (P,) in shared memory and each worker is a process
with one torch thread. Worker w draws its batches from its own stream (a
:class:`BatchSampler` of its shard, seeded by ``(run.seed, "hogwild", w)``, so
worker 0 draws the same batches whatever W is), computes the gradient with
``StackedModel.loss_and_grad`` on a (1, P) view of the shared vector, and
subtracts ``alpha_k`` times it in place (k: the worker's own step count).
Nothing in a step takes a lock or talks to another process. The
``run.iterations`` steps are handed out in chunks of ``STEP_CHUNK`` from one
shared counter, the only lock, taken once per chunk: a worker that another
process slows down makes fewer steps, and all end together. Besides the model,
a worker writes only its own step count, and its timings and loss at the end.

All workers wait at a barrier before their first step; the training time is
from the earliest start to the latest finish, so process start-up is not
counted. The parent blocks on the workers' exit, checking every second that
they still make steps; a worker that fails or stops making steps for
``stall_seconds`` ends the run with a ``RuntimeError``, and every worker is
stopped and joined whatever happens.

Processes are forked (``START_METHOD``): a child starts in milliseconds and
inherits the data and the model without a copy, where a spawned child
re-imports torch (about 2 s here) and receives the data pickled. After
``torch.set_num_threads(1)`` in the child, forking is reliable with torch here
even when the parent used several threads before. Where fork is missing the
workers are spawned; they then rebuild the model from the pickled module.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import connection
from multiprocessing.queues import SimpleQueue
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Barrier
from typing import TYPE_CHECKING, cast

import torch
import torch.multiprocessing as torch_mp
from torch import nn
from tqdm import tqdm

from murmur.algorithms.hogwild import HogwildConfig
from murmur.algorithms.schedules import Decaying
from murmur.data.batches import BatchSampler
from murmur.metrics.evaluation import model_columns, validation_columns
from murmur.metrics.record_types import EvaluationRecord, SgdRecord, SummaryExtra
from murmur.metrics.records import Outcome
from murmur.models.stacked import StackedModel, Task
from murmur.seeding import derive_seed
from murmur.training.progress import progress_bar
from murmur.training.reducer import AgentRows, sgd_record
from murmur.training.setup import Problem, SgdSetup

if TYPE_CHECKING:
    from multiprocessing.context import ForkContext, ForkServerContext, SpawnContext

START_METHOD = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
"""How worker processes are started (see the module docstring)."""

STALL_SECONDS = 120.0
"""A run whose workers make no step for this long (start-up included) is stopped."""

STEP_CHUNK = 16
"""Steps a worker claims at a time (a few milliseconds of work for small models)."""

_POLL_SECONDS = 1.0
_STOP_SECONDS = 5.0

# Columns of the shared (W, 5) status table each worker fills in.
_PID, _STARTED, _FINISHED, _CPU_SECONDS, _LOSS_SUM = range(5)


@dataclass(frozen=True)
class SharedTraining:
    """The end of one Hogwild! training."""

    params: torch.Tensor
    """The shared model after training, (1, P)."""
    train_seconds: float
    """From the first worker's first step to the last worker's last."""
    samples: int
    steps: list[int]
    """Steps made by each worker; they add up to ``iterations``."""
    train_loss: float | None
    """Mean mini-batch loss over all steps of all workers."""
    pids: list[int]
    """Process id of each worker."""
    intervals: list[tuple[float, float]]
    """``time.perf_counter()`` at each worker's start and finish (one clock for all)."""
    cpu_seconds: list[float]
    """CPU time each worker used between its start and finish; less than the interval
    when other processes took turns on its core."""


@dataclass(frozen=True)
class _Job:
    """Everything one worker needs; picklable, for spawned workers."""

    worker: int
    iterations: int
    claimed: Synchronized[int]
    """How many of the ``iterations`` steps the workers have claimed so far."""
    module: nn.Module
    task: Task
    x_train: torch.Tensor
    y_train: torch.Tensor
    shard: torch.Tensor
    batch_size: int
    seed: int
    step_size: Decaying
    params: torch.Tensor
    status: torch.Tensor
    step_counts: torch.Tensor
    barrier: Barrier
    errors: SimpleQueue[str]
    """Where a failing worker leaves one line saying why."""
    wait_seconds: float


def run_hogwild(
    setup: SgdSetup,
    algorithm: HogwildConfig,
    on_record: Callable[[EvaluationRecord], None],
    progress: bool,
) -> Outcome:
    """Train ``setup`` with W processes, then (``compare_single``) with one, and compare."""
    started = time.perf_counter()
    config = setup.config
    problem = setup.problem
    workers = algorithm.workers
    iterations = config.run.iterations

    def train(count: int) -> SharedTraining:
        return train_shared(
            problem,
            setup.initial,
            algorithm.gradient_step(),
            workers=count,
            iterations=iterations,
            seed=config.run.seed,
            progress=progress,
        )

    on_record(_record(problem, setup.initial, 0, 0, None, 0.0))
    trained = train(workers)
    last = _record(
        problem,
        trained.params,
        iterations,
        trained.samples,
        trained.train_loss,
        time.perf_counter() - started,
    )
    on_record(last)
    rate = trained.samples / max(trained.train_seconds, 1e-9)
    extra: SummaryExtra = {"workers": workers}
    if algorithm.compare_single and workers > 1:
        single = train(1)
        single_rate = single.samples / max(single.train_seconds, 1e-9)
        accuracy, _ = problem.model.evaluate(single.params, problem.x_test, problem.y_test)
        extra["single_process"] = {
            "samples_per_second": single_rate,
            "accuracy": float(accuracy[0]) if accuracy is not None else None,
        }
        extra["speedup"] = rate / single_rate
    return Outcome(
        agents=workers,
        topology="shared memory",
        iterations=iterations,
        last_record=last,
        events_per_agent=[0] * workers,
        messages=0,
        bytes=0,
        train_seconds=trained.train_seconds,
        samples=trained.samples,
        parameters=trained.params,
        extra=extra,
    )


def train_shared(
    problem: Problem,
    initial: torch.Tensor,
    step_size: Decaying,
    *,
    workers: int,
    iterations: int,
    seed: int,
    progress: bool = False,
    start_method: str = START_METHOD,
    stall_seconds: float = STALL_SECONDS,
) -> SharedTraining:
    """``iterations`` lock-free SGD steps in all, by ``workers`` processes, from ``initial``."""
    _check(problem, initial, workers)
    context = _context(start_method)
    params = initial.reshape(-1).to(torch.float32).clone().share_memory_()
    status = torch.zeros(workers, 5, dtype=torch.float64).share_memory_()
    step_counts = torch.zeros(workers, dtype=torch.int64).share_memory_()
    claimed = context.Value("q", 0)
    barrier = context.Barrier(workers)
    errors = context.SimpleQueue()
    jobs = [
        _Job(
            worker=w,
            iterations=iterations,
            claimed=claimed,
            module=problem.model.module,
            task=problem.model.task,
            x_train=problem.x_train,
            y_train=problem.y_train,
            shard=problem.sampler.shards[w],
            batch_size=problem.sampler.batch_size,
            seed=derive_seed(seed, "hogwild", w),
            step_size=step_size,
            params=params,
            status=status,
            step_counts=step_counts,
            barrier=barrier,
            errors=errors,
            wait_seconds=stall_seconds,
        )
        for w in range(workers)
    ]
    _run_jobs(context, jobs, step_counts, errors, stall_seconds, iterations, progress)
    done = status.numpy()
    total_steps = int(step_counts.sum())
    return SharedTraining(
        params=params.clone().view(1, -1),
        train_seconds=float(done[:, _FINISHED].max() - done[:, _STARTED].min()),
        samples=total_steps * problem.sampler.batch_size,
        steps=step_counts.tolist(),
        train_loss=float(done[:, _LOSS_SUM].sum()) / total_steps if total_steps else None,
        pids=[int(pid) for pid in done[:, _PID]],
        intervals=[(float(row[_STARTED]), float(row[_FINISHED])) for row in done],
        cpu_seconds=[float(seconds) for seconds in done[:, _CPU_SECONDS]],
    )


def _check(problem: Problem, initial: torch.Tensor, workers: int) -> None:
    if not 1 <= workers <= len(problem.sampler.shards):
        raise ValueError(
            f"workers must be between 1 and the {len(problem.sampler.shards)} shards, not {workers}"
        )
    if initial.numel() != problem.model.layout.total:
        raise ValueError(f"initial must hold one model of {problem.model.layout.total} parameters")


def _context(start_method: str) -> ForkContext | ForkServerContext | SpawnContext:
    """The multiprocessing context that starts processes by ``start_method``."""
    if start_method == "fork":
        return torch_mp.get_context("fork")
    if start_method == "forkserver":
        return torch_mp.get_context("forkserver")
    if start_method == "spawn":
        return torch_mp.get_context("spawn")
    raise ValueError(f"cannot find context for {start_method!r}")


def _run_jobs(
    context: ForkContext | ForkServerContext | SpawnContext,
    jobs: list[_Job],
    step_counts: torch.Tensor,
    errors: SimpleQueue[str],
    stall_seconds: float,
    iterations: int,
    progress: bool,
) -> None:
    """Start a process per job and supervise them; every one is stopped and joined
    whatever happens."""
    started: list[multiprocessing.process.BaseProcess] = []
    bar = progress_bar(progress, iterations)
    try:
        for job in jobs:
            process = context.Process(
                target=_work, args=(job,), name=f"hogwild worker {job.worker}", daemon=True
            )
            process.start()
            started.append(process)
        _supervise(started, step_counts, errors, stall_seconds, bar)
    finally:
        bar.close()
        _stop(started)


def _work(job: _Job) -> None:
    """A worker process: one torch thread, its own batches, steps on the shared model."""
    torch.set_num_threads(1)
    try:
        _steps(job)
    except BaseException as error:
        job.errors.put(f"{type(error).__name__}: {error}")
        raise


def _steps(job: _Job) -> None:
    model = StackedModel(job.module, job.task)
    sampler = BatchSampler([job.shard], job.batch_size, seed=job.seed)
    x_train, y_train, step_size = job.x_train, job.y_train, job.step_size
    flat = job.params.view(1, -1)
    step_counts = job.step_counts.numpy()  # numpy views: a plain store, no torch dispatch
    status = job.status.numpy()[job.worker]
    status[_PID] = os.getpid()
    loss_sum = 0.0
    job.barrier.wait(job.wait_seconds)
    status[_STARTED] = time.perf_counter()
    cpu_started = time.process_time()
    step = 0
    while (chunk := _claim(job.claimed, job.iterations)) > 0:
        for _ in range(chunk):
            indices = sampler.next()
            losses, grads = model.loss_and_grad(flat, x_train[indices], y_train[indices])
            flat.add_(grads, alpha=-step_size(step))
            loss_sum += losses.item()
            step += 1
        step_counts[job.worker] = step
    status[_FINISHED] = time.perf_counter()
    status[_CPU_SECONDS] = time.process_time() - cpu_started
    status[_LOSS_SUM] = loss_sum


def _claim(claimed: Synchronized[int], iterations: int) -> int:
    """Claim the next at most ``STEP_CHUNK`` of the steps left; 0 when none are left."""
    with claimed.get_lock():
        first = claimed.value
        chunk = min(STEP_CHUNK, iterations - first)
        claimed.value = first + chunk
    return chunk


def _supervise(
    processes: list[multiprocessing.process.BaseProcess],
    step_counts: torch.Tensor,
    errors: SimpleQueue[str],
    stall_seconds: float,
    bar: tqdm,
) -> None:
    """Wait for every worker to end; raise when one fails or all stop making steps."""
    running = {process.sentinel: process for process in processes}
    steps_seen, seen_at = 0, time.monotonic()
    while running:
        for sentinel in connection.wait(list(running), timeout=_POLL_SECONDS):
            process = running.pop(cast(int, sentinel))  # one of the sentinels given
            process.join()
            if process.exitcode != 0:
                reason = errors.get() if not errors.empty() else _exit_reason(process.exitcode)
                raise RuntimeError(f"hogwild: {process.name} failed: {reason}")
        steps = int(step_counts.sum())
        bar.update(steps - steps_seen)
        now = time.monotonic()
        if steps != steps_seen:
            steps_seen, seen_at = steps, now
        elif running and now - seen_at > stall_seconds:
            names = ", ".join(process.name for process in running.values())
            raise RuntimeError(
                f"hogwild: no step made in {stall_seconds:g} s; stopped {names} (hung?)"
            )


def _exit_reason(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        return f"killed by signal {-exitcode}"
    return f"exit status {exitcode}"


def _stop(processes: list[multiprocessing.process.BaseProcess]) -> None:
    """Terminate the workers still running (kill them if they ignore it), join all."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(_STOP_SECONDS)
        if process.is_alive():
            process.kill()
            process.join()


def _record(
    problem: Problem,
    params: torch.Tensor,
    iteration: int,
    samples: int,
    train_loss: float | None,
    wall_seconds: float,
) -> SgdRecord:
    """An evaluation record of the simulator's schema (one model, nothing sent)."""
    accuracy, loss = problem.model.evaluate(params, problem.x_test, problem.y_test)
    rows = AgentRows(
        test_accuracy=accuracy.tolist() if accuracy is not None else None,
        test_loss=loss.tolist(),
        events=[0],
        messages=[0],
        bytes=[0],
    )
    return sgd_record(
        iteration,
        rows,
        samples=samples,
        wall_seconds=wall_seconds,
        train_loss=train_loss,
        consensus_distance=0.0,
        model=model_columns(accuracy, loss),  # the one model
        validation=validation_columns(problem.model, params, problem.validation),
    )
