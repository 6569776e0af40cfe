"""`murmur run --resume`: a run killed with SIGKILL in the middle and resumed writes
the numbers of the run that was never killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from murmur.cli import main
from murmur.training.checkpoint import CHECKPOINT

SGD = [
    "data.dataset=blobs",
    "model.hidden=[8]",
    "topology.agents=6",
    "data.batch_size=8",
    "run.iterations=600",
    "run.eval_every=100",
    "run.checkpoint_every=100",
]
SERVER = [setting for setting in SGD if not setting.startswith("topology")]
LAYERWISE = [
    "topology.agents=6",
    "algorithm.layers=5",
    "algorithm.nodes=100",
    "algorithm.admm_iterations=100",
    "run.checkpoint_every=1",
]
WALL = {"wall_seconds", "train_seconds", "samples_per_second", "run_dir", "wall"}


def _murmur(*argv: str) -> list[str]:
    return [sys.executable, "-m", "murmur", *argv]


def _run_args(preset: str, out: Path, settings: list[str]) -> list[str]:
    sets = [part for setting in settings for part in ("--set", setting)]
    return _murmur("run", preset, *sets, "--out", str(out), "--quiet")


def kill_after_a_checkpoint(argv: list[str], folder: Path) -> None:
    """Start the run, SIGKILL it once it has saved a checkpoint, before it ends."""
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (folder / CHECKPOINT).exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"no checkpoint was saved: {process.communicate()[1]!r}")
        time.sleep(0.005)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL


def _summary(folder: Path) -> dict:
    summary = json.loads((folder / "summary.json").read_text())
    return {key: value for key, value in summary.items() if key not in WALL}


@pytest.mark.parametrize(
    ("preset", "settings"),
    [
        ("detsgrad", SGD),
        # lost messages' mailboxes resume in tests/training/test_checkpoint.py
        pytest.param("dsgd", [*SGD, "faults.drop=0.3"], marks=pytest.mark.slow),
        # a server's and ARock's checkpoints resume to the bit in test_checkpoint.py; the
        # kill and the command line are those of detsgrad's case
        pytest.param("asysg-con", SERVER, marks=pytest.mark.slow),
        pytest.param("dssfn-vowel", LAYERWISE, marks=pytest.mark.slow),
        pytest.param("dssfn-async-vowel", LAYERWISE, marks=pytest.mark.slow),
    ],
)
def test_a_killed_run_resumed_ends_as_the_run_never_killed(tmp_path, preset, settings):
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    kill_after_a_checkpoint(_run_args(preset, killed, settings), killed)
    assert not (killed / "summary.json").exists()
    # the kill needs a process; the resumed and the whole run are the same command in this one
    assert main(["run", "--resume", str(killed), "--quiet"]) == 0
    assert main(_run_args(preset, whole, settings)[3:]) == 0
    assert _summary(killed) == _summary(whole)
    assert _summary(killed)["status"] == "finished"
    records = [
        [
            {key: value for key, value in json.loads(line).items() if key not in WALL}
            for line in (folder / "metrics.jsonl").read_text().splitlines()
        ]
        for folder in (killed, whole)
    ]
    assert records[0] == records[1] and len(records[0]) > 2
