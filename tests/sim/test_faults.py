"""Runs with lost messages (``faults.drop``): replayed from the seed, counted in the
records and the summary, and refused where they cannot run."""

from __future__ import annotations

import json

import pytest
from small_runs import SMALL_SGD

from murmur.cli import main
from murmur.config import load_experiment
from murmur.errors import UsageError
from murmur.experiment import run
from murmur.reporting.run_schema import check_record, check_summary
from murmur.training.runs import check_run

DECENTRALIZED_SGD = "detsgrad, dsgd, detsgrad-gt, choco-sgd, beer, motef, sparq-sgd, dssfn-async"
SMALL = SMALL_SGD


def _config(algorithm: str, *settings: str):
    experiment = load_experiment(algorithm, [*SMALL, *settings])
    return experiment.runs[0][1]


def test_a_run_with_drops_is_replayed_from_its_seed_and_counts_what_it_lost(tmp_path):
    config = _config("dsgd", "faults.drop=0.3")
    first = run(config, tmp_path / "first")
    again = run(config, tmp_path / "again")
    other = run(config.replace(**{"run.seed": "1"}), tmp_path / "other")
    assert first.extra["dropped_messages"] == again.extra["dropped_messages"] > 0
    assert first.accuracy == again.accuracy
    assert first.consensus_distance == again.consensus_distance
    assert other.extra["dropped_messages"] != first.extra["dropped_messages"]
    summary = json.loads((tmp_path / "first" / "summary.json").read_text())
    check_summary("summary.json", summary)
    assert summary["dropped_messages"] == first.extra["dropped_messages"]
    lines = (tmp_path / "first" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    for number, record in enumerate(records):
        check_record(f"metrics.jsonl:{number + 1}", record)
    counts = [record["dropped_messages"] for record in records]
    assert counts == sorted(counts) and counts[-1] == summary["dropped_messages"]
    assert main(["report", str(tmp_path / "first")]) == 0


def test_a_run_without_drops_writes_no_drop_count():
    result = run(_config("dsgd"))
    assert "dropped_messages" not in result.extra


def test_centralized_sgd_runs_under_drops_and_loses_nothing():
    """It sends no messages; a comparison with it runs under the same faults."""
    config = _config("centralized")
    lossy = run(config.replace(**{"faults.drop": "0.5"}))
    assert lossy.extra["dropped_messages"] == lossy.messages == 0
    assert lossy.accuracy == run(config).accuracy


@pytest.mark.parametrize(
    ("algorithm", "settings"), [("dsgd", []), ("detsgrad", ["algorithm.v0=0"])]
)
def test_almost_every_message_lost_leaves_the_agents_apart_though_messages_are_sent(
    algorithm, settings
):
    """With v0 = 0 DETSGRAD sends every step, so both runs send the same messages."""
    connected = run(_config(algorithm, *settings))
    isolated = run(_config(algorithm, *settings, "faults.drop=0.999"))
    assert isolated.messages == connected.messages > 0
    assert isolated.extra["dropped_messages"] > 0.99 * isolated.messages
    assert isolated.consensus_distance > 10 * connected.consensus_distance


@pytest.mark.parametrize(
    ("algorithm", "why"),
    [
        ("dssfn", "synchronous dSSFN"),
        ("asysg-con", "parameter server"),
        ("sync-ps", "its pushes and pulls have no model of lost messages"),
        ("asysg-incon", "parameter server"),
        ("hogwild", "share one model in memory"),
        ("lead", "the duals stop summing to zero"),
    ],
)
def test_algorithms_without_lost_messages_refuse_drops_before_any_folder(
    capsys, tmp_path, algorithm, why
):
    out = tmp_path / "run"
    preset = f"{algorithm}-vowel" if "ssfn" in algorithm else algorithm
    code = main(["run", preset, "--set", "faults.drop=0.1", "--out", str(out), "--quiet"])
    _, err = capsys.readouterr()
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"murmur: error: {algorithm} cannot run with faults.drop = 0.1: ")
    assert why in err
    assert err.endswith(f"the simulator injects them into {DECENTRALIZED_SGD}\n")
    assert not out.exists()


def test_the_distributed_runtime_refuses_drops_before_any_folder(capsys, tmp_path):
    out = tmp_path / "run"
    code = main(["launch", "--nproc", "4", "dsgd", "--set", "faults.drop=0.2", "--out", str(out)])
    _, err = capsys.readouterr()
    assert code == 2 and len(err.splitlines()) == 1
    assert "the distributed runtime does not inject faults (faults.drop = 0.2)" in err
    assert "in the simulator with `murmur run`" in err
    assert not out.exists()


def test_check_run_accepts_drops_for_decentralized_sgd_and_refuses_them_elsewhere():
    check_run(_config("choco-sgd", "faults.drop=0.5"))
    with pytest.raises(UsageError, match="^sync-ps cannot run with faults.drop = 0.5: "):
        check_run(_config("sync-ps", "faults.drop=0.5"))
