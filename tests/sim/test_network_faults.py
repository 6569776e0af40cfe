"""Down links, crashed agents and time-varying graphs in the simulator: replayed from
the seed, counted in the records, equal to the fault-free run where they change
nothing, and refused where they cannot run."""

from __future__ import annotations

import json

import pytest

from murmur.config import load_experiment
from murmur.experiment import run

SMALL = [
    "data.dataset=blobs",
    "model.hidden=[8]",
    "topology.agents=6",
    "data.batch_size=8",
    "run.iterations=60",
    "run.eval_every=20",
]
LINKS = ["faults.link_down=0.2", "faults.link_up=0.5"]
CRASHES = ["faults.crashes=2", "faults.crash_at=20", "faults.rejoin_at=40"]


def _config(algorithm: str, *settings: str):
    experiment = load_experiment(algorithm, [*SMALL, *settings])
    return experiment.runs[0][1]


def _records(folder) -> list[dict]:
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _same(one, other) -> bool:
    return (
        one.accuracy == other.accuracy
        and one.consensus_distance == other.consensus_distance
        and one.messages == other.messages
        and one.events == other.events
    )


# ---- equivalences: faults that change nothing change nothing, bit for bit ------------------


@pytest.mark.parametrize(
    ("algorithm", "settings"),
    [
        ("dsgd", []),
        ("detsgrad", ["algorithm.v0=0.5"]),
        ("detsgrad-gt", []),
        ("choco-sgd", []),
    ],
)
def test_a_crash_that_never_happens_equals_no_crash(algorithm, settings):
    plain = run(_config(algorithm, *settings))
    never = run(_config(algorithm, *settings, "faults.crashes=2", "faults.crash_at=60"))
    assert _same(plain, never)
    assert never.extra["crashed_agents"] == 0


def test_no_link_ever_down_equals_no_link_faults():
    plain = run(_config("detsgrad", "algorithm.v0=0.5"))
    zero = run(_config("detsgrad", "algorithm.v0=0.5", "faults.link_down=0"))
    assert _same(plain, zero) and "down_links" not in zero.extra


@pytest.mark.parametrize(
    ("algorithm", "settings"), [("dsgd", []), ("detsgrad", ["algorithm.v0=0.5"])]
)
def test_a_varying_graph_that_is_always_the_same_graph_equals_the_fixed_graph(algorithm, settings):
    """A ring built again from a new seed is the same ring."""
    fixed = run(_config(algorithm, *settings))
    varying = run(_config(algorithm, *settings, "topology.varying=resample"))
    assert _same(fixed, varying)
