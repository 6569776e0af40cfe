"""Checkpoints of the parameter server in the distributed runtime: the server saves the
run every k updates; a run stopped by a kill and resumed continues from the newest one,
the workers starting again from its model. sync-ps, whose order is the workers', gives
the uninterrupted run; AsySG-con completes its updates from the checkpoint on."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from ranks import Fault, read_records, run_ranks
from test_distributed_resume import comparable
from test_distributed_server import ASYSG, SYNC_PS, TOML

from murmur.distributed.checkpoints import FOLDER, saved_iterations
from murmur.distributed.launch import check_resumable_launch


def config(folder: Path, algorithm: str, iterations: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.toml"
    text = TOML.format(iterations=iterations, target=0.0, algorithm=algorithm)
    path.write_text(text.replace("eval_every = 10", "eval_every = 10\ncheckpoint_every = 20"))
    return path


def stopped_run(tmp_path: Path, algorithm: str, iterations: int, kill: Fault) -> tuple[Path, Path]:
    path = config(tmp_path, algorithm, iterations)
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    argv = ["run", str(path), "--runtime", "distributed"]
    report, stderr = run_ranks(tmp_path / "a", [*argv, "--out", str(whole)], limit=90.0)
    assert report["codes"] == {"0": 0, "1": 0, "2": 0, "3": 0}, stderr
    report, stderr = run_ranks(
        tmp_path / "b", [*argv, "--out", str(stopped)], limit=90.0, faults=(kill,)
    )
    assert report["codes"][str(kill.ranks[0])] == -signal.SIGKILL, stderr
    return whole, stopped


def resume(tmp_path: Path, stopped: Path) -> None:
    argv = ["run", "--resume", str(stopped), "--runtime", "distributed"]
    report, stderr = run_ranks(tmp_path / "c", argv, limit=90.0)
    assert report["codes"] == {"0": 0, "1": 0, "2": 0, "3": 0}, stderr


# the server's checkpoint: asysg's case below; sync-ps's state: test_checkpoint.py
@pytest.mark.slow
def test_a_sync_ps_run_resumed_by_hand_gives_the_uninterrupted_run(tmp_path):
    # worker rank 2 kills itself drawing its 46th batch: the server saved updates 20, 40
    kill = Fault(ranks=(2,), after=45, fail=signal.SIGKILL)
    whole, stopped = stopped_run(tmp_path, SYNC_PS, 100, kill)
    assert json.loads((stopped / "summary.json").read_text())["status"] == "failed"
    assert saved_iterations(stopped / FOLDER, 0)[-1] == 40
    assert saved_iterations(stopped / FOLDER, 1) == []  # only the server saves
    assert check_resumable_launch(stopped, 4)[1] == 40  # what murmur launch --resume reads
    resume(tmp_path, stopped)
    got, want = comparable(stopped), comparable(whole)
    assert [r["iteration"] for r in got[1]] == list(range(0, 101, 10))
    assert got == want


def test_an_asysg_run_whose_server_was_killed_completes_its_updates_from_the_checkpoint(
    tmp_path,
):
    kill = Fault(
        ranks=(0,),
        target="murmur.algorithms.param_server:ParameterServer.receive",
        after=150,
        fail=signal.SIGKILL,
    )
    whole, stopped = stopped_run(tmp_path, ASYSG, 300, kill)
    before = read_records(stopped)
    saved = saved_iterations(stopped / FOLDER, 0)[-1]
    assert 100 <= saved <= 150, saved
    resume(tmp_path, stopped)
    records = read_records(stopped)
    summary = json.loads((stopped / "summary.json").read_text())
    assert [r["iteration"] for r in records] == list(range(0, 301, 10))
    kept = saved // 10 + 1  # the records up to the checkpoint are the killed run's
    assert records[:kept] == before[:kept]
    assert summary["iterations"] == 300
    assert sum(summary["staleness"]["histogram"]) == 300  # M = 1: one update per gradient
    uninterrupted = json.loads((whole / "summary.json").read_text())
    assert summary["accuracy"]["mean"] == pytest.approx(uninterrupted["accuracy"]["mean"], abs=0.01)
