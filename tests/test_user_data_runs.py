"""A Dataset given from Python: run(config, data=...), its plan and its saved config."""

from __future__ import annotations

import dataclasses
import tomllib

import numpy as np
import pytest
import torch
from torch import nn

import murmur
from murmur.config import load_experiment
from murmur.data import dataset_sha256, from_arrays, save_npz
from murmur.errors import UsageError
from murmur.experiment import resume
from murmur.training.plan import Plan, plan
from murmur.training.setup import prepare

SMALL = [
    "run.iterations=20",
    "run.eval_every=10",
    "model.hidden=[8]",
    "topology.agents=3",
    "data.batch_size=8",
    "data.partition=iid",
]


def _config(preset: str = "dsgd", *settings: str):
    ((_, config),) = load_experiment(preset, [*SMALL, *settings]).runs
    return config


def _dataset(seed: int = 0, task: str = "classification"):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(120, 4)).astype(np.float32)
    if task == "regression":
        y = x @ np.array([1.0, -2.0, 0.5, 0.0]) + 0.1
        return from_arrays(x[:96], y[:96], x[96:], y[96:], task="regression")
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0)
    return from_arrays(x[:96], y[:96], x[96:], y[96:])


def test_a_run_on_given_arrays_saves_their_name_and_hash(tmp_path):
    data = _dataset()
    result = murmur.run(_config(), tmp_path / "run", data=data)
    assert result.dataset == "arrays" and len(result.accuracy["per_agent"]) == 3
    saved = tomllib.loads((tmp_path / "run" / "config.toml").read_text())["data"]
    assert saved["dataset"] == "arrays"
    assert saved["sha256"] == dataset_sha256(data)


def test_the_setup_trains_on_the_given_tensors_not_a_loaded_set():
    data = _dataset()
    checked = plan(dataclasses.replace(_config(), data=_arrays_data()), data=data)
    setup = prepare(checked, data=data)
    assert setup.dataset is data
    assert checked.config.data.sha256 == dataset_sha256(data)


def _arrays_data():
    return dataclasses.replace(_config().data, dataset="arrays")


def test_a_config_of_arrays_needs_its_arrays_and_the_same_ones():
    config = dataclasses.replace(_config(), data=_arrays_data())
    with pytest.raises(UsageError, match='"arrays" stands for a Dataset given from Python'):
        plan(config)
    with pytest.raises(UsageError, match='runs as data.dataset = "arrays", not'):
        plan(_config(), data=_dataset())
    saved = plan(config, data=_dataset()).config
    with pytest.raises(UsageError, match="the dataset given as data= is not the run's: sha256"):
        murmur.run(saved, data=_dataset(seed=1))
    murmur.run(saved, data=_dataset())  # the same arrays again


def test_the_distributed_runtime_asks_for_a_file_instead():
    config = dataclasses.replace(_config(), data=_arrays_data())
    with pytest.raises(UsageError, match=r"read their data from a file.*save_npz\(dataset, path\)"):
        plan(config, "distributed", data=_dataset())


def test_regression_arrays_train_a_linear_model():
    result = murmur.run(_config("dsgd", "model.name=linear"), data=_dataset(task="regression"))
    assert result.accuracy["mean"] is None
    assert np.isfinite(result.test_loss)


def test_arrays_and_a_model_of_ones_own_together():
    module = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))
    result = murmur.run(_config(), model=module, data=_dataset())
    assert result.parameters.shape == (3, sum(p.numel() for p in module.parameters()))


def test_the_sizes_of_given_arrays_are_checked_by_the_plan():
    with pytest.raises(UsageError, match="topology.agents=97 exceeds the 96 training samples"):
        murmur.run(_config("dsgd", "topology.agents=97"), data=_dataset())
    module = nn.Linear(5, 3)
    with pytest.raises(UsageError, match="the model cannot read rows of 4 features"):
        murmur.run(_config(), model=module, data=_dataset())


def test_a_stopped_run_on_arrays_resumes_with_them(tmp_path):
    config = _config("dsgd", "run.checkpoint_every=10", "run.iterations=30")
    data = _dataset()
    murmur.run(config, tmp_path / "run", data=data)
    (tmp_path / "run" / "summary.json").unlink()  # as if it had stopped
    with pytest.raises(UsageError, match='"arrays" stands for a Dataset given from Python'):
        resume(tmp_path / "run")
    assert resume(tmp_path / "run", data=data).iterations == 30


def test_a_saved_npz_of_arrays_is_a_file_dataset(tmp_path):
    data = _dataset()
    path = save_npz(data, tmp_path / "mine.npz")
    config = _config("dsgd", "data.dataset=file", f"data.path={path}")
    checked = plan(config)
    setup = prepare(checked)
    assert torch.equal(setup.dataset.x_train, data.x_train)
    assert checked.config.data.sha256 != dataset_sha256(data)  # the file's bytes, not arrays


def test_a_rank_refuses_a_file_changed_since_its_plan(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text("a,label\n" + "\n".join(f"{i},{i % 2}" for i in range(30)) + "\n")
    config = _config("dsgd", "data.dataset=file", f"data.path={path}")
    sent = Plan.from_json(plan(config, "distributed", world=3).to_json())
    assert sent.config.data.sha256
    prepare(sent)  # the file the plan read
    path.write_text(path.read_text() + "30,0\n")
    with pytest.raises(UsageError, match=f"data.path {path} changed since the run"):
        prepare(sent)
