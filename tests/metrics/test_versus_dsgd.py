"""The "vs DSGD" columns: events, messages and bytes against DSGD's."""

from summaries import summary_for

from murmur import load_experiment, run
from murmur.metrics.versus_dsgd import estimated, versus_dsgd, versus_dsgd_note


def test_events_messages_and_bytes_differ_where_the_method_sends_differently():
    summaries = [
        summary_for("dsgd", "dsgd", events=100, messages=200, bytes=2_000),
        # Gradient tracking: half the broadcasts, each of two vectors.
        summary_for("tracking", "detsgrad-gt", events=50, messages=100, bytes=2_000),
    ]
    assert versus_dsgd(summaries, "events") == [1.0, 0.5]
    assert versus_dsgd(summaries, "messages") == [1.0, 0.5]
    assert versus_dsgd(summaries, "bytes") == [1.0, 1.0]


def test_the_note_names_the_rows_measured_against_the_full_exchange_only():
    exchange = {"events": 400, "messages": 800, "bytes": 8_000}
    measured = [summary_for("dsgd", "dsgd"), summary_for("event", "detsgrad")]
    assert estimated(measured) == []
    assert "no such DSGD run" not in str(versus_dsgd_note(measured))
    alone = [summary_for("event", "detsgrad", events=100, full_exchange=exchange)]
    assert estimated(alone) == ["event"]
    assert "no such DSGD run for event:" in str(versus_dsgd_note(alone))
    assert versus_dsgd(alone, "events") == [0.25]
    assert versus_dsgd_note([summary_for("event", "detsgrad")]) is None


def test_a_dsgd_run_sends_exactly_its_full_exchange(tmp_path):
    settings = ["run.iterations=20", "run.eval_every=10"]
    summaries = {}
    for name in ("dsgd", "detsgrad"):
        ((_, config),) = load_experiment(name, settings).runs
        summaries[name] = run(config, tmp_path / name).to_dict()
    dsgd = summaries["dsgd"]
    assert dsgd["full_exchange"] == {key: dsgd[key] for key in ("events", "messages", "bytes")}
    assert summaries["detsgrad"]["full_exchange"] == dsgd["full_exchange"]
    assert summaries["detsgrad"]["messages"] < dsgd["messages"]
