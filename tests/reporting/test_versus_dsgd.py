"""The "vs DSGD" columns: events, messages and bytes against DSGD's."""

import pytest
from summaries import summary_for

from murmur import load_experiment, run
from murmur.reporting.versus_dsgd import (
    QUANTITIES,
    dsgd_baselines,
    estimated,
    versus_dsgd,
    versus_dsgd_note,
)

NOTE_START = "messages / bytes vs DSGD %: the table has no DSGD run of the set-up of"


def ratios(summaries: list[dict]) -> dict[str, tuple[float | None, ...]]:
    """Each run's (events, messages, bytes) over its baseline's, by name."""
    columns = [versus_dsgd(summaries, quantity) for quantity in QUANTITIES]
    return {s["name"]: tuple(column[i] for column in columns) for i, s in enumerate(summaries)}


def test_events_messages_and_bytes_differ_where_the_method_sends_differently():
    summaries = [
        summary_for("dsgd", "dsgd", events=100, messages=200, bytes=2_000),
        # Gradient tracking: half the broadcasts, each of two vectors.
        summary_for("tracking", "detsgrad-gt", events=50, messages=100, bytes=2_000),
        # Compression: as many broadcasts and messages, fewer bytes.
        summary_for("compressed", "choco", events=100, messages=200, bytes=500),
        # Event-triggered: fewer broadcasts, each to every neighbour.
        summary_for("event", "detsgrad", events=25, messages=50, bytes=500),
    ]
    assert ratios(summaries) == {
        "dsgd": (1.0, 1.0, 1.0),
        "tracking": (0.5, 0.5, 1.0),
        "compressed": (1.0, 1.0, 0.25),
        "event": (0.25, 0.25, 0.25),
    }


def test_a_dsgd_run_of_other_iterations_is_no_baseline_the_full_exchange_is():
    exchange = {"events": 2_400, "messages": 4_800, "bytes": 8_000_000}
    summaries = [
        summary_for("dsgd-300", "dsgd", iterations=300, events=1_200, messages=2_400),
        summary_for(
            "event-600",
            "detsgrad",
            iterations=600,
            events=600,
            messages=1_200,
            bytes=1_000_000,
            full_exchange=exchange,
        ),
        # Same set-up as the DSGD run: the DSGD run wins over the run's own full exchange.
        summary_for(
            "event-300",
            "detsgrad",
            iterations=300,
            events=600,
            messages=1_200,
            bytes=1_000_000,
            full_exchange=exchange,
        ),
    ]
    assert ratios(summaries) == {
        "dsgd-300": (1.0, 1.0, 1.0),
        "event-600": (0.25, 0.25, 0.125),
        "event-300": (0.5, 0.5, 0.5),
    }
    assert [b.measured if b else None for b in dsgd_baselines(summaries)] == [True, False, True]


def test_the_first_dsgd_run_of_a_set_up_is_its_baseline():
    summaries = [
        summary_for("event", "detsgrad", messages=100),
        summary_for("dsgd", "dsgd", messages=200),
        summary_for("dsgd-again", "dsgd", messages=400),
    ]
    assert versus_dsgd(summaries, "messages") == [0.5, 1.0, 2.0]


@pytest.mark.parametrize(
    "setup",
    [
        {"dataset": "cifar10"},
        {"topology": "torus"},
        {"agents": 8},
        {"iterations": 600},
    ],
)
def test_each_part_of_the_set_up_separates_baselines(setup):
    dsgd = summary_for("dsgd", "dsgd", messages=200)
    other = summary_for("other", "detsgrad", messages=100, **setup)
    same = summary_for("same", "detsgrad", messages=100)
    assert versus_dsgd([dsgd, other, same], "messages") == [1.0, None, 0.5]


def test_without_dsgd_run_or_full_exchange_there_is_no_baseline():
    exchange = {"events": 400, "messages": 800, "bytes": 8_000}
    summaries = [
        summary_for("event", "detsgrad"),
        # Not decentralized: a full exchange does not make it one.
        summary_for("single", "centralized", agents=1, full_exchange=exchange),
        summary_for("layer-wise", "dssfn", communication_saving=None, full_exchange=exchange),
        # A full exchange without a positive count of each is none.
        summary_for("empty", "detsgrad", full_exchange=exchange | {"bytes": 0}),
        summary_for("partial", "detsgrad", full_exchange={"events": 400, "messages": 800}),
        # A DSGD run that sent nothing is no baseline either.
        summary_for("silent", "dsgd", topology="line", events=0, messages=0, bytes=0),
        summary_for("line", "detsgrad", topology="line"),
    ]
    assert dsgd_baselines(summaries) == [None] * len(summaries)
    for quantity in QUANTITIES:
        assert versus_dsgd(summaries, quantity) == [None] * len(summaries)
    assert estimated(summaries) == []
    assert versus_dsgd_note(summaries) is None


def test_a_run_without_a_count_has_none_beside_its_baseline():
    summaries = [summary_for("dsgd", "dsgd"), summary_for("old", "detsgrad", events=None)]
    assert versus_dsgd(summaries, "events") == [1.0, None]
    assert versus_dsgd(summaries, "messages") == [1.0, 1.0]


def test_estimated_names_exactly_the_rows_on_the_full_exchange():
    exchange = {"events": 400, "messages": 800, "bytes": 8_000}
    summaries = [
        summary_for("zeta-torus", "detsgrad", topology="torus", full_exchange=exchange),
        summary_for("dsgd", "dsgd", full_exchange=exchange),
        summary_for("ring-run", "detsgrad", full_exchange=exchange),
        summary_for("alpha-torus", "choco", topology="torus", full_exchange=exchange),
        # Two seeds of one name: named once.
        summary_for("alpha-torus", "choco", topology="torus", seed=1, full_exchange=exchange),
        summary_for("single", "centralized", agents=1),
    ]
    assert estimated(summaries) == ["alpha-torus", "zeta-torus"]
    note = versus_dsgd_note(summaries)
    assert note is not None and note.startswith(NOTE_START)
    assert f"{NOTE_START} alpha-torus, zeta-torus: " in note
    assert "ring-run" not in note and "single" not in note


def test_the_note_says_nothing_of_estimates_when_every_baseline_is_measured():
    measured = [summary_for("dsgd", "dsgd"), summary_for("tracker", "detsgrad")]
    assert estimated(measured) == []
    assert versus_dsgd_note(measured) is None
    alone = [
        summary_for(
            "event",
            "detsgrad",
            events=100,
            full_exchange={
                "events": 400,
                "messages": 800,
                "bytes": 8_000,
            },
        )
    ]
    assert estimated(alone) == ["event"]
    assert f"{NOTE_START} event: " in str(versus_dsgd_note(alone))
    assert versus_dsgd(alone, "events") == [0.25]


def test_a_dsgd_run_sends_exactly_its_full_exchange(tmp_path):
    settings = ["run.iterations=20", "run.eval_every=10"]
    summaries = {}
    for name in ("dsgd", "detsgrad"):
        ((_, config),) = load_experiment(name, settings).runs
        summaries[name] = run(config, tmp_path / name).to_dict()
    dsgd, event = summaries["dsgd"], summaries["detsgrad"]
    exchange = dsgd["full_exchange"]
    assert exchange == {key: dsgd[key] for key in QUANTITIES}
    assert all(isinstance(exchange[key], int) and exchange[key] > 0 for key in QUANTITIES)
    assert exchange["events"] == 20 * dsgd["agents"]
    assert event["full_exchange"] == exchange
    assert event["messages"] < dsgd["messages"]
    # Against the DSGD run or, alone, against its own full exchange: the same figures.
    paired = ratios([dsgd, event])["detsgrad"]
    assert ratios([event])["detsgrad"] == paired
    assert estimated([event]) == ["detsgrad"] and estimated([dsgd, event]) == []
