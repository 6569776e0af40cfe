"""A launched job dies as one: its ranks die with the launcher (SIGKILL included), its
folder is locked while it runs, and a job that fails leaves a failed summary, written by
the launcher where no rank is left to; `--resume` says how the last job ended and goes
on to the uninterrupted run's records."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from ranks import launch, launch_command, rank_processes
from test_distributed import DSGD, write_config
from test_distributed_resume import comparable

from murmur.cli import main
from murmur.distributed.checkpoints import FOLDER, saved_iterations

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="finds ranks through /proc"
)


def _start(config: Path, out: Path) -> tuple[subprocess.Popen[str], dict[int, int]]:
    """``murmur launch --nproc 4`` of ``config`` into ``out``, once every rank has saved a
    checkpoint; the process and its ranks' pids by rank."""
    argv = ["launch", "--nproc", "4", str(config), "--out", str(out), "--quiet", "--timeout", "10"]
    argv += ["--set", "run.checkpoint_every=50"]
    launched = subprocess.Popen(
        launch_command(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    while not all(saved_iterations(out / FOLDER, rank) for rank in range(4)):
        assert launched.poll() is None, launched.communicate()[1]
        assert time.monotonic() < deadline, "no checkpoint within 120 s"
        time.sleep(0.01)
    ranks = rank_processes(launched.pid)
    assert len(ranks) == 4
    return launched, ranks


def _alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def _config(tmp_path: Path, iterations: int = 1200) -> Path:
    """Long enough that the job is still running when every rank has saved iteration 50."""
    path = write_config(tmp_path, DSGD, iterations=iterations)
    path.write_text(path.read_text().replace('"blobs"', '"digits"').replace("[8]", "[16]"))
    return path


def test_ranks_die_with_a_killed_launcher_and_resume_says_so_and_continues(tmp_path):
    config = _config(tmp_path, iterations=400)
    out = tmp_path / "killed"
    launched, ranks = _start(config, out)
    os.kill(launched.pid, signal.SIGKILL)
    launched.wait(timeout=10)
    deadline = time.monotonic() + 5
    while _alive(list(ranks.values())) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _alive(list(ranks.values())) == []  # no orphan within 5 s
    assert not (out / "summary.json").exists()
    done = launch(["launch", "--resume", str(out), "--timeout", "10", "--quiet"], timeout=240)
    assert done.returncode == 0, done.stderr
    assert f"the last job in {out}, murmur launch" in done.stderr
    assert "ended without a summary" in done.stderr
    whole = tmp_path / "whole"
    argv = ["launch", "--nproc", "4", str(config), "--out", str(whole), "--quiet"]
    done = launch([*argv, "--set", "run.checkpoint_every=50", "--timeout", "10"], timeout=240)
    assert done.returncode == 0, done.stderr
    assert comparable(out) == comparable(whole)


def test_a_running_jobs_folder_is_refused_in_one_line_and_a_killed_rank_0_leaves_a_summary(
    tmp_path, capsys
):
    config = _config(tmp_path)
    out = tmp_path / "running"
    launched, ranks = _start(config, out)
    try:
        for argv in (
            ["run", "--resume", str(out), "--quiet"],
            ["run", str(config), "--out", str(out), "--quiet"],
        ):
            assert main(argv) == 2
            error = capsys.readouterr().err.strip()
            assert "\n" not in error and "is being written by murmur launch" in error, error
            assert f"PID {launched.pid}" in error
        done = launch(["launch", "--resume", str(out), "--quiet"], timeout=60)
        assert done.returncode == 2 and "is being written by" in done.stderr
        os.kill(ranks[0], signal.SIGKILL)
        assert launched.wait(timeout=60) != 0
    finally:
        if launched.poll() is None:
            launched.kill()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert summary["error"].startswith("rank 0 was killed by SIGKILL; murmur launch wrote")
    assert summary["evaluations"] >= 1
