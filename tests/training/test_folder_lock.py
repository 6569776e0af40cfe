"""A run folder is written by one job at a time: the lock is held, refused to others
in one line naming the holder, and taken over once the holder is gone (SIGKILL
included)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from murmur.errors import UsageError
from murmur.training.folder_lock import LOCK_FILE, holder, is_locked, lock_folder

HOLD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from murmur.training.folder_lock import lock_folder
    lock = lock_folder(Path(sys.argv[1]), "murmur run held-by-a-test")
    print("held", flush=True)
    time.sleep(60)
    """
)


def _holding(folder: Path) -> subprocess.Popen[str]:
    """Another process that takes the folder's lock and sleeps; once it says so."""
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    return child


def test_a_lock_held_by_another_process_is_refused_in_one_line_naming_it(tmp_path):
    child = _holding(tmp_path)
    try:
        assert is_locked(tmp_path)
        with pytest.raises(UsageError) as error:
            lock_folder(tmp_path)
        message = str(error.value)
        assert "\n" not in message and "is being written by murmur run held-by-a-test" in message
        assert f"PID {child.pid}" in message
        named = holder(tmp_path)
        assert named is not None and named.pid == child.pid
    finally:
        child.kill()
        child.wait(timeout=10)


def test_the_lock_of_a_killed_holder_is_taken_over_at_once(tmp_path):
    child = _holding(tmp_path)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=10)
    assert (tmp_path / LOCK_FILE).exists()  # the file stays; the lock went with the process
    assert not is_locked(tmp_path)
    with lock_folder(tmp_path, "murmur run next") as lock:
        assert lock.holds == 1
        named = holder(tmp_path)
        assert named is not None and named.pid == os.getpid() and named.command == "murmur run next"
        (tmp_path / "summary.json").write_text("{}")
    assert not (tmp_path / LOCK_FILE).exists()  # released with the summary: the file goes


def test_a_process_takes_its_own_lock_again_and_releases_it_with_the_last_hold(tmp_path):
    outer = lock_folder(tmp_path)
    inner = lock_folder(tmp_path)
    assert inner is outer and outer.holds == 2
    assert not is_locked(tmp_path)  # not by another job
    inner.release()
    assert (tmp_path / LOCK_FILE).exists()
    outer.release()
    assert not (tmp_path / LOCK_FILE).exists()


def test_a_hold_let_go_before_the_summary_puts_back_the_last_jobs_name(tmp_path):
    child = _holding(tmp_path)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=10)
    lock_folder(tmp_path, "murmur run --resume refused").release()
    named = holder(tmp_path)
    assert named is not None and named.pid == child.pid  # still the job that was killed
    with lock_folder(tmp_path, "murmur run --resume"):
        (tmp_path / "summary.json").write_text("{}")
    assert not (tmp_path / LOCK_FILE).exists()
