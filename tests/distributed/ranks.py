"""Ranks of a distributed run as real processes on loopback, every process with a deadline.

``drive``: the ranks forked by one driver. torch is imported once, by the driver,
not once per rank: on two cores that is most of the cost. Each rank runs
``murmur.cli.main(argv)`` (or a ``main`` the test gives) with its own RANK in the
environment and its stderr in ``logs/rank{N}.err``. A rank can be killed by the
driver (``Kill``: a signal once a file appears) or fail by itself (``Fault``: a
function it calls, its batch sampler unless told otherwise, sleeps, raises or
signals the rank itself). The driver kills what is left at its deadline and
reports "hung".

``launch`` and ``start_launch``: ``murmur launch`` in a child, on a free loopback
port; ``kill_rank`` kills one of the ranks it forked. ``torchrun_machines``: torchrun
agents meeting at a rendezvous on loopback, as machines of one job would.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

DRIVER = r"""
import json, multiprocessing, os, signal, sys, time
spec = json.loads(sys.argv[1])
import torch
import murmur.cli
import murmur.distributed.runtime as distributed

main = murmur.cli.main
if spec["main"]:
    # the test's own rank body, run here once so that its imports are shared by the ranks
    body = {}
    exec(spec["main"], body)
    main = body["main"]


def keep_rank_0_parameters(path):
    run = distributed.run_distributed
    def keep_parameters(*args, **kwargs):
        result = run(*args, **kwargs)
        if result.parameters is not None:
            torch.save(result.parameters, path)
        return result
    distributed.run_distributed = keep_parameters


def patch(fault):
    import importlib
    module, _, path = fault["target"].partition(":")
    *owner_path, name = path.split(".")
    owner = importlib.import_module(module)
    for attribute in owner_path:
        owner = getattr(owner, attribute)
    call, calls = getattr(owner, name), []
    def patched(*args, **kwargs):
        calls.append(None)
        if fault["after"] is not None and len(calls) > fault["after"]:
            if fault["fail"] == "raise":
                raise RuntimeError("injected failure")
            os.kill(os.getpid(), fault["fail"])
        if fault["sleep"]:
            time.sleep(fault["sleep"])
        return call(*args, **kwargs)
    setattr(owner, name, patched)


def rank_main(rank):
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(spec["world"]),
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(spec["ports"][str(rank)]),
    )
    stderr = open(os.path.join(spec["logs"], f"rank{rank}.err"), "w")
    os.dup2(stderr.fileno(), 2)
    if spec["params"]:
        keep_rank_0_parameters(spec["params"])
    for fault in spec["faults"]:
        if rank in fault["ranks"]:
            patch(fault)
    sys.exit(main(spec["argv"]))


context = multiprocessing.get_context("fork")
ranks = {rank: context.Process(target=rank_main, args=(rank,)) for rank in spec["ranks"]}
started = time.monotonic()
for process in ranks.values():
    process.start()
deadline = started + spec["limit"]
killed_at = None
kill = spec["kill"]
if kill:
    while not os.path.exists(kill["when"]) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(kill["delay"])
    os.kill(ranks[kill["rank"]].pid, kill["signal"])
    killed_at = time.monotonic()
# A rank the driver kills, or one that stops itself, is not waited for.
unwatched = {kill["rank"]} if kill else set()
for fault in spec["faults"]:
    if fault["fail"] == signal.SIGSTOP:
        unwatched.update(fault["ranks"])
watched = [rank for rank in ranks if rank not in unwatched]
ended = {}
while len(ended) < len(watched) and time.monotonic() < deadline:
    for rank in watched:
        if rank not in ended and ranks[rank].exitcode is not None:
            ended[rank] = time.monotonic()
    time.sleep(0.01)
for rank, process in ranks.items():
    if process.exitcode is None:
        process.kill()
        process.join()
print(json.dumps({
    "codes": {rank: "hung" if rank in watched and rank not in ended else process.exitcode
              for rank, process in ranks.items()},
    "after_kill": {rank: t - killed_at for rank, t in ended.items()} if killed_at else {},
    "after_start": {rank: t - started for rank, t in ended.items()},
}))
"""


@dataclass(frozen=True)
class Kill:
    """The driver sends ``signal`` to ``rank`` ``delay`` s after the file ``when`` appears."""

    rank: int
    when: str
    delay: float
    signal: int


@dataclass(frozen=True)
class Fault:
    """On ``ranks``, ``target`` ("module:attribute.path") sleeps ``sleep`` s before each
    call; after ``after`` calls it fails: ``fail`` is "raise" (RuntimeError("injected
    failure")) or a signal the rank sends itself."""

    ranks: tuple[int, ...]
    target: str = "murmur.data.batches:BatchSampler.next_for"
    after: int | None = None
    fail: str | int | None = None
    sleep: float = 0.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch(
    argv: list[str], *, timeout: float = 90.0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m murmur ARGV --port P`` (a ``murmur launch``) on a free loopback port
    P, in ``env`` if given, to its end within ``timeout`` s: its status and output."""
    return subprocess.run(
        launch_command(argv), env=env, capture_output=True, text=True, timeout=timeout
    )


def start_launch(argv: list[str]) -> subprocess.Popen[str]:
    """``launch`` left running: the caller waits for it (``kill_rank`` does)."""
    return subprocess.Popen(
        launch_command(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def launch_command(argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "murmur", *argv, "--port", str(free_port())]


def rank_processes(parent: int) -> dict[int, int]:
    """The pids of ``parent``'s children that run a rank, by RANK: ``murmur launch``
    forks them and names each ``murmur rank N`` (its /proc/PID/comm)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            name = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) != parent:
            continue
        if name.startswith("murmur rank "):
            found[int(name.removeprefix("murmur rank "))] = int(entry.name)
    return found


def kill_rank(launched: subprocess.Popen, rank: int, when: Callable[[], bool]) -> str:
    """SIGKILL ``rank`` of the launched job once ``when()``; the launch's stderr."""
    try:
        deadline = time.monotonic() + 120
        while not when():
            assert time.monotonic() < deadline and launched.poll() is None, "too late to kill"
            time.sleep(0.02)
        os.kill(rank_processes(launched.pid)[rank], signal.SIGKILL)
        return launched.communicate(timeout=180)[1]
    finally:
        launched.kill()


def launch_beside_the_simulator(tmp_path: Path, preset: str, settings: list[str], nproc: int):
    """``murmur launch --nproc NPROC PRESET`` with ``settings``, bounded in time, on a free
    loopback port; its summary.json and the simulator's result of the same run."""
    from murmur.config import load_experiment
    from murmur.experiment import run

    flags = [item for setting in settings for item in ("--set", setting)]
    out = tmp_path / "launched"
    argv = ["launch", "--nproc", str(nproc), preset, *flags, "--out", str(out), "--quiet"]
    done = launch(argv, timeout=240)
    assert done.returncode == 0, done.stderr
    ((_, config),) = load_experiment(preset, settings).runs
    simulated = run(config, tmp_path / "simulated")
    return json.loads((out / "summary.json").read_text()), simulated


def torchrun_machines(
    rank_argv: list[str], machines: int, per_machine: int, timeout: float
) -> list[subprocess.CompletedProcess[str]]:
    """``machines`` torchrun agents of ``per_machine`` ranks each, every rank running
    ``python RANK_ARGV``, meeting at a c10d rendezvous on a free loopback port; each
    agent's status and output, all within ``timeout`` s."""
    from murmur.distributed.group import loopback_interface

    rendezvous = [
        f"--nnodes={machines}",
        f"--nproc-per-node={per_machine}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{free_port()}",
        "--rdzv-id=loopback",
    ]
    command = [sys.executable, "-m", "torch.distributed.run", *rendezvous, *rank_argv]
    environ = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "GLOO_SOCKET_IFNAME": loopback_interface() or "lo",
    }
    started = [
        subprocess.Popen(
            command, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(machines)
    ]
    try:
        outputs = [agent.communicate(timeout=timeout) for agent in started]
    finally:
        for agent in started:
            agent.kill()
    return [
        subprocess.CompletedProcess(command, agent.returncode, out, err)
        for agent, (out, err) in zip(started, outputs, strict=True)
    ]


def drive(
    tmp_path: Path,
    argv: list[str],
    world: int,
    *,
    ranks: list[int] | None = None,
    params: Path | None = None,
    kill: Kill | None = None,
    faults: tuple[Fault, ...] = (),
    apart: bool = False,
    main: str | None = None,
    limit: float = 60.0,
) -> tuple[dict, dict[int, str]]:
    """Fork the ranks, wait for them (at most ``limit`` s); the report and stderr per rank.

    The report has "codes" (exit status per rank, "hung" for one still running at
    the deadline), "after_start" and "after_kill" (seconds until each rank ended),
    keyed by the rank as a string. ``params``: where rank 0 saves its result's
    parameters. ``apart``: each rank gets a port of its own, so each is a job
    whose peers never come. ``main``: Python source defining ``main(argv)``, which
    each rank calls instead of ``murmur.cli.main`` (its exit status: what it returns).
    """
    logs = tmp_path / "logs"
    logs.mkdir()
    ranks = list(range(world)) if ranks is None else ranks
    port = free_port()
    spec = {
        "world": world,
        "ranks": ranks,
        "ports": {rank: free_port() if apart else port for rank in ranks},
        "argv": argv,
        "main": main,
        "logs": str(logs),
        "params": str(params) if params else None,
        "kill": asdict(kill) if kill else None,
        "faults": [asdict(fault) for fault in faults],
        "limit": limit,
    }
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=limit + 30,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    stderr = {rank: (logs / f"rank{rank}.err").read_text() for rank in ranks}
    return report, stderr


def run_ranks(
    folder: Path, argv: list[str], world: int = 4, limit: float = 60.0, **kwargs
) -> tuple[dict, dict[int, str]]:
    """``drive`` in a new ``folder``, every rank quiet and waiting 10 s at most for a peer."""
    folder.mkdir()
    return drive(folder, [*argv, "--quiet", "--timeout", "10"], world=world, limit=limit, **kwargs)


def read_records(folder: Path) -> list[dict]:
    """The records of a run folder's metrics.jsonl."""
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def assert_records_match(records: list[dict], expected: list[dict]) -> None:
    """A distributed run's records carry the simulator's counts exactly and its
    measurements to float tolerance (the simulator's virtual time aside)."""
    assert len(records) == len(expected)
    for got, want in zip(records, expected, strict=True):
        assert set(want) - set(got) <= {"virtual_seconds"}
        for key in ("iteration", "samples", "events", "messages", "bytes", "events_per_agent"):
            assert got[key] == want[key], key
        for key in ("test_loss", "test_accuracy", "consensus_distance", "model_loss"):
            assert got[key] == pytest.approx(want[key], abs=1e-5), key
        assert got["model_accuracy"] == pytest.approx(want["model_accuracy"], abs=1e-5)
        if want["train_loss"] is not None:
            assert got["train_loss"] == pytest.approx(want["train_loss"], abs=1e-5)


def assert_others_stop_naming(
    report: dict, stderr: dict[int, str], failed: int, timeout: float, frozen: bool
) -> None:
    """Every other rank ended with status 1 and one line ``rank R stopped: ...`` naming
    rank ``failed``, within two timeouts of the kill and 2 s of scheduling on a loaded
    2-core machine (of one, at the earliest, when ``frozen``: a silent rank is named at
    the deadline, not before)."""
    others = [rank for rank in report["codes"] if rank != str(failed)]
    for rank in others:
        assert report["codes"][rank] == 1, (report, stderr)
        lines = stderr[int(rank)].splitlines()
        assert len(lines) == 1, stderr[int(rank)]
        assert lines[0].startswith(f"murmur: error: rank {rank} stopped:"), lines[0]
        assert f"rank {failed}" in lines[0].split("stopped:", 1)[1], lines[0]
        assert report["after_kill"][rank] < 2 * timeout + 2.0, report
    if frozen:
        assert min(report["after_kill"].values()) >= timeout - 0.5, "named before the timeout?"


def assert_failed_naming(folder: Path, words: str) -> None:
    """Rank 0 left ``folder`` with a failed summary.json whose error says ``words``."""
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["status"] == "failed", summary
    assert words in summary["error"], summary["error"]
