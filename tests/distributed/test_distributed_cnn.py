"""The cnn in the distributed runtime: two ranks on loopback give the simulator's run."""

from __future__ import annotations

import json

import pytest
import torch
from ranks import drive, read_records

from murmur.config import load_experiment
from murmur.experiment import run

TOML = """
[run]
seed = 2
iterations = 20
eval_every = 10
[data]
dataset = "digits"
batch_size = 8
[model]
name = "cnn"
[topology]
graph = "ring"
agents = 2
[algorithm]
name = "dsgd"
a = 0.3
b = 0.3
"""


def test_two_ranks_train_the_cnn_as_the_simulator_does(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(TOML)
    out, params = tmp_path / "distributed", tmp_path / "params.pt"
    argv = ["run", str(path), "--runtime", "distributed", "--out", str(out), "--quiet"]
    report, stderr = drive(tmp_path, [*argv, "--timeout", "30"], world=2, params=params)
    assert report["codes"] == {"0": 0, "1": 0}, stderr

    ((_, config),) = load_experiment(str(path)).runs
    simulated = run(config, tmp_path / "simulated")
    summary = json.loads((out / "summary.json").read_text())
    for key in ("messages", "bytes", "samples", "iterations"):
        assert summary[key] == getattr(simulated, key), key
    assert summary["bytes"] == summary["messages"] * 19754 * 4  # float32 LeNet of digits
    records, expected = read_records(out), read_records(tmp_path / "simulated")
    assert [r["iteration"] for r in records] == [0, 10, 20]
    for got, want in zip(records, expected, strict=True):
        for key in ("test_loss", "test_accuracy", "consensus_distance"):
            assert got[key] == pytest.approx(want[key], abs=1e-4), key
    distributed = torch.load(params)
    torch.testing.assert_close(distributed, simulated.parameters, atol=1e-4, rtol=1e-4)
    assert not torch.equal(simulated.parameters[0], simulated.parameters[1])
