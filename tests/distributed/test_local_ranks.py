"""The ranks ``murmur launch`` forks: each gets torchrun's variables and its name,
the first failure stops the others and is the exit status, ``max_restarts`` forks
them all again, and a signal to the launcher stops them without a restart."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from murmur.distributed.local_ranks import run_ranks


def _mark(folder: Path, rank: int) -> None:
    attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
    name = Path(f"/proc/{os.getpid()}/comm")
    comm = name.read_text().strip() if name.exists() else ""
    variables = [os.environ[key] for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")]
    (folder / f"rank{rank}-attempt{attempt}").write_text(" ".join([*variables, comm]))


def _wait_for(path: Path, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_every_rank_gets_torchrun_s_variables_and_its_name(tmp_path):
    def main(argv: list[str]) -> int:
        _mark(tmp_path, int(os.environ["RANK"]))
        return 0 if argv == ["run", "x"] else 9

    assert run_ranks(3, ["run", "x"], "127.0.0.1", 29999, 0, main) == 0
    for rank in range(3):
        words = (tmp_path / f"rank{rank}-attempt0").read_text().split(" ", 4)
        assert words[:4] == [str(rank), "3", "127.0.0.1", "29999"]
        if Path("/proc/self/comm").exists():
            assert words[4] == f"murmur rank {rank}"


def test_the_first_failure_stops_the_others_and_is_the_status(tmp_path):
    def main(argv: list[str]) -> int:
        if os.environ["RANK"] == "1":
            return 3
        time.sleep(60)  # stopped by SIGTERM long before
        return 0

    started = time.monotonic()
    assert run_ranks(3, [], "127.0.0.1", 29999, 0, main) == 3
    assert time.monotonic() - started < 30


def test_max_restarts_forks_every_rank_again(tmp_path):
    def main(argv: list[str]) -> int:
        rank = int(os.environ["RANK"])
        _mark(tmp_path, rank)
        failing = os.environ["TORCHELASTIC_RESTART_COUNT"] == "0" and rank == 0
        if failing:  # a failure stops the other rank: let it leave its mark first
            _wait_for(tmp_path / "rank1-attempt0")
        return 5 if failing else 0

    assert run_ranks(2, [], "127.0.0.1", 29999, 0, main) == 5
    (tmp_path / "rank1-attempt0").unlink()
    assert run_ranks(2, [], "127.0.0.1", 29999, 1, main) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "rank0-attempt0",
        "rank0-attempt1",
        "rank1-attempt0",
        "rank1-attempt1",
    ]


def _terminate_launcher() -> None:
    """SIGTERM to the launcher's thread, as ``kill`` gives it to a launcher, which runs
    no thread of its own: sent to the process, it may land on another thread of the
    test process (pytest-xdist's), which would leave the launcher waiting unwoken."""
    signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)


def test_a_signal_after_a_restart_still_stops_every_rank(tmp_path):
    def main(argv: list[str]) -> int:
        if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
            return 4
        _mark(tmp_path, int(os.environ["RANK"]))
        time.sleep(60)
        return 0

    def stop_once_restarted() -> None:
        while len(os.listdir(tmp_path)) < 2:
            time.sleep(0.02)
        _terminate_launcher()

    threading.Thread(target=stop_once_restarted, daemon=True).start()
    started = time.monotonic()
    assert run_ranks(2, [], "127.0.0.1", 29999, 3, main) == 128 + signal.SIGTERM
    assert time.monotonic() - started < 30
    assert sorted(os.listdir(tmp_path)) == ["rank0-attempt1", "rank1-attempt1"]


def test_a_signal_to_the_launcher_stops_every_rank_and_restarts_none(tmp_path):
    def main(argv: list[str]) -> int:
        _mark(tmp_path, int(os.environ["RANK"]))
        time.sleep(60)
        return 0

    before = signal.getsignal(signal.SIGTERM)
    threading.Timer(1.0, _terminate_launcher).start()
    started = time.monotonic()
    assert run_ranks(2, [], "127.0.0.1", 29999, 3, main) == 128 + signal.SIGTERM
    assert time.monotonic() - started < 30
    assert all(name.endswith("attempt0") for name in os.listdir(tmp_path))
    assert signal.getsignal(signal.SIGTERM) == before  # the launcher's own handler is back


def test_ranks_are_reaped_and_their_status_kept_when_sigchld_was_ignored(tmp_path):
    # SIGCHLD ignored would have the system reap the ranks itself, losing their status
    before = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:

        def main(argv: list[str]) -> int:
            return 3 if os.environ["RANK"] == "1" else 0

        assert run_ranks(2, [], "127.0.0.1", 29999, 0, main) == 3
        assert signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN  # put back
    finally:
        signal.signal(signal.SIGCHLD, before)
