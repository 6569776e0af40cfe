"""A run with a local optimizer, stopped after a checkpoint and resumed, ends bit for
bit as the run never stopped: the optimizer's state (momentum buffers, Adam's moments
and step counts, the server's one state) is saved with the algorithm's and restored."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from small_runs import SMALL_SGD

from murmur.config import load_experiment
from murmur.experiment import resume, run
from murmur.training.checkpoint import CHECKPOINT, Checkpoints, load_file

SERVER = [setting for setting in SMALL_SGD if not setting.startswith("topology")]
WALL = {"wall_seconds", "train_seconds", "samples_per_second", "run_dir", "wall"}
ADAM = ["algorithm.optimizer=adam", "algorithm.a=0.01"]


def _without_wall(values: dict) -> dict:
    return {key: value for key, value in values.items() if key not in WALL}


def _records(folder: Path) -> list[dict]:
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    return [_without_wall(json.loads(line)) for line in lines]


@pytest.mark.parametrize(
    ("preset", "settings"),
    [
        ("detsgrad", ["algorithm.optimizer=momentum"]),
        ("dsgd", [*ADAM, "algorithm.weight_decay=0.001", "algorithm.order=atc"]),
        (
            "dsgd",
            ["algorithm.optimizer=nesterov", "faults.crashes=[1]", "faults.crash_at=10"]
            + ["faults.rejoin_at=40", "faults.drop=0.2"],
        ),
        ("detsgrad-gt", ["algorithm.optimizer=nesterov", "algorithm.warmup=30"]),
        ("sparq-sgd", ADAM),
        ("centralized", ["algorithm.optimizer=momentum", "algorithm.weight_decay=0.01"]),
        ("asysg-con", [*SERVER, *ADAM]),
        # its loss climbs to 150 times the first by iteration 60: no rule may stop it
        ("asysg-incon", [*SERVER, "algorithm.optimizer=momentum", "collapse.enabled=false"]),
    ],
)
def test_a_resumed_run_with_an_optimizer_ends_as_the_run_never_stopped(
    tmp_path, monkeypatch, preset, settings
):
    base = [] if preset.startswith("asysg") else SMALL_SGD
    config = load_experiment(preset, [*base, *settings, "run.checkpoint_every=25"]).runs[0][1]
    saves: dict[int, bytes] = {}
    save = Checkpoints.save

    def keep(self: Checkpoints, done: int, state: dict) -> None:
        save(self, done, state)
        if self.path is not None:
            saves[done] = self.path.read_bytes()

    monkeypatch.setattr(Checkpoints, "save", keep)
    finished = run(config, tmp_path / "finished")
    stopped = tmp_path / "stopped"
    shutil.copytree(tmp_path / "finished", stopped)
    (stopped / "summary.json").unlink()
    (stopped / CHECKPOINT).write_bytes(saves[50])  # as if killed after iteration 50's save
    saved = load_file(stopped / CHECKPOINT)
    assert saved["done"] == 50
    if not preset.startswith("asysg"):
        assert set(saved["state"]["algorithm"]) == {"inner", "optimizer"}
    resumed = resume(stopped)
    assert torch.equal(resumed.parameters, finished.parameters)
    summaries = [
        json.loads((folder / "summary.json").read_text())
        for folder in (tmp_path / "finished", stopped)
    ]
    assert _without_wall(summaries[0]) == _without_wall(summaries[1])
    assert _records(tmp_path / "finished") == _records(stopped)
    unsaved = run(config.replace(**{"run.checkpoint_every": "0"}))
    assert torch.equal(unsaved.parameters, finished.parameters)
