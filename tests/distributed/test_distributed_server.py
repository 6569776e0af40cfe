"""AsySG-con and sync-ps in the distributed runtime: a parameter server on rank 0 and
three workers, as real processes on loopback (forked by one driver, see ranks.py).

A worker is slowed (it sleeps before each gradient) or killed (SIGKILL to itself
after some gradients) by patching its batch sampler in the driver; AsySG-con
carries on with the others and reports the one it lost, sync-ps stops naming it.
"""

from __future__ import annotations

import json
from pathlib import Path
from signal import SIGKILL, SIGSTOP

import pytest
import torch
from ranks import Fault, launch
from ranks import drive as drive_ranks

from murmur.cli import main
from murmur.config import load_experiment
from murmur.experiment import run

TOML = """
[run]
seed = 3
iterations = {iterations}
eval_every = 10
[data]
dataset = "blobs"
batch_size = 8
[model]
name = "mlp"
hidden = [8]
[algorithm]
{algorithm}
a = 0.2
workers = 3
target_loss = {target}
"""
ASYSG = 'name = "asysg-con"\ngroup = 1'
SYNC_PS = 'name = "sync-ps"'

TARGET = 0.05


def drive(
    tmp_path: Path,
    *,
    iterations: int = 2000,
    target: float = TARGET,
    faults: tuple[Fault, ...] = (),
    timeout: float = 10.0,
    limit: float = 60.0,
    algorithm: str = ASYSG,
    params: Path | None = None,
) -> tuple[dict, dict[int, str], dict, list[dict]]:
    """Run server + 3 workers; exit codes, stderr per rank, summary and records."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = tmp_path / "config.toml"
    config.write_text(TOML.format(iterations=iterations, target=target, algorithm=algorithm))
    out = tmp_path / "run"
    argv = ["run", str(config), "--runtime", "distributed", "--out", str(out), "--quiet"]
    report, stderr = drive_ranks(
        tmp_path,
        [*argv, "--timeout", str(timeout)],
        world=4,
        faults=faults,
        limit=limit,
        params=params,
    )
    if not (out / "summary.json").exists():
        return report, stderr, {}, []
    summary = json.loads((out / "summary.json").read_text())
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return report, stderr, summary, records


def test_three_workers_and_a_server_reach_the_target_loss(tmp_path):
    report, stderr, summary, records = drive(tmp_path)
    assert report["codes"] == {"0": 0, "1": 0, "2": 0, "3": 0}, stderr
    assert all(text == "" for text in stderr.values()), stderr
    assert summary["runtime"] == "distributed"
    assert summary["algorithm"] == "asysg-con"
    assert (summary["agents"], summary["workers"], summary["world_size"]) == (3, 3, 4)
    assert "virtual_seconds" not in summary
    assert summary["failed_workers"] == []
    assert summary["train_loss"] <= TARGET
    assert summary["iterations_to_target"] == summary["iterations"] < 2000
    assert records[-1]["train_loss"] <= TARGET
    assert [r["iteration"] for r in records[:2]] == [0, 10]
    assert all("virtual_seconds" not in r for r in records)
    staleness = summary["staleness"]
    assert sum(staleness["histogram"]) == summary["iterations"]  # M = 1
    assert staleness["max"] == len(staleness["histogram"]) - 1
    assert sum(summary["events_per_agent"]) == summary["iterations"]
    assert min(summary["events_per_agent"]) > 0, "every worker contributes"
    # Every worker starts from the initial model (no message); one answer per push but
    # the last.
    assert summary["server_messages"] == summary["iterations"] - 1
    assert summary["messages"] == summary["iterations"] + summary["server_messages"]
    assert summary["control_messages"] == 3  # STOP


def test_launch_runs_the_server_and_the_workers(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(TOML.format(iterations=50, target=0.0, algorithm=ASYSG))
    out = tmp_path / "run"
    argv = ["launch", "--nproc", "4", str(config), "--out", str(out), "--quiet"]
    done = launch([*argv, "--timeout", "20"])
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "asysg-con" in done.stdout and str(out) in done.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["runtime"], summary["iterations"], summary["failed_workers"]) == (
        "distributed",
        50,
        [],
    )


def test_a_slow_worker_raises_the_staleness_and_the_run_still_finishes(tmp_path):
    fast = drive(tmp_path / "fast", iterations=300, target=0.0)
    slow = drive(
        tmp_path / "slow", iterations=300, target=0.0, faults=(Fault(ranks=(2,), sleep=0.1),)
    )
    for report, stderr, summary, _ in (fast, slow):
        assert report["codes"] == {"0": 0, "1": 0, "2": 0, "3": 0}, stderr
        assert summary["iterations"] == 300 and summary["failed_workers"] == []
    fast_summary, slow_summary = fast[2], slow[2]
    assert slow_summary["staleness"]["max"] > fast_summary["staleness"]["max"]
    pushes = slow_summary["events_per_agent"]
    assert pushes[1] < min(pushes[0], pushes[2]), pushes  # worker 1 is rank 2


def test_a_killed_worker_is_reported_and_the_others_finish_the_run(tmp_path):
    report, stderr, summary, records = drive(
        tmp_path,
        iterations=400,
        target=0.0,
        faults=(Fault(ranks=(2,), after=20, fail=SIGKILL),),
    )
    assert report["codes"]["2"] == -9
    assert report["codes"]["1"] == 0 and report["codes"]["3"] == 0, stderr
    assert summary["iterations"] == 400
    assert summary["failed_workers"] == [2]
    assert "connection" in summary["failures"]["2"], summary["failures"]
    assert summary["events_per_agent"][1] <= 20
    assert records[-1]["iteration"] == 400
    assert max(report["after_start"].values()) < 30


def test_a_frozen_worker_is_dropped_at_the_timeout_and_the_others_finish_the_run(tmp_path):
    """SIGSTOP: its connection stays open but it sends nothing; the server names it
    after ``timeout`` seconds and carries on."""
    timeout = 1.0
    # Long enough that the others are still training when the server's deadline passes.
    report, stderr, summary, records = drive(
        tmp_path,
        iterations=3000,
        target=0.0,
        faults=(Fault(ranks=(3,), after=20, fail=SIGSTOP),),
        timeout=timeout,
    )
    assert report["codes"]["1"] == 0 and report["codes"]["2"] == 0, stderr
    assert summary["iterations"] == 3000
    assert summary["failed_workers"] == [3]
    assert f"sent no gradient within {timeout:g} s" in summary["failures"]["3"]
    assert summary["events_per_agent"][2] <= 20
    assert records[-1]["iteration"] == 3000
    assert max(report["after_start"].values()) < 30


def test_when_every_worker_is_lost_the_server_stops_with_one_line(tmp_path):
    report, stderr, summary, _ = drive(
        tmp_path,
        iterations=100_000,
        target=0.0,
        faults=(Fault(ranks=(1, 2, 3), after=5, fail=SIGKILL),),
    )
    assert report["codes"] == {"0": 1, "1": -9, "2": -9, "3": -9}, stderr
    lines = stderr[0].splitlines()
    assert len(lines) == 1, stderr[0]
    assert lines[0].startswith("murmur: error: rank 0 stopped: every worker failed"), lines[0]
    assert summary["status"] == "failed" and "every worker failed" in summary["error"]
    assert report["after_start"]["0"] < 20


# ---- sync-ps: the synchronous baseline -----------------------------------------------------


def test_sync_ps_gives_the_simulators_model_and_messages(tmp_path):
    """The server waits for all three gradients of each model and sums them in worker
    order, so timing does not matter: the simulator's sync-ps model to the bit, and
    no staleness."""
    params = tmp_path / "params.pt"
    report, stderr, summary, records = drive(
        tmp_path / "distributed", iterations=60, target=0.0, algorithm=SYNC_PS, params=params
    )
    assert report["codes"] == {"0": 0, "1": 0, "2": 0, "3": 0}, stderr
    config_path = tmp_path / "distributed" / "config.toml"
    ((_, config),) = load_experiment(str(config_path)).runs
    simulated = run(config)
    assert summary["algorithm"] == "sync-ps" and summary["iterations"] == 60
    assert summary["events_per_agent"] == simulated.events_per_agent == [60, 60, 60]
    assert summary["messages"] == simulated.messages == 60 * 3 + 59 * 3
    assert summary["staleness"]["histogram"] == [180]
    assert [r["iteration"] for r in records] == [0, 10, 20, 30, 40, 50, 60]
    torch.testing.assert_close(torch.load(params), simulated.parameters, rtol=0, atol=0)


@pytest.mark.parametrize("stop", [SIGKILL, SIGSTOP], ids=["killed", "frozen"])
def test_sync_ps_stops_every_rank_naming_a_failed_worker(tmp_path, stop):
    timeout = 2.0
    report, stderr, summary, _ = drive(
        tmp_path,
        iterations=100_000,
        target=0.0,
        algorithm=SYNC_PS,
        faults=(Fault(ranks=(2,), after=20, fail=stop),),
        timeout=timeout,
    )
    assert summary["status"] == "failed" and "rank 2" in summary["error"], summary
    for rank in (0, 1, 3):
        assert report["codes"][str(rank)] == 1, (report, stderr)
        lines = stderr[rank].splitlines()
        assert len(lines) == 1, stderr[rank]
        assert lines[0].startswith(f"murmur: error: rank {rank} stopped:"), lines[0]
        assert "rank 2" in lines[0].split("stopped:", 1)[1], lines[0]
    assert "sync-ps cannot go on without it" in stderr[0]
    assert "the server stopped because of it" in stderr[1]
    # Killed: named at once. Frozen: at the server's timeout, then the workers are told.
    assert max(report["after_start"][str(r)] for r in (0, 1, 3)) < 3 * timeout + 10


@pytest.mark.parametrize("world", ["3", "5"])
def test_a_world_size_other_than_workers_plus_one_is_one_line(capsys, monkeypatch, tmp_path, world):
    environ = {"RANK": "0", "WORLD_SIZE": world, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    config = tmp_path / "config.toml"
    config.write_text(TOML.format(iterations=10, target=0.0, algorithm=ASYSG))
    code = main(["run", str(config), "--runtime", "distributed"])
    out, err = capsys.readouterr()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"WORLD_SIZE is {world} but asysg-con with algorithm.workers = 3 needs 4 ranks" in err


def test_launch_refuses_a_process_count_other_than_workers_plus_one(capsys, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(TOML.format(iterations=10, target=0.0, algorithm=ASYSG))
    code = main(["launch", "--nproc", "3", str(config)])
    _, err = capsys.readouterr()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "--nproc is 3 but asysg-con" in err
