"""Blocks of agents per rank (``--agents-per-rank K``): the same run as the simulator,
as one agent per rank gives it, and bad block sizes refused in one line.

The ranks of a test are forked by one driver process (see ranks.py), each
running ``murmur run ... --runtime distributed --agents-per-rank K``.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import torch
from ranks import Fault, assert_records_match, drive, kill_rank, launch, read_records, run_ranks
from test_distributed import (
    CHOCO,
    DETSGRAD,
    DSGD,
    LAYERS,
    LEAD,
    SPARQ,
    TRACKING,
    one_line_error,
    write_config,
)
from test_distributed_resume import comparable, digits_config, launch_run

from murmur.cli import main
from murmur.config import load_experiment
from murmur.distributed.checkpoints import FOLDER, saved_iterations
from murmur.experiment import run


@pytest.mark.parametrize(
    ("algorithm", "world", "block"),
    [
        (DSGD, 2, 4),
        (DETSGRAD, 2, 4),
        pytest.param(DETSGRAD, 4, 2, marks=pytest.mark.slow),
        pytest.param(TRACKING, 2, 4, marks=pytest.mark.slow),
        (CHOCO, 4, 2),
        pytest.param(SPARQ, 2, 4, marks=pytest.mark.slow),
        (LAYERS, 4, 2),
        # LEAD's messages go the way CHOCO-SGD's do
        pytest.param(LEAD, 2, 4, marks=pytest.mark.slow),
    ],
    ids=[
        "dsgd-2x4",
        "detsgrad-2x4",
        "detsgrad-4x2",
        "detsgrad-gt-2x4",
        "choco-4x2",
        "sparq-2x4",
        "detsgrad-layers-randk-4x2",
        "lead-2x4",
    ],
)
def test_blocks_of_agents_give_the_simulators_events_messages_and_parameters(
    tmp_path, algorithm, world, block
):
    path = write_config(tmp_path, algorithm, iterations=50, agents=8)
    out, params = tmp_path / "distributed", tmp_path / "params.pt"
    argv = ["run", str(path), "--runtime", "distributed", "--out", str(out), "--quiet"]
    argv += ["--timeout", "20", "--agents-per-rank", str(block)]
    report, stderr = drive(tmp_path, argv, world=world, params=params)
    assert report["codes"] == {str(rank): 0 for rank in range(world)}, stderr
    assert all(text == "" for text in stderr.values()), stderr

    ((_, config),) = load_experiment(str(path)).runs
    simulated = run(config, tmp_path / "simulated")
    summary = json.loads((out / "summary.json").read_text())
    for key in ("events", "events_per_agent", "messages", "bytes", "samples", "iterations"):
        assert summary[key] == getattr(simulated, key), key
    assert (summary["agents"], summary["world_size"], summary["agents_per_rank"]) == (
        8,
        world,
        block,
    )
    assert summary["rejected_per_agent"] == [0] * world
    if algorithm in (DETSGRAD, TRACKING):
        assert 0 < summary["events"] < 8 * 50, "some agents must stay silent some steps"
    if algorithm in (CHOCO, SPARQ):  # compressed: far below dense float32
        dense = summary["messages"] * simulated.parameters.shape[1] * 4
        assert 0 < summary["bytes"] < dense / 4

    records, expected = read_records(out), read_records(tmp_path / "simulated")
    assert [r["iteration"] for r in records] == [0, 25, 50]
    assert_records_match(records, expected)
    torch.testing.assert_close(torch.load(params), simulated.parameters, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("nproc", "block", "words"),
    [
        ("4", "0", "--agents-per-rank must be at least 1, not 0"),
        ("4", "-2", "--agents-per-rank must be at least 1, not -2"),
        ("2", "3", "--agents-per-rank 3 does not divide topology.agents = 8"),
        ("2", "2", "--nproc is 2 with --agents-per-rank 2, 4 agents, but topology.agents is 8"),
    ],
)
def test_launch_refuses_a_block_size_that_does_not_fit(capsys, tmp_path, nproc, block, words):
    path = write_config(tmp_path, DSGD, agents=8)
    argv = ["launch", "--nproc", nproc, "--agents-per-rank", block, str(path)]
    err = one_line_error(capsys, main(argv))
    assert words in err, err


@pytest.mark.parametrize(
    ("algorithm", "words"),
    [
        ('name = "dssfn"', "not dssfn; drop --agents-per-rank"),
        ('name = "asysg-con"\nworkers = 3', "not asysg-con; drop --agents-per-rank"),
        ('name = "sync-ps"\nworkers = 3', "not sync-ps; drop --agents-per-rank"),
    ],
    ids=["dssfn", "parameter-server", "sync-ps"],
)
def test_kinds_other_than_synchronous_sgd_refuse_blocks_naming_those_that_run_them(
    capsys, tmp_path, algorithm, words
):
    path = write_config(tmp_path, algorithm, agents=8)
    err = one_line_error(
        capsys, main(["launch", "--nproc", "4", "--agents-per-rank", "2", str(path)])
    )
    assert words in err, err
    assert (
        "blocks of agents per rank run detsgrad, dsgd, detsgrad-gt, choco-sgd, beer, motef, "
        "lead, sparq-sgd only" in err
    )


def test_a_rank_refuses_a_world_size_that_does_not_hold_every_agent(capsys, monkeypatch, tmp_path):
    environ = {"RANK": "0", "WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    path = write_config(tmp_path, DSGD, agents=8)
    argv = ["run", str(path), "--runtime", "distributed", "--agents-per-rank", "2"]
    err = one_line_error(capsys, main(argv))
    assert "WORLD_SIZE is 3 with --agents-per-rank 2, 6 agents, but topology.agents is 8" in err


def test_the_simulator_refuses_agents_per_rank(capsys, tmp_path):
    path = write_config(tmp_path, DSGD, agents=8)
    err = one_line_error(capsys, main(["run", str(path), "--agents-per-rank", "2"]))
    assert "--agents-per-rank sets the agents of each rank of --runtime distributed" in err


def test_a_killed_block_run_resumed_by_hand_gives_the_uninterrupted_run(capsys, tmp_path):
    """Two ranks of four agents save every 20 iterations; rank 1 is killed during
    iteration 56 (its four agents draw four batches an iteration); resumed with the same
    blocks, the run ends as the uninterrupted one. Other blocks are refused in one line."""
    path = write_config(tmp_path, DETSGRAD, iterations=100, agents=8)
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    argv = ["run", str(path), "--runtime", "distributed", "--set", "run.checkpoint_every=20"]
    argv += ["--agents-per-rank", "4"]
    report, stderr = run_ranks(tmp_path / "a", [*argv, "--out", str(whole)], world=2)
    assert report["codes"] == {"0": 0, "1": 0}, stderr
    kill = Fault(ranks=(1,), after=55 * 4, fail=signal.SIGKILL)
    stopped_argv = [*argv, "--out", str(stopped)]
    report, stderr = run_ranks(tmp_path / "b", stopped_argv, world=2, faults=(kill,))
    assert report["codes"]["1"] == -signal.SIGKILL
    assert [saved_iterations(stopped / FOLDER, rank) for rank in range(2)] == [[20, 40]] * 2

    err = one_line_error(capsys, main(["launch", "--resume", str(stopped)]))
    assert "was run with --agents-per-rank 4, not 1; resume it with --agents-per-rank 4" in err

    resume = ["run", "--resume", str(stopped), "--runtime", "distributed"]
    report, stderr = run_ranks(tmp_path / "c", [*resume, "--agents-per-rank", "4"], world=2)
    assert report["codes"] == {"0": 0, "1": 0}, stderr
    assert comparable(stopped) == comparable(whole)


def test_launch_passes_the_block_to_every_rank_and_rank_0_writes_the_run_folder(tmp_path):
    path = write_config(tmp_path, DETSGRAD, iterations=20, agents=8)
    out = tmp_path / "run"
    argv = ["launch", "--nproc", "2", "--agents-per-rank", "4", str(path), "--out", str(out)]
    done = launch([*argv, "--quiet", "--timeout", "20"])
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["agents"], summary["world_size"], summary["agents_per_rank"]) == (8, 2, 4)
    assert len(summary["events_per_agent"]) == 8
    assert [r["iteration"] for r in read_records(out)] == [0, 20]


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds ranks through /proc")
def test_a_block_rank_killed_mid_run_is_restarted_and_the_run_ends_as_if_uninterrupted(tmp_path):
    """``murmur launch --max-restarts 1`` of 2 ranks of 4 agents: the launcher restarts both
    ranks after rank 1 is killed, and they continue from their blocks' checkpoints."""
    config = digits_config(tmp_path)
    text = config.read_text().replace("agents = 4", "agents = 8").replace("1000", "300")
    config.write_text(text)
    whole, restarted = tmp_path / "whole", tmp_path / "restarted"

    blocks = ["--agents-per-rank", "4", "--set", "run.checkpoint_every=50"]
    uninterrupted = launch_run(config, whole, *blocks, nproc=2)
    assert uninterrupted.wait(timeout=180) == 0, uninterrupted.communicate()[1]
    killed = launch_run(config, restarted, *blocks, "--max-restarts", "1", nproc=2)
    folder = restarted / FOLDER
    err = kill_rank(killed, 1, lambda: all(saved_iterations(folder, r) for r in range(2)))
    assert killed.returncode == 0, err
    assert comparable(restarted) == comparable(whole)
