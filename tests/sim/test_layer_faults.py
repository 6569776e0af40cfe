"""Asynchronous dSSFN (ARock) with lost pushes: every layer still ends, near the
centralized solution, replayed from the seed; synchronous dSSFN refuses them."""

from __future__ import annotations

import pytest

from murmur.config import load_experiment
from murmur.errors import UsageError
from murmur.experiment import run
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
