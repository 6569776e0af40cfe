"""One job writes a run folder at a time: the lock a run holds on its folder.

The process that writes a run folder (``murmur run``, ``murmur launch``, rank 0 of a
distributed run started by hand or by torchrun) holds an exclusive ``flock`` on the
folder's :data:`LOCK_FILE`, which names the holder: its host, PID, command and the
time it took the lock. A second run or resume into the folder finds the lock held and
is refused in one line naming the holder. The kernel drops a ``flock`` when the last
process holding it ends, however it ends (SIGKILL included), so a folder whose job is
gone is taken over by the next run at once, with no stale lock to remove by hand. A
holder that ends normally removes the lock file once the folder has its summary; one
that lets go before (a resume refused after it took the lock) puts back what the file
said, so that the folder still names the last job that wrote it
(:func:`murmur.training.runs.last_job`).

A process that holds a folder's lock may take it again (a resume first checks the
folder, then trains into it): the lock is counted, and released with the last hold.
``murmur launch`` takes the lock before it forks its ranks, which inherit the hold
with the rest of the launcher's memory: rank 0 takes it again and goes on, and ranks
that outlive their launcher keep the folder locked until they end. Where there is no
``flock`` (Windows, a file system without locks) folders are named but not locked.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from murmur.errors import UsageError

if sys.platform != "win32":
    import fcntl

LOCK_FILE = ".murmur-lock"
"""The lock's file in the run folder, while a job writes it."""


@dataclass(frozen=True)
class Holder:
    """Who holds (or last held) a folder's lock, as its lock file says."""

    host: str
    pid: int
    command: str
    since: str

    def describe(self) -> str:
        return f"{self.command} (PID {self.pid} on {self.host}, since {self.since})"


class FolderLock:
    """This process's hold on a folder's lock; :meth:`release` lets it go."""

    def __init__(self, folder: Path, descriptor: int, previous: bytes) -> None:
        self.folder = folder
        self._descriptor = descriptor
        self._previous = previous
        self.holds = 1

    def release(self) -> None:
        """Let go of one hold; the last drops the lock, and removes the lock file where the
        folder has its summary (else puts back the previous holder's name)."""
        self.holds -= 1
        if self.holds > 0:
            return
        _HELD.pop(self.folder, None)
        try:
            if (self.folder / "summary.json").exists() or not self._previous:
                (self.folder / LOCK_FILE).unlink(missing_ok=True)
            else:
                os.ftruncate(self._descriptor, 0)
                os.pwrite(self._descriptor, self._previous, 0)
        except OSError:
            pass
        os.close(self._descriptor)  # drops the flock

    def __enter__(self) -> FolderLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


_HELD: dict[Path, FolderLock] = {}
"""The folders this process holds, by resolved path."""


def lock_folder(folder: Path, command: str | None = None) -> FolderLock:
    """Take the lock of ``folder`` (which must exist) for this process, or another hold
    of one it has; UsageError, in one line naming the holder, when another job holds it.
    ``command``: what the lock file says the holder is (default: this process's command
    line)."""
    key = folder.resolve()
    held = _HELD.get(key)
    if held is not None:
        held.holds += 1
        return held
    descriptor, previous = _take(key, command or _command_line())
    lock = FolderLock(key, descriptor, previous)
    _HELD[key] = lock
    return lock


def holder(folder: Path) -> Holder | None:
    """Who the lock file of ``folder`` names (None: there is none, or it is unreadable)."""
    try:
        data: Any = json.loads((folder / LOCK_FILE).read_text())
        return Holder(str(data["host"]), int(data["pid"]), str(data["command"]), str(data["since"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def is_locked(folder: Path) -> bool:
    """Whether a live job (another process than this one) holds ``folder``'s lock."""
    if folder.resolve() in _HELD or not (folder / LOCK_FILE).exists():
        return False
    try:
        descriptor = os.open(folder / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return False
    try:
        return not _flock(descriptor, exclusive=False)
    finally:
        os.close(descriptor)


def _flock(descriptor: int, exclusive: bool) -> bool:
    """Take an ``flock`` on ``descriptor`` without waiting; False when another process
    holds one that excludes it. Where there is no ``flock`` (Windows, or a file system
    without locks) every folder is written unlocked: True."""
    if sys.platform == "win32":
        return True
    try:
        fcntl.flock(descriptor, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:  # a file system without locks
        return True
    return True


def refuse_if_locked(folder: Path) -> None:
    """UsageError, in one line naming the holder, when a live job writes ``folder``."""
    if is_locked(folder):
        raise UsageError(_busy(folder))


def _take(folder: Path, command: str) -> tuple[int, bytes]:
    """The descriptor of ``folder``'s lock file, locked, the holder's name written in it,
    and what the file said before (a job that is gone; empty for a new file)."""
    path = folder / LOCK_FILE
    for _ in range(10):  # another holder may remove the file between open and flock
        try:
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise UsageError(f"cannot lock {folder}: {error.strerror or error}") from None
        if not _flock(descriptor, exclusive=True):
            os.close(descriptor)
            raise UsageError(_busy(folder))
        if _same_file(descriptor, path):
            previous = os.pread(descriptor, 4096, 0)
            _write_holder(descriptor, command)
            return descriptor, previous
        os.close(descriptor)
    raise UsageError(f"cannot lock {folder}: its lock file keeps changing")


def _same_file(descriptor: int, path: Path) -> bool:
    """Whether ``path`` is still the file ``descriptor`` has open (not removed meanwhile)."""
    try:
        return os.stat(path).st_ino == os.fstat(descriptor).st_ino
    except OSError:
        return False


def _write_holder(descriptor: int, command: str) -> None:
    text = json.dumps(
        {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "command": command,
            "since": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
    )
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, text.encode(), 0)


def _busy(folder: Path) -> str:
    """The one line that refuses ``folder`` while another job writes it."""
    named = holder(folder)
    who = named.describe() if named is not None else "another job"
    return (
        f"{folder} is being written by {who}; wait for that job to end or stop it "
        "(its lock goes with its last process), or choose another --out"
    )


def _command_line() -> str:
    """This process's command, as the lock file names it: ``murmur run ...``."""
    words = [Path(sys.argv[0]).name if sys.argv else "python", *sys.argv[1:]]
    if words[0] in ("__main__.py", "-m"):
        words[0] = "murmur"
    text = " ".join(words)
    return text if len(text) <= 60 else text[:57] + "..."
