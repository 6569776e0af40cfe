"""Checkpoints and resumed runs: a run continued from its checkpoint ends exactly as
the run that was never stopped, and a folder that cannot be resumed is refused
without a change to it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from small_runs import SMALL_SGD

from murmur.cli import main
from murmur.config import load_experiment
from murmur.errors import UsageError
from murmur.experiment import resume, run
from murmur.training.checkpoint import (
    CHECKPOINT,
    from_plain,
    load_file,
    restore_tuple,
    to_plain,
    write_atomic,
)

SMALL = [*SMALL_SGD, "run.checkpoint_every=25"]
WALL = {"wall_seconds", "train_seconds", "samples_per_second", "run_dir", "wall"}
"""Fields that measure real time or name the folder: the only ones a resumed run changes."""


def _config(preset: str, *settings: str):
    return load_experiment(preset, [*SMALL, *settings]).runs[0][1]


def _stopped_copy(finished: Path, stopped: Path) -> None:
    """The folder a run killed after its last checkpoint would have left."""
    shutil.copytree(finished, stopped)
    (stopped / "summary.json").unlink()


def _without_wall(values: dict) -> dict:
    return {key: value for key, value in values.items() if key not in WALL}


def _records(folder: Path) -> list[dict]:
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    return [_without_wall(json.loads(line)) for line in lines]


def assert_same_run(first: Path, second: Path) -> None:
    """summary.json and metrics.jsonl equal but for real time, bit for bit."""
    summaries = [json.loads((folder / "summary.json").read_text()) for folder in (first, second)]
    assert summaries[0]["status"] == "finished"
    assert _without_wall(summaries[0]) == _without_wall(summaries[1])
    assert _records(first) == _records(second)


@pytest.mark.parametrize(
    ("preset", "settings"),
    [
        ("detsgrad", []),
        ("detsgrad", ["algorithm.compress=randk", "algorithm.trigger=layer"]),
        ("dsgd", ["faults.drop=0.3"]),
        ("detsgrad", ["faults.link_down=0.2", "faults.crashes=2", "faults.crash_at=10"]),
        (
            "dsgd",
            ["faults.crashes=[1]", "faults.crash_at=20", "faults.rejoin_at=40"]
            + ["faults.rejoin_from=neighbour", "topology.varying=matching", "topology.every=7"],
        ),
        ("detsgrad", ["topology.graph=erdos_renyi", "topology.varying=resample"]),
        ("detsgrad-gt", []),
        ("choco-sgd", []),
        ("beer", ["algorithm.compress=lowrank"]),
        ("motef", ["algorithm.compress=qsgd", "algorithm.gamma=0.3"]),
        ("lead", []),
        ("centralized", []),
    ],
)
def test_a_resumed_run_ends_as_the_run_never_stopped(
    tmp_path, preset, settings, periodic_checkpoints
):
    config = _config(preset, *settings)
    finished = run(config, tmp_path / "finished", name="member", preset="comparison")
    checkpoint = load_file(tmp_path / "finished" / CHECKPOINT)
    assert checkpoint["done"] == 50 and checkpoint["records"] == 3
    _stopped_copy(tmp_path / "finished", tmp_path / "stopped")
    resumed = resume(tmp_path / "stopped")
    assert torch.equal(resumed.parameters, finished.parameters)
    assert resumed.name == "member" and resumed.preset == "comparison"
    assert_same_run(tmp_path / "finished", tmp_path / "stopped")


def test_a_run_stopped_by_an_interrupt_is_resumed(tmp_path, periodic_checkpoints):
    """Ctrl-C leaves a failed summary and may cut a save short: neither stops a resume."""
    config = _config("detsgrad")
    run(config, tmp_path / "finished")
    _stopped_copy(tmp_path / "finished", tmp_path / "stopped")
    (tmp_path / "stopped" / "summary.json").write_text('{"status": "failed"}')
    (tmp_path / "stopped" / f".{CHECKPOINT}.cut").write_bytes(b"PK")
    resume(tmp_path / "stopped")
    assert_same_run(tmp_path / "finished", tmp_path / "stopped")
    assert not (tmp_path / "stopped" / f".{CHECKPOINT}.cut").exists()


def test_a_run_without_checkpoint_every_saves_none(tmp_path):
    run(_config("dsgd", "run.checkpoint_every=0"), tmp_path / "run")
    assert not (tmp_path / "run" / CHECKPOINT).exists()


def test_a_state_saved_before_a_field_was_added_takes_its_default():
    from murmur.algorithms.choco import ChocoState

    template = ChocoState(x=torch.zeros(2, 3))
    saved = {"x": torch.ones(2, 3)}  # no "warm": an older checkpoint
    restored = restore_tuple(template, saved)
    assert torch.equal(restored.x, torch.ones(2, 3)) and restored.warm is None
    with pytest.raises(UsageError, match="fields"):
        restore_tuple(template, {"warm": None})  # x has no default
    with pytest.raises(UsageError, match="fields"):
        restore_tuple(template, {**saved, "unknown": 1})
    with pytest.raises(UsageError, match="fields"):  # per-agent generators, as saved before
        restore_tuple(template, {**saved, "generators": None})


def test_generators_and_named_tuples_become_plain_values_and_back():
    from murmur.algorithms.detsgrad import DetsgradState

    stream = torch.Generator().manual_seed(3)
    plain = to_plain({"streams": [stream], "state": DetsgradState(x=torch.ones(2, 3))})
    assert set(plain["state"]) == {"x", "warm"}
    assert isinstance(plain["streams"][0]["generator"], torch.Tensor)
    again = from_plain(plain)["streams"][0]
    assert torch.equal(torch.rand(4, generator=again), torch.rand(4, generator=stream))


def test_checkpoint_every_must_be_a_count():
    with pytest.raises(UsageError, match=r"run.checkpoint_every must be >= 0"):
        _config("dsgd", "run.checkpoint_every=-1")


def test_algorithms_that_save_no_checkpoints_refuse_them(capsys, tmp_path):
    code = main(
        ["run", "hogwild", "--set", "run.checkpoint_every=10", "--out", str(tmp_path / "x")]
    )
    assert code == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("murmur: error: hogwild saves no checkpoints") and "\n" not in line
    assert not (tmp_path / "x").exists()


# ---------------------------------------------------------------- refusals


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(path): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.fixture(scope="module")
def stopped(tmp_path_factory) -> Path:
    """A finished run's folder, its summary removed: resumable."""
    root = tmp_path_factory.mktemp("stopped")
    run(_config("detsgrad"), root / "finished")
    _stopped_copy(root / "finished", root / "stopped")
    return root / "stopped"


def _refused(capsys, folder: Path, *argv: str) -> str:
    before = _snapshot(folder)
    assert main(["run", "--resume", str(folder), "--quiet", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("murmur: error: ")
    assert _snapshot(folder) == before
    return err


def _damaged(stopped: Path, tmp_path: Path, damage) -> Path:
    folder = tmp_path / "damaged"
    shutil.copytree(stopped, folder)
    path = folder / CHECKPOINT
    path.write_bytes(damage(path.read_bytes()))
    return folder


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],
        lambda data: data[:100],
        lambda data: b"",
        lambda data: data[:2000] + bytes(255 - b for b in data[2000:4000]) + data[4000:],
        lambda data: data[:-5000] + bytes([data[-5000] ^ 1]) + data[-4999:],
    ],
    ids=["half", "head", "empty", "flipped", "one-bit-in-a-tensor"],
)
def test_a_damaged_checkpoint_is_refused_and_the_folder_left_alone(
    capsys, tmp_path, stopped, damage
):
    err = _refused(capsys, _damaged(stopped, tmp_path, damage))
    assert "checkpoint.pt" in err


def test_a_checkpoint_of_another_format_is_refused(capsys, tmp_path, stopped):
    folder = tmp_path / "format"
    shutil.copytree(stopped, folder)
    payload = load_file(folder / CHECKPOINT)
    write_atomic(folder / CHECKPOINT, {**payload, "format": 99})
    assert "checkpoint format 99" in _refused(capsys, folder)


def test_a_checkpoint_of_another_config_is_refused(capsys, tmp_path, stopped):
    folder = tmp_path / "other"
    shutil.copytree(stopped, folder)
    text = (folder / "config.toml").read_text().replace("seed = 0", "seed = 1")
    (folder / "config.toml").write_text(text)
    assert "another config" in _refused(capsys, folder)


def test_a_finished_run_is_refused(capsys, stopped):
    assert "finished" in _refused(capsys, stopped.parent / "finished")


def test_a_folder_without_a_checkpoint_is_refused(capsys, tmp_path, stopped):
    folder = tmp_path / "none"
    shutil.copytree(stopped, folder)
    (folder / CHECKPOINT).unlink()
    assert "no checkpoint.pt" in _refused(capsys, folder)


@pytest.mark.parametrize(
    ("argv", "named"),
    [(["dsgd"], "a preset"), (["--set", "run.seed=2"], "--set"), (["--out", "x"], "--out")],
)
def test_resume_takes_no_preset_overrides_or_other_folder(capsys, stopped, argv, named):
    assert f"drop {named}" in _refused(capsys, stopped, *argv)


def test_a_comparison_folder_names_its_members(capsys, tmp_path, stopped):
    root = tmp_path / "comparison"
    shutil.copytree(stopped, root / "detsgrad")
    assert "--resume" in _refused(capsys, root)


LAYERWISE = [
    "topology.agents=4",
    "algorithm.layers=3",
    "algorithm.nodes=30",
    "algorithm.admm_iterations=40",
    "run.checkpoint_every=2",
]


@pytest.mark.parametrize(
    ("preset", "settings"),
    [
        ("ssfn-vowel", []),
        ("ssfn-vowel", ["algorithm.grow=true", "algorithm.node_step=10"]),
        ("dssfn-vowel", []),
        ("dssfn-async-vowel", []),
        ("dssfn-async-vowel", ["faults.drop=0.2"]),
        ("dssfn-async-vowel", ["faults.drop=0.2", "faults.crashes=[1]", "faults.crash_at=1"]),
    ],
)
def test_a_resumed_layerwise_run_ends_as_the_run_never_stopped(
    tmp_path, preset, settings, periodic_checkpoints
):
    config = load_experiment(preset, [*LAYERWISE, *settings]).runs[0][1]
    finished = run(config, tmp_path / "finished")
    checkpoint = load_file(tmp_path / "finished" / CHECKPOINT)
    assert checkpoint["done"] == 2 and checkpoint["records"] == 3
    _stopped_copy(tmp_path / "finished", tmp_path / "stopped")
    resumed = resume(tmp_path / "stopped")
    assert torch.equal(resumed.parameters, finished.parameters)
    assert_same_run(tmp_path / "finished", tmp_path / "stopped")


SERVER = [
    "data.dataset=blobs",
    "model.hidden=[8]",
    "data.batch_size=8",
    "run.iterations=60",
    "run.eval_every=20",
    "run.checkpoint_every=25",
    "timing.compute_noise=exponential",
]


@pytest.mark.parametrize(
    ("preset", "settings"),
    [
        ("asysg-con", []),
        ("asysg-con", ["algorithm.group=3"]),
        ("asysg-incon", []),
        ("asysg-con", ["algorithm.name=sync-ps"]),
        ("asysg-con", ["faults.crashes=[1, 2]", "faults.crash_at=30", "faults.rejoin_at=55"]),
        ("asysg-con", ["faults.crashes=[3]", "faults.crash_at=10", "faults.rejoin_at=40"]),
        ("asysg-incon", ["faults.crashes=2", "faults.crash_at=20"]),
    ],
)
def test_a_resumed_server_run_ends_as_the_run_never_stopped(tmp_path, preset, settings):
    config = load_experiment(preset, [*SERVER, *settings]).runs[0][1]
    finished = run(config, tmp_path / "finished")
    checkpoint = load_file(tmp_path / "finished" / CHECKPOINT)
    assert checkpoint["done"] == 50 and checkpoint["records"] == 3
    assert checkpoint["state"]["events"]
    _stopped_copy(tmp_path / "finished", tmp_path / "stopped")
    resumed = resume(tmp_path / "stopped")
    assert torch.equal(resumed.parameters, finished.parameters)
    assert_same_run(tmp_path / "finished", tmp_path / "stopped")
    unsaved = run(config.replace(**{"run.checkpoint_every": "0"}), tmp_path / "unsaved")
    assert torch.equal(unsaved.parameters, finished.parameters)
    assert_same_run(tmp_path / "finished", tmp_path / "unsaved")
