"""Synchronous dSSFN in the distributed runtime: one node per rank on loopback gloo,
its gossip through a DistributedTransport, gives the simulator's output matrices
and messages; a rank killed, frozen or failing mid-run is named by the others;
``murmur launch`` writes the simulator's results.

The ranks are forked by the driver of ranks.py: in the first test each calls
``train_layerwise_rank`` directly; in the others each runs ``murmur run``. The
last runs ``murmur launch``. Every process has a deadline.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import torch
from ranks import (
    Fault,
    Kill,
    assert_failed_naming,
    assert_others_stop_naming,
    drive,
    launch,
    read_records,
)

from murmur.config import load_experiment
from murmur.experiment import run

LAYERWISE_RANK = r"""
import os
from datetime import timedelta
import torch
import torch.distributed as dist
from murmur.config import load_experiment
from murmur.training.setup import build_context, prepare
from murmur.registry import ALGORITHMS
from murmur.distributed.group import loopback_interface
from murmur.distributed.layer_ranks import train_layerwise_rank


def main(argv):
    config_path, out = argv
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback_interface() or "lo")
    ((_, config),) = load_experiment(config_path).runs
    setup = prepare(config)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}", rank=rank,
        world_size=world, timeout=timedelta(seconds=30),
    )
    solver = ALGORITHMS[config.algorithm.name].build(
        config.algorithm, setup.graph, build_context(setup)
    )
    trained, counters = train_layerwise_rank(setup, solver, rank, timeout=20.0)
    torch.save(
        {"outputs": trained.outputs,
         "events": counters.events, "messages": counters.messages, "bytes": counters.bytes},
        os.path.join(out, f"rank{rank}.pt"),
    )
    dist.destroy_process_group()
"""
"""Each rank trains its node through ``train_layerwise_rank`` and saves what it holds."""

TOML = """
[run]
seed = 5
[data]
dataset = "blobs"
[topology]
graph = "ring"
agents = 4
[algorithm]
name = "dssfn"
lam = 1e2
mu = 1.0
layers = 2
nodes = 12
admm_iterations = 6
gossip_rounds = 3
"""


def test_sync_dssfn_on_four_ranks_gives_the_simulators_outputs_and_messages(tmp_path: Path):
    config_path = tmp_path / "config.toml"
    config_path.write_text(TOML)
    out = tmp_path / "ranks"
    out.mkdir()
    argv = [str(config_path), str(out)]
    report, stderr = drive(tmp_path, argv, world=4, main=LAYERWISE_RANK, limit=60.0)
    assert report["codes"] == {"0": 0, "1": 0, "2": 0, "3": 0}, stderr

    ((_, config),) = load_experiment(str(config_path)).runs
    simulated = run(config, None)
    ranks = [torch.load(out / f"rank{rank}.pt") for rank in range(4)]
    outputs = torch.cat([rank["outputs"] for rank in ranks])
    assert outputs.shape == simulated.parameters.shape
    torch.testing.assert_close(outputs, simulated.parameters, rtol=1e-9, atol=1e-12)
    spread = (outputs - outputs.mean(dim=0)).abs().max()
    assert spread > 1e-6  # the nodes disagree: each rank's matrices are its own node's
    assert simulated.messages > 0
    assert sum(rank["messages"] for rank in ranks) == simulated.messages
    assert sum(rank["bytes"] for rank in ranks) == simulated.bytes
    assert [rank["events"] for rank in ranks] == simulated.events_per_agent


# ---- through murmur run and murmur launch: failures, and the run folder -----------------------

SMALL_DSSFN = [
    "--set=topology.agents=4",
    "--set=algorithm.layers=2",
    "--set=algorithm.nodes=20",
    "--set=algorithm.admm_iterations=5",
    "--set=algorithm.gossip_rounds=2",
    "--set=algorithm.tolerance=0",
]
LONG_DSSFN = [
    "--set=topology.agents=4",
    "--set=algorithm.layers=3",
    "--set=algorithm.nodes=20",
    "--set=algorithm.admm_iterations=5000",
    "--set=algorithm.gossip_rounds=2",
    "--set=algorithm.tolerance=0",
]


def test_sync_dssfn_through_murmur_run_gives_the_simulators_run(tmp_path):
    out, params = tmp_path / "distributed", tmp_path / "params.pt"
    argv = ["run", "dssfn-vowel", *SMALL_DSSFN, "--runtime", "distributed", "--out", str(out)]
    report, stderr = drive(tmp_path, [*argv, "--quiet", "--timeout", "20"], world=4, params=params)
    assert report["codes"] == {"0": 0, "1": 0, "2": 0, "3": 0}, stderr

    ((_, config),) = load_experiment("dssfn-vowel", [item[6:] for item in SMALL_DSSFN]).runs
    simulated = run(config, tmp_path / "simulated")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["runtime"] == "distributed"
    assert summary["rejected_per_agent"] == [0, 0, 0, 0]
    assert set(simulated.to_dict()) - set(summary) == {"virtual_seconds"}
    for key in ("events", "events_per_agent", "messages", "bytes", "samples", "iterations"):
        assert summary[key] == getattr(simulated, key), key
    assert simulated.messages > 0
    expected = simulated.to_dict()
    for key in ("layers", "admm_iterations", "mean_degree", "topology", "agents"):
        assert summary[key] == expected[key], key
    assert summary["accuracy"] == expected["accuracy"]
    assert summary["train_accuracy"] == expected["train_accuracy"]
    assert summary["train_nme"] == pytest.approx(expected["train_nme"], abs=1e-9)
    assert summary["test_loss"] == pytest.approx(expected["test_loss"], abs=1e-9)

    records, wanted = read_records(out), read_records(tmp_path / "simulated")
    assert [r["layer"] for r in records] == [0, 1, 2]
    for got, want in zip(records, wanted, strict=True):
        assert set(want) - set(got) == {"virtual_seconds"}  # rank-local: left out
        for key in ("layer", "width", "admm_iterations", "test_accuracy", "train_accuracy"):
            assert got[key] == want[key], key
        for key in ("events", "messages", "bytes", "events_per_agent"):
            assert got[key] == want[key], key
        for key in ("test_loss", "train_nme", "consensus_distance"):
            assert got[key] == pytest.approx(want[key], rel=1e-9, abs=1e-12), key
    torch.testing.assert_close(torch.load(params), simulated.parameters, rtol=1e-9, atol=1e-12)


CONVERGING_DSSFN = [
    "--set=topology.agents=4",
    "--set=algorithm.layers=1",
    "--set=algorithm.nodes=20",
    "--set=algorithm.admm_iterations=400",
    "--set=algorithm.mu=0.1",
    "--set=algorithm.tolerance=1e-2",
    "--set=algorithm.gossip_rounds=auto",
    "--set=algorithm.consensus_tolerance=1e-4",
]


def test_sync_dssfn_that_stops_on_its_tolerances_agrees_with_the_simulator(tmp_path):
    """Auto gossip and ADMM's tolerance take their stopping sums by all-reduce: every rank
    stops at the simulator's iteration and round, with its messages and its accuracy."""
    out = tmp_path / "distributed"
    argv = ["run", "dssfn-vowel", *CONVERGING_DSSFN, "--runtime", "distributed", "--out", str(out)]
    report, stderr = drive(tmp_path, [*argv, "--quiet", "--timeout", "20"], world=4)
    assert report["codes"] == {"0": 0, "1": 0, "2": 0, "3": 0}, stderr
    ((_, config),) = load_experiment("dssfn-vowel", [item[6:] for item in CONVERGING_DSSFN]).runs
    expected = run(config, None).to_dict()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["unconverged_layers"] == expected["unconverged_layers"] == []
    steps = [(r["solver_steps"], r["gossip_rounds"]) for r in summary["layer_reports"]]
    assert steps == [(r["solver_steps"], r["gossip_rounds"]) for r in expected["layer_reports"]]
    assert all(1 < s < 400 and g > s for s, g in steps)
    assert summary["messages"] == expected["messages"]
    assert summary["accuracy"] == expected["accuracy"]


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "frozen"])
def test_a_dssfn_rank_that_stops_answering_stops_every_other_rank_naming_it(tmp_path, stop):
    """Killed or frozen in the middle of a layer's ADMM iterations: the other ranks
    each end with one line naming rank 2, within two timeouts of the kill."""
    timeout = 2.0
    out = tmp_path / "run"
    argv = ["run", "dssfn-vowel", *LONG_DSSFN, "--runtime", "distributed", "--out", str(out)]
    report, stderr = drive(
        tmp_path,
        [*argv, "--quiet", "--timeout", str(timeout)],
        world=4,
        kill=Kill(rank=2, when=str(out / "config.toml"), delay=0.5, signal=int(stop)),
        limit=30.0,
    )
    assert_others_stop_naming(report, stderr, 2, timeout, frozen=stop == signal.SIGSTOP)
    assert_failed_naming(out, "rank 2")


def test_a_dssfn_rank_that_fails_tells_the_others_instead_of_leaving_them_to_time_out(tmp_path):
    timeout = 20.0
    out = tmp_path / "run"
    argv = ["run", "dssfn-vowel", *LONG_DSSFN, "--runtime", "distributed", "--out", str(out)]
    mid_layer = Fault(
        ranks=(2,), target="murmur.algorithms.dssfn:consensus_prox", after=50, fail="raise"
    )
    report, stderr = drive(
        tmp_path,
        [*argv, "--quiet", "--timeout", str(timeout)],
        world=4,
        faults=(mid_layer,),
        limit=30.0,
    )
    assert report["codes"]["2"] == 1 and "injected failure" in stderr[2], stderr[2]
    for rank in (0, 1, 3):
        assert report["codes"][str(rank)] == 1, (report, stderr)
        assert stderr[rank].count("\n") == 1, stderr[rank]
        assert "rank 2 failed" in stderr[rank], stderr[rank]
    assert max(report["after_start"].values()) < timeout / 2, report
    assert_failed_naming(out, "rank 2 failed")


def test_launch_runs_sync_dssfn_and_rank_0_writes_the_simulators_results(tmp_path):
    out = tmp_path / "run"
    argv = ["launch", "--nproc", "4", "dssfn-vowel", *SMALL_DSSFN, "--out", str(out), "--quiet"]
    done = launch([*argv, "--timeout", "20"])
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "dssfn" in done.stdout and str(out) in done.stdout
    assert sorted(p.name for p in out.iterdir()) == ["config.toml", "metrics.jsonl", "summary.json"]

    ((_, config),) = load_experiment("dssfn-vowel", [item[6:] for item in SMALL_DSSFN]).runs
    simulated = run(config, None).to_dict()
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["runtime"], summary["algorithm"], summary["agents"]) == (
        "distributed",
        "dssfn",
        4,
    )
    assert summary["layers"] == simulated["layers"] and len(summary["layers"]) == 2
    assert len(summary["accuracy"]["per_agent"]) == 4
    assert summary["accuracy"]["per_agent"] == simulated["accuracy"]["per_agent"]
    assert summary["messages"] == simulated["messages"] > 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["layer"] for r in records] == [0, 1, 2]
    assert [r["width"] for r in records[1:]] == summary["layers"]
    assert all(len(r["test_accuracy"]) == 4 for r in records)
    assert load_experiment(str(out / "config.toml")).runs[0][1].algorithm == config.algorithm
