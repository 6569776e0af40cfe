"""Asynchronous dSSFN (ARock) in the distributed runtime: one node per rank on loopback
gloo, no rank ever waiting for a round. Timing differs from run to run, so the
check is the known optimum: every node ends at centralized SSFN's output
matrices. A rank that dies or freezes mid-run is dropped by its neighbours, the
others finish, and rank 0 reports it.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import torch
from ranks import Fault, Kill, drive, read_records

from murmur.config import load_experiment
from murmur.experiment import run

TOML = """
[run]
seed = 3
[data]
dataset = "blobs"
[topology]
graph = "{graph}"
agents = 4
[algorithm]
name = "{name}"
lam = 1.0
alpha = 0.5
mu = 0.1
layers = {layers}
nodes = 6
admm_iterations = {updates}
tolerance = 0
"""


def write_config(folder: Path, name: str, updates: int, layers: int = 2, graph: str = "ring"):
    path = folder / f"{name}.toml"
    path.write_text(TOML.format(name=name, updates=updates, layers=layers, graph=graph))
    return path


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return float((actual - expected).norm() / expected.norm())


def _four_ranks_against_centralized(tmp_path: Path, path: Path):
    """Run ``path`` as four ranks (each must succeed, silently); returns the run folder,
    the ranks' last output matrices and centralized SSFN's (3000 ADMM iterations)."""
    out, params = tmp_path / "run", tmp_path / "params.pt"
    argv = ["run", str(path), "--runtime", "distributed", "--out", str(out), "--quiet"]
    report, stderr = drive(tmp_path, [*argv, "--timeout", "20"], world=4, params=params)
    assert report["codes"] == {"0": 0, "1": 0, "2": 0, "3": 0}, stderr
    assert all(text == "" for text in stderr.values()), stderr
    ((_, central),) = load_experiment(str(write_config(tmp_path, "ssfn", updates=3000))).runs
    return out, torch.load(params), run(central).parameters[0]


def test_four_processes_stop_on_their_tolerance_near_centralized_ssfn(tmp_path):
    """Tolerance 1e-7 with a cap of 5000 updates (and mu = 1e-3, with which every layer
    converges quickly): the pushes tell neighbours who is settled, every layer ends
    before the cap, and every node is within 1e-3 of the centralized solution."""
    path = write_config(tmp_path, "dssfn-async", updates=5000)
    text = path.read_text().replace("tolerance = 0", "tolerance = 1e-7")
    path.write_text(text.replace("mu = 0.1", "mu = 0.001"))
    out, outputs, expected = _four_ranks_against_centralized(tmp_path, path)
    errors = [relative_error(output, expected) for output in outputs]
    assert max(errors) < 1e-3, errors
    summary = json.loads((out / "summary.json").read_text())
    assert summary["unconverged_layers"] == []
    assert all(0 < r["solver_steps"] < 5000 for r in summary["layer_reports"])


def test_four_processes_reach_centralized_ssfn(tmp_path):
    """ARock's fixed point is the centralized solution: 300 updates per node and layer
    bring every node within 2e-3 of it (the simulator's ARock: 5e-4 at 200)."""
    path = write_config(tmp_path, "dssfn-async", updates=300)
    out, outputs, expected = _four_ranks_against_centralized(tmp_path, path)
    assert outputs.shape == (4, *expected.shape)
    errors = [relative_error(output, expected) for output in outputs]
    assert max(errors) < 2e-3, errors

    summary = json.loads((out / "summary.json").read_text())
    assert summary["runtime"] == "distributed"
    assert (summary["ranks"], summary["failed_agents"]) == ([0, 1, 2, 3], [])
    assert summary["layers"] == [2 * 4 + 6] * 2
    assert "virtual_seconds" not in summary  # each rank's clock sees its own node only
    # Every node makes its quota at every layer; a newer push to a neighbour replaces
    # one not yet sent, so a ring carries at most two messages per update.
    assert min(summary["events_per_agent"]) >= 300 * 3
    assert 0 < summary["messages"] <= 2 * summary["events"]
    # A message is one (4 classes x width) float64 block: width 8 at layer 0, then 14.
    assert 4 * 8 * 8 * summary["messages"] < summary["bytes"] < 4 * 14 * 8 * summary["messages"]
    records = read_records(out)
    assert [r["layer"] for r in records] == [0, 1, 2]
    assert all(len(r["test_accuracy"]) == 4 for r in records)
    assert records[-1]["consensus_distance"] < 1e-6


@pytest.mark.parametrize(
    "stop",
    [
        # a killed node's closed connections: test_a_node_that_dies_by_itself_is_dropped...
        pytest.param(signal.SIGKILL, marks=pytest.mark.slow),
        signal.SIGSTOP,
    ],
    ids=["killed", "frozen"],
)
def test_a_rank_that_stops_answering_is_dropped_and_the_others_finish(tmp_path, stop):
    """Rank 2 of a ring stops mid-run. Killed: its neighbours' connections to it close
    and they drop it at once. Frozen: they drop it once it has been silent for the
    timeout while they needed it. Ranks 0, 1 and 3 finish; rank 0 reports it."""
    timeout = 2.0
    path = write_config(tmp_path, "dssfn-async", updates=800)
    out = tmp_path / "run"
    argv = ["run", str(path), "--runtime", "distributed", "--out", str(out), "--quiet"]
    report, stderr = drive(
        tmp_path,
        [*argv, "--timeout", str(timeout)],
        world=4,
        kill=Kill(rank=2, when=str(out / "config.toml"), delay=0.5, signal=int(stop)),
        limit=60.0,
    )
    for rank in ("0", "1", "3"):
        assert report["codes"][rank] == 0, stderr
        assert stderr[int(rank)] == "", stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["failed_agents"] == [2]
    assert summary["ranks"] == [0, 1, 3]
    why = summary["failures"]["2"]
    assert why.startswith(("rank 1 dropped it", "rank 3 dropped it")), why
    cause = "lost the connection" if stop == signal.SIGKILL else "went silent"
    assert cause in why, why
    records = read_records(out)
    assert [r["layer"] for r in records] == [0, 1, 2]
    assert all(len(r["test_accuracy"]) == 3 for r in records)
    assert summary["accuracy"]["min"] > 0.9


def test_a_node_that_dies_by_itself_is_dropped_and_the_others_finish(tmp_path):
    """Rank 3 kills itself at its 150th update, so mid-layer for sure."""
    path = write_config(tmp_path, "dssfn-async", updates=300)
    out = tmp_path / "run"
    argv = ["run", str(path), "--runtime", "distributed", "--out", str(out), "--quiet"]
    fault = Fault(
        ranks=(3,),
        target="murmur.algorithms.arock:ArockNode.update",
        after=150,
        fail=int(signal.SIGKILL),
    )
    report, stderr = drive(tmp_path, [*argv, "--timeout", "20"], world=4, faults=(fault,))
    assert report["codes"]["3"] == -signal.SIGKILL
    for rank in ("0", "1", "2"):
        assert report["codes"][rank] == 0, stderr
    assert max(report["after_start"][rank] for rank in ("0", "1", "2")) < 20
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["ranks"], summary["failed_agents"]) == ([0, 1, 2], [3])
