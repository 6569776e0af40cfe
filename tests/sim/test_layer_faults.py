"""Asynchronous dSSFN (ARock) with lost pushes and crashed nodes: every layer still
ends, near the centralized solution, replayed from the seed; synchronous dSSFN
refuses both."""

from __future__ import annotations

import json

import pytest

from murmur.config import load_experiment
from murmur.errors import UsageError
from murmur.experiment import run
from murmur.reporting.run_schema import check_summary
from murmur.training.runs import check_run

SMALL = [
    "topology.agents=6",
    "algorithm.layers=1",
    "algorithm.nodes=40",
    "algorithm.admm_iterations=3000",
]


def _config(preset: str, *settings: str):
    return load_experiment(preset, [*SMALL, *settings]).runs[0][1]


@pytest.mark.parametrize("drop", ["0.3", "0.6"])
def test_lost_pushes_leave_every_layer_converged_at_the_centralized_accuracy(drop):
    """Retries of waiting nodes and answers of finished ones end every layer; the
    converged layers give the centralized SSFN's test accuracy within a point."""
    central = run(_config("ssfn-vowel")).accuracy["mean"]
    lossy = run(_config("dssfn-async-vowel", f"faults.drop={drop}"))
    assert lossy.extra["unconverged_layers"] == []
    assert lossy.accuracy["min"] >= central - 0.01
    share = lossy.extra["dropped_messages"] / lossy.messages
    assert abs(share - float(drop)) < 0.05


def test_lost_pushes_are_replayed_from_the_seed():
    config = _config("dssfn-async-vowel", "faults.drop=0.3")
    first, again = run(config), run(config)
    other = run(config.replace(**{"run.seed": "1"}))
    assert first.extra["dropped_messages"] == again.extra["dropped_messages"]
    assert first.accuracy == again.accuracy and first.messages == again.messages
    assert first.extra["virtual_seconds"] == again.extra["virtual_seconds"]
    assert other.extra["dropped_messages"] != first.extra["dropped_messages"]


def test_without_drops_no_count_is_written():
    assert "dropped_messages" not in run(_config("dssfn-async-vowel")).extra


def test_centralized_ssfn_sends_nothing_to_lose():
    lossy = run(_config("ssfn-vowel", "faults.drop=0.5"))
    assert lossy.extra["dropped_messages"] == lossy.messages == 0


def test_synchronous_dssfn_refuses_drops_and_says_why():
    with pytest.raises(UsageError, match="takes each gossip round's average as exact"):
        check_run(_config("dssfn-vowel", "faults.drop=0.1"))


CRASH = ["algorithm.layers=2", "faults.crashes=[2]", "faults.crash_at=1"]


def test_a_crashed_node_stops_and_the_others_reach_consensus_without_it(tmp_path):
    plain = run(_config("dssfn-async-vowel", "algorithm.layers=2"))
    crashed = run(_config("dssfn-async-vowel", *CRASH), tmp_path / "run")
    records = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    layer0 = records[0]
    assert layer0["crashed_agents"] == 0 and records[-1]["crashed_agents"] == 1
    # it keeps the network it had after layer 0, and does no more work
    assert crashed.accuracy["per_agent"][2] == layer0["test_accuracy"][2]
    assert crashed.events_per_agent[2] == layer0["events_per_agent"][2]
    assert all(records[-1]["events_per_agent"][m] > layer0["events_per_agent"][m] for m in (1, 3))
    # its neighbours 1 and 3 dropped its edges: the rest still agree and converge
    assert crashed.extra["unconverged_layers"] == []
    assert crashed.extra["live_accuracy_min"] >= plain.accuracy["mean"] - 0.01
    assert crashed.consensus_distance < 1e-4
    check_summary("summary.json", json.loads((tmp_path / "run" / "summary.json").read_text()))


def test_a_crash_after_the_last_layer_changes_nothing():
    plain = run(_config("dssfn-async-vowel"))
    late = run(_config("dssfn-async-vowel", "faults.crashes=1", "faults.crash_at=5"))
    assert late.accuracy == plain.accuracy and late.events_per_agent == plain.events_per_agent
    assert late.extra["crashed_agents"] == 0


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (["faults.crashes=1", "faults.crash_at=0"], "never had a model"),
        (["faults.crashes=1", "faults.crash_at=1", "faults.rejoin_at=2"], "cannot rejoin"),
    ],
)
def test_layer_crashes_that_cannot_happen_are_refused(settings, message):
    with pytest.raises(UsageError, match=message):
        check_run(_config("dssfn-async-vowel", *settings))


def test_synchronous_dssfn_refuses_crashes():
    with pytest.raises(UsageError, match="needs every node in every round"):
        check_run(_config("dssfn-vowel", "faults.crashes=1", "faults.crash_at=1"))


def test_asynchronous_dssfn_refuses_down_links_and_says_why():
    with pytest.raises(UsageError, match="no model of links that go down and come back"):
        check_run(_config("dssfn-async-vowel", "faults.link_down=0.1"))
