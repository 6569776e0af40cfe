"""The rules of ``[collapse]`` in the distributed runtime: a run built to trip one stops
on every rank at the evaluation where the simulator's run of it stops, and rank 0's
folder says so as the simulator's does (ranks as real processes on loopback, forked by
one driver).

The runs are made to trip a rule with a setting, not by luck: a ``chance_margin`` of
0.95 counts every accuracy as chance level, so the ``chance`` rule fires ``patience``
evaluations after the warm-up; a step of 50 blows the loss up.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from ranks import assert_records_match, drive, read_records
from test_distributed import DSGD, write_config
from test_distributed_dssfn import TOML as DSSFN

from murmur.config import load_experiment
from murmur.experiment import run

AT_CHANCE = ["collapse.chance_margin=0.95", "collapse.patience=2", "run.eval_every=10"]
SYNC_PS = """
[run]
seed = 3
iterations = 60
eval_every = 10
[data]
dataset = "blobs"
batch_size = 8
[model]
name = "mlp"
hidden = [8]
[algorithm]
name = "sync-ps"
a = 0.2
workers = 3
"""


def _simulated(path: Path, settings: list[str], out: Path) -> tuple[list[dict], dict]:
    ((_, config),) = load_experiment(str(path), settings).runs
    result = run(config, out)
    if result.parameters is not None:
        torch.save(result.parameters, out / "params.pt")
    return read_records(out), json.loads((out / "summary.json").read_text())


def _distributed(
    tmp_path: Path, path: Path, settings: list[str], world: int, extra: tuple[str, ...] = ()
) -> tuple[list[dict], dict, dict[int, str]]:
    out = tmp_path / "distributed"
    argv = ["run", str(path), "--runtime", "distributed", "--out", str(out), *extra]
    for setting in settings:
        argv += ["--set", setting]
    report, stderr = drive(
        tmp_path, [*argv, "--timeout", "20"], world=world, params=tmp_path / "params.pt"
    )
    assert report["codes"] == {str(rank): 0 for rank in range(world)}, stderr
    return read_records(out), json.loads((out / "summary.json").read_text()), stderr


@pytest.mark.parametrize("agents_per_rank", [1, 2])
def test_every_rank_stops_where_the_simulator_stops_a_run_at_chance(tmp_path, agents_per_rank):
    path = write_config(tmp_path, DSGD, iterations=100)
    world = 4 // agents_per_rank
    extra = ("--agents-per-rank", str(agents_per_rank), "--quiet")
    records, summary, stderr = _distributed(tmp_path, path, AT_CHANCE, world, extra)
    expected, simulated = _simulated(path, AT_CHANCE, tmp_path / "simulated")

    # warm-up 0.2 of 100 iterations, then two evaluations in a row: 20 and 30
    assert simulated["status"] == "collapsed"
    assert simulated["stopped"]["iteration"] == 30
    for key in ("status", "stopped", "iterations", "messages", "bytes", "events"):
        assert summary[key] == simulated[key], key
    assert [r["iteration"] for r in records] == [0, 10, 20, 30]
    assert_records_match(records, expected)
    sim_params = torch.load(tmp_path / "simulated" / "params.pt")
    assert torch.allclose(torch.load(tmp_path / "params.pt"), sim_params, atol=1e-5)
    line = "murmur: dsgd collapsed at iteration 30: test accuracy"
    assert line in stderr[0]
    assert all("collapsed" not in stderr[rank] for rank in range(1, world))


def test_a_diverging_distributed_run_ends_as_diverged_not_failed(tmp_path):
    path = write_config(tmp_path, 'name = "dsgd"\na = 50.0\nb = 0.3', iterations=100)
    settings = ["run.eval_every=5"]
    records, summary, _ = _distributed(tmp_path, path, settings, 4, ("--quiet",))
    expected, simulated = _simulated(path, settings, tmp_path / "simulated")
    assert simulated["status"] == "diverged"
    assert summary["status"] == "diverged"
    assert summary["stopped"] == simulated["stopped"]
    assert summary["iterations"] == simulated["iterations"] < 100
    assert len(records) == len(expected)


def test_a_parameter_server_stops_at_the_evaluation_the_simulator_stops_at(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(SYNC_PS)
    settings = ["collapse.chance_margin=0.95", "collapse.patience=2"]
    records, summary, _ = _distributed(tmp_path, path, settings, 4, ("--quiet",))
    _, simulated = _simulated(path, settings, tmp_path / "simulated")
    assert simulated["status"] == "collapsed"
    assert summary["stopped"] == simulated["stopped"]
    assert summary["iterations"] == simulated["iterations"] == 30
    assert [r["iteration"] for r in records] == [0, 10, 20, 30]


def test_sync_dssfn_ranks_stop_at_the_layer_the_simulator_stops_at(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(DSSFN.replace("layers = 2", "layers = 5"))
    settings = ["collapse.chance_margin=0.95", "collapse.patience=2"]
    records, summary, _ = _distributed(tmp_path, path, settings, 4, ("--quiet",))
    expected, simulated = _simulated(path, settings, tmp_path / "simulated")
    assert simulated["status"] == "collapsed"
    assert summary["status"] == "collapsed"
    assert summary["stopped"] == simulated["stopped"]
    assert [r["layer"] for r in records] == [r["layer"] for r in expected]
    assert len(records) < 6  # layers 0-5: the run stopped before its last
