"""The distributed runtime as real processes on loopback: same run as the simulator,
failures named within the timeout, bad input refused in one line.

The ranks of a test are forked by one driver process (see ranks.py), each
running ``murmur run ... --runtime distributed``.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import socket
import time
from pathlib import Path

import pytest
import torch
from ranks import (
    Fault,
    Kill,
    assert_failed_naming,
    assert_others_stop_naming,
    assert_records_match,
    drive,
    launch,
    launch_beside_the_simulator,
    read_records,
    torchrun_machines,
)
from small_runs import RUN_FILES

from murmur.cli import main
from murmur.config import load_experiment
from murmur.experiment import run
from murmur.registry import ALGORITHMS, Ability

TOML = """
[run]
seed = 3
iterations = {iterations}
eval_every = 25
[data]
dataset = "blobs"
batch_size = 8
[model]
name = "mlp"
hidden = [8]
[topology]
graph = "ring"
agents = {agents}
[algorithm]
{algorithm}
"""
DETSGRAD = 'name = "detsgrad"\na = 0.2\nb = 0.3\nv0 = 2.0'
DSGD = 'name = "dsgd"\na = 0.2\nb = 0.3'
CHOCO = 'name = "choco-sgd"\na = 0.2\ncompress = "topk"\nfraction = 0.1'
LAYERS = (
    'name = "detsgrad"\na = 0.2\nb = "auto"\nv0 = 2.0\ntrigger = "layer"\n'
    'compress = "randk"\nfraction = 0.3'
)
TRACKING = 'name = "detsgrad-gt"\na = 0.1\nv0 = 2.0\nvy = 0.5'
BEER = 'name = "beer"\na = 0.1\ncompress = "lowrank"\nrank = 1'
MOTEF = (
    'name = "motef"\na = 0.1\ngamma = 0.3\nlam = 0.2\ncompress = "topk"\nfraction = 0.1\n'
    'precision = "float16"\nindices = "packed"'
)
LEAD = 'name = "lead"\na = 0.1\ncompress = "topk"\nfraction = 0.2'
SPARQ = (
    'name = "sparq-sgd"\na = 0.2\ncompress = "qsgd"\nlevels = 4\nlocal_steps = 2\n'
    "threshold = 0.5\nthreshold_growth = 0.0"
)


def write_config(folder: Path, algorithm: str, iterations: int = 100, agents: int = 4) -> Path:
    path = folder / "config.toml"
    path.write_text(TOML.format(iterations=iterations, agents=agents, algorithm=algorithm))
    return path


# ---- the same run as the simulator -------------------------------------------------------


@pytest.mark.parametrize(
    "algorithm",
    [DETSGRAD, DSGD, CHOCO, SPARQ, TRACKING, LAYERS, BEER, MOTEF, LEAD],
    ids=[
        "detsgrad",
        "dsgd",
        "choco",
        "sparq",
        "detsgrad-gt",
        "detsgrad-layers-randk",
        "beer",
        "motef",
        "lead",
    ],
)
def test_four_processes_give_the_simulators_events_messages_and_parameters(tmp_path, algorithm):
    path = write_config(tmp_path, algorithm)
    out, params = tmp_path / "distributed", tmp_path / "params.pt"
    argv = ["run", str(path), "--runtime", "distributed", "--out", str(out), "--quiet"]
    report, stderr = drive(tmp_path, [*argv, "--timeout", "20"], world=4, params=params)
    assert report["codes"] == {"0": 0, "1": 0, "2": 0, "3": 0}, stderr

    ((_, config),) = load_experiment(str(path)).runs
    simulated = run(config, tmp_path / "simulated")
    summary = json.loads((out / "summary.json").read_text())
    for key in ("events", "events_per_agent", "messages", "bytes", "samples", "iterations"):
        assert summary[key] == getattr(simulated, key), key
    assert summary["runtime"] == "distributed"
    assert summary["rejected_per_agent"] == [0, 0, 0, 0]
    assert set(simulated.to_dict()) - set(summary) == {"virtual_seconds"}
    if algorithm == DETSGRAD:
        assert 0 < summary["events"] < 4 * 100, "some agents must stay silent some steps"
        assert sum(summary["control_messages_per_agent"]) == 2 * (400 - summary["events"]) + 8
    if "detsgrad-gt" in algorithm:  # (x, y) in one message of 2P values
        assert 0 < summary["events"] < 4 * 100, "some agents must stay silent some steps"
        assert summary["bytes"] == summary["messages"] * simulated.parameters.shape[1] * 8
    if algorithm == LAYERS:  # one event per tensor sent: up to 4 a step (2 weights, 2 biases)
        assert 4 * 100 < summary["events"] < 4 * 4 * 100
    if "sparq" in algorithm:
        assert 0 < summary["events"] < 4 * 50, "some agents must stay silent some syncs"
    if algorithm == BEER:  # the model's and the tracker's halves, every step
        assert summary["events"] == 2 * 4 * 100
    if "choco" in algorithm or "sparq" in algorithm:  # compressed: far below dense float32
        dense = summary["messages"] * simulated.parameters.shape[1] * 4
        assert 0 < summary["bytes"] < dense / 4

    records, expected = read_records(out), read_records(tmp_path / "simulated")
    assert [r["iteration"] for r in records] == [0, 25, 50, 75, 100]
    assert_records_match(records, expected)
    torch.testing.assert_close(torch.load(params), simulated.parameters, atol=1e-5, rtol=1e-5)


def test_eight_ranks_on_the_exponential_graph_give_the_simulators_numbers(tmp_path):
    settings = [
        "topology.agents=8",
        "topology.graph=exponential",
        "run.iterations=20",
        "run.eval_every=10",
        "data.dataset=digits",
        "data.partition=iid",
    ]
    summary, simulated = launch_beside_the_simulator(tmp_path, "dsgd", settings, 8)
    assert summary["topology"] == "exponential" and summary["messages"] == 20 * 8 * 5
    assert summary["accuracy"]["per_agent"] == simulated.accuracy["per_agent"]
    assert summary["messages"] == simulated.messages


# ---- failures -------------------------------------------------------------------------------


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "frozen"])
def test_a_rank_that_stops_answering_stops_every_other_rank_naming_it(tmp_path, stop):
    """Killed: its connections close, a send to it fails at once. Frozen: it stays
    connected but answers nothing; its neighbours name it at the timeout and the
    rank beyond them learns who failed from them (ABORT), not from its own deadline."""
    timeout = 2.0
    path = write_config(tmp_path, DSGD, iterations=100_000)
    out = tmp_path / "run"
    argv = ["run", str(path), "--runtime", "distributed", "--out", str(out), "--quiet"]
    # Without rules of [collapse] no rank waits inside an evaluation: a rank frozen
    # there is named by nobody, the others failing on the sum's deadline instead
    # (rank_records.py), which is not what this test is about.
    argv += ["--set", "collapse.enabled=false"]
    report, stderr = drive(
        tmp_path,
        [*argv, "--timeout", str(timeout)],
        world=4,
        kill=Kill(rank=2, when=str(out / "config.toml"), delay=0.3, signal=int(stop)),
        limit=40.0,
    )
    assert_others_stop_naming(report, stderr, 2, timeout, frozen=stop == signal.SIGSTOP)
    assert_failed_naming(out, "rank 2")


def test_a_rank_that_fails_tells_its_neighbours_instead_of_leaving_them_to_time_out(tmp_path):
    timeout = 20.0
    path = write_config(tmp_path, DSGD, iterations=100_000)
    argv = ["run", str(path), "--runtime", "distributed", "--out", str(tmp_path / "run")]
    report, stderr = drive(
        tmp_path,
        [*argv, "--quiet", "--timeout", str(timeout)],
        world=4,
        faults=(Fault(ranks=(2,), after=30, fail="raise"),),
        limit=40.0,
    )
    assert report["codes"]["2"] == 1 and "injected failure" in stderr[2]
    for rank in (0, 1, 3):
        assert report["codes"][str(rank)] == 1, stderr
        assert stderr[rank].count("\n") == 1, stderr[rank]
        assert "rank 2 failed" in stderr[rank], stderr[rank]
    assert max(report["after_start"].values()) < timeout / 2, report


def test_a_peer_that_never_arrives_is_one_line_and_exit_2(tmp_path):
    """Rank 0 waits for rank 1 and rank 1 for rank 0, each of a job of its own."""
    path = write_config(tmp_path, DSGD, agents=2)
    argv = ["run", str(path), "--runtime", "distributed", "--quiet", "--timeout", "1"]
    started = time.monotonic()
    report, stderr = drive(tmp_path, argv, world=2, apart=True, limit=20.0)
    assert time.monotonic() - started < 10.0
    assert report["codes"] == {"0": 2, "1": 2}
    for rank in (0, 1):
        assert stderr[rank].count("\n") == 1, stderr[rank]  # no C++ log lines either
        assert stderr[rank].startswith(f"murmur: error: rank {rank}: "), stderr[rank]
        assert "within 1 s" in stderr[rank]


# ---- murmur launch, and bad input -----------------------------------------------------------


def test_launch_forks_the_ranks_and_rank_0_writes_the_run_folder(tmp_path):
    path = write_config(tmp_path, DETSGRAD, iterations=20, agents=2)
    out = tmp_path / "run"
    argv = ["launch", "--nproc", "2", str(path), "--out", str(out), "--quiet"]
    done = launch([*argv, "--timeout", "20"])
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "detsgrad" in done.stdout and str(out) in done.stdout
    assert sorted(p.name for p in out.iterdir()) == RUN_FILES
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["agents"], summary["runtime"], summary["iterations"]) == (2, "distributed", 20)
    assert summary["model"]["agents"] == 2 and summary["model"]["file"] == "model.pt"
    assert [r["iteration"] for r in read_records(out)] == [0, 20]


def test_two_torchrun_agents_form_one_job_as_two_machines_would(tmp_path):
    """The README's several-machine command, both "machines" on loopback: two torchrun
    agents of two ranks each meet at a c10d rendezvous and run one 4-agent job that
    gives the simulator's events and messages."""
    path = write_config(tmp_path, DETSGRAD, iterations=40)
    out = tmp_path / "run"
    rank_argv = ["-m", "murmur", "run", str(path), "--runtime", "distributed", "--out", str(out)]
    machines = torchrun_machines([*rank_argv, "--quiet", "--timeout", "20"], 2, 2, timeout=120)
    assert [machine.returncode for machine in machines] == [0, 0], machines
    summary = json.loads((out / "summary.json").read_text())
    ((_, config),) = load_experiment(str(path)).runs
    simulated = run(config)
    assert (summary["agents"], summary["world_size"], summary["iterations"]) == (4, 4, 40)
    for key in ("events_per_agent", "messages", "bytes"):
        assert summary[key] == getattr(simulated, key), key


def test_timing_settings_get_one_note_from_rank_0_as_real_time_ignores_them(tmp_path):
    path = write_config(tmp_path, DSGD, iterations=10, agents=2)
    argv = ["run", str(path), "--runtime", "distributed", "--out", str(tmp_path / "run")]
    report, stderr = drive(
        tmp_path, [*argv, "--quiet", "--set", "timing.stragglers=1"], world=2, limit=40.0
    )
    assert report["codes"] == {"0": 0, "1": 0}, stderr
    assert stderr[0].splitlines() == [
        "murmur: note: [timing] sets the simulator's virtual clock; a distributed run "
        "takes real time and ignores it"
    ]
    assert stderr[1] == ""


def test_launch_ends_with_the_failed_ranks_status_and_their_lines_not_a_traceback(tmp_path):
    path = write_config(tmp_path, DSGD, iterations=20, agents=2)
    argv = ["launch", "--nproc", "2", str(path), "--out", str(tmp_path / "run"), "--quiet"]
    done = launch([*argv, "--timeout", "0.0001"])
    assert done.returncode == 2
    # One line per rank that got to say it (the launcher stops the other at the first failure).
    # Rank 0 hosts the store and waits for the others; rank 1 may time out before rank 0's
    # store is up, or after it connected.
    lines = done.stderr.splitlines()
    assert 1 <= len(lines) <= 2, done.stderr
    for line in lines:
        assert line.startswith("murmur: error: rank "), done.stderr
        if line.startswith("murmur: error: rank 0:"):
            assert "did not all join" in line, done.stderr
        else:
            assert "did not all join" in line or "rank 0 did not answer" in line, done.stderr


def one_line_error(capsys, code: int) -> str:
    out, err = capsys.readouterr()
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in out + err
    return err


def test_launch_refuses_fewer_than_one_process(capsys, tmp_path):
    path = write_config(tmp_path, DSGD)
    err = one_line_error(capsys, main(["launch", "--nproc", "0", str(path)]))
    assert "--nproc must be at least 1" in err


def test_launch_refuses_a_process_count_other_than_the_agents(capsys, tmp_path):
    path = write_config(tmp_path, DSGD, agents=4)
    err = one_line_error(capsys, main(["launch", "--nproc", "3", str(path)]))
    assert "topology.agents is 4" in err


def test_launch_refuses_a_port_in_use(capsys, tmp_path):
    path = write_config(tmp_path, DSGD)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        err = one_line_error(
            capsys, main(["launch", "--nproc", "4", str(path), "--port", str(port)])
        )
    assert f"port {port} on 127.0.0.1 is in use" in err


def test_launch_refuses_a_port_that_is_no_port(capsys, tmp_path):
    path = write_config(tmp_path, DSGD)
    err = one_line_error(capsys, main(["launch", "--nproc", "4", str(path), "--port", "70000"]))
    assert "--port must be a port number" in err


def test_launch_refuses_a_comparison_preset(capsys):
    err = one_line_error(capsys, main(["launch", "--nproc", "10", "default"]))
    assert "compares 4 runs" in err


@pytest.mark.parametrize(
    ("algorithm", "instead"),
    [
        ("asysg-incon", "murmur run hogwild"),
        ("hogwild", "murmur run hogwild"),
        ("ssfn", "dssfn-async distributed"),
        ("centralized", "murmur run centralized"),
    ],
)
def test_launch_refuses_an_algorithm_without_a_distributed_form_saying_what_to_run(
    capsys, tmp_path, algorithm, instead
):
    path = write_config(tmp_path, f'name = "{algorithm}"')
    err = one_line_error(capsys, main(["launch", "--nproc", "4", str(path)]))
    assert f"does not run {algorithm}: " in err and instead in err


def test_the_registry_decides_which_runtimes_run_an_algorithm(capsys, tmp_path, monkeypatch):
    """An algorithm whose registry entry leaves out the distributed runtime is refused
    by it, with the entry's word on what to run instead."""
    member = ALGORITHMS["dsgd"]
    spec = dataclasses.replace(
        member,
        capabilities=dataclasses.replace(
            member.capabilities, runtimes=Ability(("simulator",), "run it in the simulator")
        ),
    )
    monkeypatch.setitem(ALGORITHMS, "dsgd", spec)
    path = write_config(tmp_path, DSGD)
    err = one_line_error(capsys, main(["launch", "--nproc", "4", str(path)]))
    assert "does not run dsgd: run it in the simulator" in err


def test_run_refuses_an_unknown_runtime(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "detsgrad", "--runtime", "bogus"])
    err = one_line_error(capsys, exit_info.value.code)
    assert "invalid choice: 'bogus'" in err


def test_a_distributed_run_outside_torchrun_says_how_to_start_it(capsys, monkeypatch, tmp_path):
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    path = write_config(tmp_path, DSGD)
    err = one_line_error(capsys, main(["run", str(path), "--runtime", "distributed"]))
    assert "murmur launch --nproc N PRESET" in err


def test_a_world_size_other_than_the_agents_is_refused_before_joining(
    capsys, monkeypatch, tmp_path
):
    environ = {"RANK": "0", "WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    path = write_config(tmp_path, DSGD, agents=4)
    err = one_line_error(capsys, main(["run", str(path), "--runtime", "distributed"]))
    assert "WORLD_SIZE is 3 but topology.agents is 4" in err
