"""The model a run leaves: model.pt is the average model's state_dict, agents.pt every
agent's parameters; loaded back they score what summary.json says, to the last digit.
The last iteration always has a checkpoint, and a loader reads it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from small_runs import SMALL_SGD
from torch import nn

from murmur import load_model
from murmur.config import load_experiment
from murmur.data import load_dataset
from murmur.errors import UsageError
from murmur.experiment import resume, run
from murmur.training.checkpoint import CHECKPOINT, load_checkpoint, write_atomic
from murmur.training.model_file import AGENTS_FILE, MODEL_FILE, stacked_state


def _config(preset: str, *settings: str):
    return load_experiment(preset, [*SMALL_SGD, *settings]).runs[0][1]


def _scores(module: nn.Module, dataset) -> float:
    with torch.no_grad():
        return float((module(dataset.x_test).argmax(dim=-1) == dataset.y_test).double().mean())


def test_model_pt_is_a_state_dict_that_scores_what_the_summary_says(tmp_path):
    result = run(_config("detsgrad"), tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    state = torch.load(tmp_path / "run" / MODEL_FILE, weights_only=True)
    stacked = torch.load(tmp_path / "run" / AGENTS_FILE, weights_only=True)
    assert set(state) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    assert all(stacked[name].shape == (6, *state[name].shape) for name in state)
    assert result.parameters is not None
    flat = torch.cat([stacked[name].reshape(6, -1) for name in state], dim=1)
    assert torch.equal(flat, result.parameters)
    assert torch.equal(state["0.weight"], stacked["0.weight"].mean(dim=0))
    blobs = load_dataset("blobs")
    model = load_model(tmp_path / "run")
    assert _scores(model, blobs) == summary["model"]["test_accuracy"]
    for agent in (0, 5):
        own = load_model(tmp_path / "run", agent=agent)
        assert _scores(own, blobs) == summary["accuracy"]["per_agent"][agent]


def test_a_run_without_a_folder_reports_its_average_model_and_its_curve():
    result = run(_config("dsgd"))
    model = result.extra["model"]
    assert model["file"] is None and model["agents"] == 6 and model["outputs"] == 4
    assert [record["iteration"] for record in result.records] == [0, 20, 40, 60]


def test_a_module_given_from_python_is_needed_to_load_its_model(tmp_path):
    net = nn.Sequential(nn.Linear(8, 5), nn.Tanh(), nn.Linear(5, 4))
    run(_config("dsgd"), tmp_path / "run", model=net)
    with pytest.raises(UsageError, match="pass that module"):
        load_model(tmp_path / "run")
    loaded = load_model(tmp_path / "run", net)
    assert loaded is not net and not torch.equal(loaded[0].weight, net[0].weight)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert _scores(loaded, load_dataset("blobs")) == summary["model"]["test_accuracy"]
    with pytest.raises(UsageError, match="does not fit the module"):
        load_model(tmp_path / "run", nn.Linear(8, 4))


def test_a_regression_run_leaves_its_model_and_loss(tmp_path):
    config = load_experiment(
        "centralized", ["data.dataset=synthetic", "model.name=linear", "run.iterations=50"]
    ).runs[0][1]
    run(config, tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())["model"]
    assert summary["test_accuracy"] is None and summary["agents"] == 1
    model = load_model(tmp_path / "run")
    data = load_dataset("synthetic")
    with torch.no_grad():
        loss = float(nn.functional.mse_loss(model(data.x_test), data.y_test))
    assert loss == summary["test_loss"]


def test_a_server_run_leaves_its_one_model(tmp_path):
    run(_config("asysg-con", "algorithm.workers=2"), tmp_path / "run")
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["model"]["agents"] == 1
    assert isinstance(load_model(tmp_path / "run"), nn.Sequential)


def test_folders_without_a_model_are_refused_in_one_line(tmp_path):
    with pytest.raises(UsageError, match="no finished run"):
        load_model(tmp_path)
    config = load_experiment("ssfn-vowel", ["algorithm.layers=1"]).runs[0][1]
    run(config, tmp_path / "ssfn")
    with pytest.raises(UsageError, match="left no model"):
        load_model(tmp_path / "ssfn")


def test_the_last_iteration_has_a_checkpoint_and_a_run_resumed_from_it_ends_the_same(tmp_path):
    config = _config("detsgrad", "run.checkpoint_every=25")  # 60 is not a multiple
    run(config, tmp_path / "finished")
    saved = load_checkpoint(tmp_path / "finished" / CHECKPOINT)
    assert saved["done"] == 60 and saved["records"] == 4
    assert isinstance(saved["state"]["algorithm"]["x"], torch.Tensor)
    shutil.copytree(tmp_path / "finished", tmp_path / "stopped")
    (tmp_path / "stopped" / "summary.json").unlink()  # killed before the summary
    resume(tmp_path / "stopped")
    first, again = (
        json.loads((tmp_path / folder / "summary.json").read_text())
        for folder in ("finished", "stopped")
    )
    wall = {"wall_seconds", "train_seconds", "samples_per_second", "run_dir"}
    assert {k: v for k, v in first.items() if k not in wall} == {
        k: v for k, v in again.items() if k not in wall
    }


def test_a_damaged_checkpoint_is_refused_by_the_loader(tmp_path):
    (tmp_path / CHECKPOINT).write_bytes(b"not a checkpoint")
    with pytest.raises(UsageError, match="damaged"):
        load_checkpoint(tmp_path / CHECKPOINT)


def test_run_into_a_folder_that_holds_something_takes_a_new_subfolder(tmp_path):
    (tmp_path / "notes.txt").write_text("kept")
    first = run(_config("dsgd", "run.iterations=20"), tmp_path)
    second = run(_config("dsgd", "run.iterations=20"), tmp_path)
    assert first.run_dir is not None and second.run_dir is not None
    folders = {Path(first.run_dir), Path(second.run_dir)}
    assert len(folders) == 2 and all(folder.parent == tmp_path for folder in folders)
    assert all(folder.name.startswith("dsgd-") for folder in folders)
    assert (tmp_path / "notes.txt").read_text() == "kept"
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="is a file"):
        run(_config("dsgd", "run.iterations=20"), tmp_path / "file")


def test_a_run_saved_before_keys_were_added_resumes(tmp_path, periodic_checkpoints):
    """A folder whose config.toml and checkpoint lack keys a later murmur added (here
    the local optimizer's) resumes, those keys taking their defaults."""
    run(_config("dsgd", "run.checkpoint_every=25"), tmp_path / "finished")
    shutil.copytree(tmp_path / "finished", tmp_path / "old")
    (tmp_path / "old" / "summary.json").unlink()

    def older(text: str) -> str:
        return "".join(
            line for line in text.splitlines(keepends=True) if not line.startswith("optimizer")
        )

    config = tmp_path / "old" / "config.toml"
    config.write_text(older(config.read_text()))
    saved = load_checkpoint(tmp_path / "old" / CHECKPOINT)
    write_atomic(tmp_path / "old" / CHECKPOINT, {**saved, "config": older(saved["config"])})
    resume(tmp_path / "old")
    summaries = [
        json.loads((tmp_path / folder / "summary.json").read_text())["messages"]
        for folder in ("finished", "old")
    ]
    assert summaries[0] == summaries[1]
    config.write_text(config.read_text().replace("seed = 0", "seed = 1"))
    (tmp_path / "old" / "summary.json").unlink()
    with pytest.raises(UsageError, match="another config"):
        resume(tmp_path / "old")


def test_agents_pt_saves_every_agents_rows_once_without_a_copy(tmp_path):
    module = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    rows = torch.randn(5, sum(p.numel() for p in module.parameters()))
    state = stacked_state(module, rows)
    assert all(
        t.untyped_storage().data_ptr() == rows.untyped_storage().data_ptr() for t in state.values()
    )
    torch.save(state, tmp_path / AGENTS_FILE)
    loaded = torch.load(tmp_path / AGENTS_FILE, weights_only=True)
    assert torch.equal(torch.cat([t.reshape(5, -1) for t in loaded.values()], dim=1), rows)
    # rows that are a view of a larger storage are copied, so the file holds only them
    part = stacked_state(module, torch.randn(8, rows.shape[1])[2:7])
    assert all(t.untyped_storage().nbytes() == t.nbytes for t in part.values())
