"""Local optimizers in the distributed runtime: each rank keeps its agents' optimizer
state, and the run is the simulator's, to float tolerance (one agent per rank, a block
of agents per rank, and sync-ps's server-side optimizer to the bit); ranks killed and
resumed from their checkpoints, optimizer state included, end as the run never
stopped."""

from __future__ import annotations

import json

import pytest
import torch
from ranks import assert_records_match, drive, read_records, run_ranks
from test_distributed import DETSGRAD, write_config
from test_distributed_plugins import NETWORKS
from test_distributed_resume import comparable, whole_and_stopped
from test_distributed_server import SYNC_PS
from test_distributed_server import drive as drive_server

from murmur.config import load_experiment
from murmur.experiment import run

MOMENTUM = 'optimizer = "momentum"\nbeta1 = 0.9\nweight_decay = 0.001'
ADAM = 'optimizer = "adam"\nwarmup = 10'
ADAM_TRACKING = 'name = "detsgrad-gt"\na = 0.01\nv0 = 30.0\nvy = 5.0'
"""Adam's steps are about alpha_k per coordinate: the model trigger scales with it."""


@pytest.mark.parametrize(
    ("algorithm", "world", "block"),
    [
        (f"{DETSGRAD}\n{MOMENTUM}", 4, 1),
        (f"{ADAM_TRACKING}\n{ADAM}", 2, 2),
    ],
    ids=["detsgrad-momentum-4x1", "detsgrad-gt-adam-2x2"],
)
def test_ranks_with_an_optimizer_give_the_simulators_run(tmp_path, algorithm, world, block):
    path = write_config(tmp_path, algorithm, iterations=50, agents=4)
    out, params = tmp_path / "distributed", tmp_path / "params.pt"
    argv = ["run", str(path), "--runtime", "distributed", "--out", str(out), "--quiet"]
    argv += ["--timeout", "20", "--agents-per-rank", str(block)]
    report, stderr = drive(tmp_path, argv, world=world, params=params)
    assert report["codes"] == {str(rank): 0 for rank in range(world)}, stderr

    ((_, config),) = load_experiment(str(path)).runs
    simulated = run(config, tmp_path / "simulated")
    summary = json.loads((out / "summary.json").read_text())
    for key in ("events", "events_per_agent", "messages", "bytes", "samples", "iterations"):
        assert summary[key] == getattr(simulated, key), key
    assert 0 < summary["events"] < 4 * 50, "some agents must stay silent some steps"
    assert_records_match(read_records(out), read_records(tmp_path / "simulated"))
    distributed = torch.load(params)
    difference = float((distributed - simulated.parameters).abs().max())
    print(
        f"{config.algorithm.name} {config.algorithm.optimizer}: max |sim - dist| {difference:.3g}"
    )
    torch.testing.assert_close(distributed, simulated.parameters, atol=1e-5, rtol=1e-5)
    plain = run(config.replace(**{"algorithm.optimizer": "sgd"}))
    assert float((plain.parameters - simulated.parameters).abs().max()) > 100 * difference


def test_sync_ps_with_adam_gives_the_simulators_model_to_the_bit(tmp_path):
    params = tmp_path / "params.pt"
    algorithm = f"{SYNC_PS}\n{ADAM}"
    report, stderr, summary, _ = drive_server(
        tmp_path / "distributed", iterations=30, target=0.0, algorithm=algorithm, params=params
    )
    assert report["codes"] == {"0": 0, "1": 0, "2": 0, "3": 0}, stderr
    ((_, config),) = load_experiment(str(tmp_path / "distributed" / "config.toml")).runs
    assert config.algorithm.optimizer == "adam"
    simulated = run(config)
    assert summary["iterations"] == 30
    torch.testing.assert_close(torch.load(params), simulated.parameters, rtol=0, atol=0)


BATCH_NORM = ("model.name=factory", f"model.factory={NETWORKS}:batch_norm_mlp")


@pytest.mark.parametrize(
    ("algorithm", "settings"),
    [
        pytest.param(f"{DETSGRAD}\n{MOMENTUM}", BATCH_NORM, id="detsgrad-momentum-batch-norm"),
        pytest.param(f"{ADAM_TRACKING}\n{ADAM}", (), id="detsgrad-gt-adam", marks=pytest.mark.slow),
    ],
)
def test_ranks_killed_and_resumed_with_an_optimizer_give_the_uninterrupted_run(
    tmp_path, algorithm, settings
):
    """Every agent's optimizer state, and with the batch-norm network its running
    statistics, come back from the ranks' checkpoints."""
    whole, stopped = whole_and_stopped(tmp_path, algorithm, settings)
    resume = ["run", "--resume", str(stopped), "--runtime", "distributed"]
    report, stderr = run_ranks(tmp_path / "c", resume)
    assert report["codes"] == {"0": 0, "1": 0, "2": 0, "3": 0}, stderr
    assert comparable(stopped) == comparable(whole)
    ours, theirs = (torch.load(f / "agents.pt", weights_only=True) for f in (stopped, whole))
    assert ours.keys() == theirs.keys() and ("1.running_mean" in ours) == bool(settings)
    assert all(torch.equal(tensor, theirs[key]) for key, tensor in ours.items())
