"""The ranks of ``murmur launch``: forked from the launcher, on this machine.

A rank started afresh spends its first seconds importing Python, torch and murmur
(about 1.4 s of CPU each, so four ranks on two cores wait about 3 s before they
compute anything). The launcher has imported them already, so it forks its ranks
instead: each child starts with the launcher's modules loaded, sets the variables
torchrun would give it (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``, and
``TORCHELASTIC_RESTART_COUNT`` for a restart), names itself ``murmur rank N`` (as
``ps`` and ``/proc/PID/comm`` show it) and runs ``murmur run --runtime distributed``
with the launcher's plan. Rank 0 hosts the rendezvous store, as it does when ranks
are started by hand. Forking is safe here because the launcher has started no
threads of its own and the ranks use one torch thread; nothing is initialised for
gloo before the fork.

As torchrun does, the launcher waits for every rank; at the first one that fails it
gives the others :data:`GRACE` seconds to stop by themselves (they find out from their
transport, and rank 0 writes the run's failed summary), then stops those left
(SIGTERM, then SIGKILL after :data:`GRACE` seconds more) and, with
``max_restarts`` left, forks all of them again (they continue from their
checkpoints); it returns 0 or the first failed rank's exit status (128 + N for a
rank killed by signal N). SIGINT (Ctrl-C reaches every rank too) and SIGTERM to the
launcher stop every rank and return 128 + the signal. While it waits, SIGCHLD has its
default action, so that the ranks stay the launcher's to reap and their statuses
are read; a rank already reaped counts as gone.

The ranks die with their launcher, however it ends: each asks the kernel for SIGKILL
when its parent dies (Linux's parent-death signal, ``prctl(PR_SET_PDEATHSIG)``), so a
launcher killed with SIGKILL (a scheduler's time limit) leaves no rank running; a
rank whose launcher died before it could ask ends at once.
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence

GRACE = 5.0
"""Seconds the other ranks get to stop after SIGTERM before they are killed."""

_PR_SET_NAME = 15
"""prctl's option that names the calling thread (what /proc/PID/comm shows)."""
_PR_SET_PDEATHSIG = 1
"""prctl's option that sets the signal the calling process gets when its parent dies."""


class Stopped(Exception):
    """The launcher was told to stop (SIGINT or SIGTERM)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


Main = Callable[[list[str]], int]
"""What a rank runs: the command line's ``main`` with its ``murmur run`` arguments."""


def run_ranks(
    world: int,
    rank_argv: Sequence[str],
    address: str,
    port: int,
    max_restarts: int,
    main: Main,
    failed: Callable[[int, int], None] | None = None,
) -> int:
    """Fork ``world`` ranks, each running ``main(rank_argv)``, and wait for them,
    restarting all of them up to ``max_restarts`` times after a failure; their exit
    status. ``failed``: told the rank that failed first in the last attempt and its
    exit status, or -1 and 128 + the signal that stopped the launcher."""
    previous = {
        sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD)
    }

    def stop(signum: int, frame: object) -> None:
        raise Stopped(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # ranks stay ours to reap
    try:
        for attempt in range(max_restarts + 1):
            status, rank = _attempt(world, (rank_argv, main), address, port, attempt)
            if status == 0:
                break
        if status != 0 and failed is not None:
            failed(rank, status)
        return status
    except Stopped as stopped:  # told to stop: no restart
        if failed is not None:
            failed(-1, 128 + stopped.signum)
        return 128 + stopped.signum
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _attempt(
    world: int, command: tuple[Sequence[str], Main], address: str, port: int, attempt: int
) -> tuple[int, int]:
    """One start of every rank, waited for; the first failure's exit status and rank, or
    (0, -1). Told to stop, it stops the ranks and raises :class:`Stopped` again."""
    sys.stdout.flush()
    sys.stderr.flush()
    children: dict[int, int] = {}
    launcher = os.getpid()
    _libc()  # loaded here: a child of a process with threads must not load libraries
    try:
        for rank in range(world):
            pid = os.fork()
            if pid == 0:
                _die_with(launcher)
                _rank(rank, world, command, address, port, attempt)
            children[pid] = rank
        return _wait(children)
    except Stopped as stopped:
        _stop(children, stopped.signum)
        raise


def _rank(
    rank: int,
    world: int,
    command: tuple[Sequence[str], Main],
    address: str,
    port: int,
    attempt: int,
) -> None:
    """In the child: become rank ``rank`` and run it; never returns."""
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.environ.update(
            {
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "WORLD_SIZE": str(world),
                "LOCAL_WORLD_SIZE": str(world),
                "MASTER_ADDR": address,
                "MASTER_PORT": str(port),
                "TORCHELASTIC_RESTART_COUNT": str(attempt),
            }
        )
        os.environ.pop("TORCHELASTIC_USE_AGENT_STORE", None)
        _name(f"murmur rank {rank}")
        rank_argv, main = command
        code = main(list(rank_argv))
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 1
    except BaseException:  # a bug: its traceback, as an unforked process would print
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library, loaded once in the launcher before it forks (None where there is
    none to load)."""
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _die_with(launcher: int) -> None:
    """In the child: be killed when the launcher ends (where the system can), and end now
    if it already has."""
    libc = _libc()
    try:
        if libc is not None:
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except AttributeError:  # no prctl: not Linux
        pass
    if os.getppid() != launcher:  # it died between the fork and the request
        os._exit(1)


def _name(title: str) -> None:
    """Name this process (``/proc/PID/comm``, ``ps``), where the system can."""
    libc = _libc()
    try:
        if libc is not None:
            libc.prctl(_PR_SET_NAME, ctypes.c_char_p(title.encode()[:15]), 0, 0, 0)
    except AttributeError:
        pass


def _wait(children: dict[int, int]) -> tuple[int, int]:
    """Wait for every child; at the first failure stop the others (given :data:`GRACE`
    seconds to stop by themselves first). Its status and rank, or (0, -1)."""
    failed, rank = 0, -1
    while children:
        try:
            pid, status = os.wait()
        except ChildProcessError:  # reaped elsewhere: their statuses are lost
            return failed or 1, rank
        which = children.pop(pid, None)
        if which is None:
            continue
        code = os.waitstatus_to_exitcode(status)
        if code != 0 and not failed:
            failed, rank = (code if code > 0 else 128 - code), which
            _stop(children, signal.SIGTERM, grace=True)
            children.clear()
    return failed, rank


def _stop(children: dict[int, int], signum: int, grace: bool = False) -> None:
    """Stop the children left and reap them: after SIGINT (which Ctrl-C sends every
    rank too), or with ``grace`` (a rank failed, which the others find out), each first
    gets :data:`GRACE` seconds to stop by itself; then each is sent ``signum`` and,
    still running :data:`GRACE` seconds later, SIGKILL. Further signals to the launcher
    are ignored meanwhile."""
    handlers = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        left = set(children)
        if signum == signal.SIGINT or grace:
            left = _reaped(left, GRACE)
        for pid in left:
            _signal(pid, signum)
        for pid in _reaped(left, GRACE):
            _signal(pid, signal.SIGKILL)
            _reaped({pid}, GRACE)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def _reaped(pids: set[int], seconds: float) -> set[int]:
    """Reap those of ``pids`` that end within ``seconds``; the ones still running."""
    left = set(pids)
    deadline = time.monotonic() + seconds
    while left and time.monotonic() < deadline:
        for pid in list(left):
            try:
                done = os.waitpid(pid, os.WNOHANG)[0] == pid
            except ChildProcessError:  # already reaped: gone all the same
                done = True
            if done:
                left.discard(pid)
        if left:
            time.sleep(0.02)
    return left


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass
