"""Figures a paper can take: one colour per method in every report, bands that say
what they are, a fair x axis for servers, and the user's choice of runs, labels,
colours and smoothing."""

from __future__ import annotations

import pytest
from summaries import summary_for, worker_summary
from test_plots import communication_records, drawn_figures, fake_run
from test_report import make_run, records_for

from murmur.cli import main
from murmur.errors import UsageError
from murmur.reporting import plots
from murmur.reporting.palette import METHOD_COLOURS, OTHER_COLOURS, PlotStyle, looks, parse_colours
from murmur.reporting.report_files import Choice, write_report


def line_looks(figure) -> dict[str, tuple[str, str]]:
    (axes,) = figure.axes
    return {
        line.get_label(): (line.get_color(), line.get_linestyle())
        for line in axes.get_lines()
        if not line.get_label().startswith("_")
    }


def test_a_method_keeps_its_colour_across_reports_with_other_members(tmp_path, monkeypatch):
    figures = drawn_figures(monkeypatch)
    one = [("dsgd", "dsgd"), ("detsgrad", "detsgrad")]
    other = [("centralized", "centralized"), ("beer", "beer"), ("dsgd", "dsgd")]
    for number, members in enumerate((one, other)):
        runs = [
            fake_run(communication_records(4), name=name, algorithm=algorithm, agents=2)
            for name, algorithm in members
        ]
        plots.plot_accuracy(runs, tmp_path / f"accuracy-{number}.png")
    first, second = (line_looks(figure) for figure in figures)
    assert first["dsgd"] == second["dsgd"] == (METHOD_COLOURS["dsgd"], "-")
    assert first["detsgrad"][0] != second["beer"][0]  # each method its own
    # A plugin's method: one colour from its name, whatever its position.
    alone = looks([("mine", "my-gossip")])["mine"]
    after = looks([("dsgd", "dsgd"), ("x", "beer"), ("mine", "my-gossip")])["mine"]
    assert alone == after and alone.colour in OTHER_COLOURS


def test_runs_of_one_method_share_its_colour_in_other_line_styles():
    chosen = looks(
        [("dsgd-metropolis", "dsgd"), ("dsgd", "dsgd"), ("choco-sign", "choco-sgd")],
        PlotStyle(colours={"choco-sign": "teal"}),
    )
    assert chosen["dsgd"].line_style == "-"  # named after its method: solid
    assert chosen["dsgd-metropolis"].line_style == "--"
    assert chosen["dsgd"].colour == chosen["dsgd-metropolis"].colour == METHOD_COLOURS["dsgd"]
    assert chosen["choco-sign"].colour == "teal"  # the user's colour


def test_colours_are_names_or_codes_matplotlib_draws():
    assert parse_colours(["dsgd=#112233", " beer = C4 "]) == {"dsgd": "#112233", "beer": "C4"}
    for bad in ("dsgd", "=red", "dsgd=notacolour"):
        with pytest.raises(UsageError, match="--colour"):
            parse_colours([bad])
    with pytest.raises(UsageError, match="--smooth"):
        PlotStyle(smooth=0)


def test_a_lone_run_shows_its_agents_and_average_model_and_never_beside_others(
    tmp_path, monkeypatch
):
    figures = drawn_figures(monkeypatch)
    records = records_for(4, 8)
    for record in records:
        record["model_accuracy"] = record["accuracy_mean"] + 0.05
    alone = fake_run(records, name="dsgd", algorithm="dsgd", agents=4)
    plots.plot_accuracy([alone], tmp_path / "alone.png")
    (axes,) = figures[0].axes
    assert len(axes.collections) == 1  # the band from worst to best agent
    assert "worst to best agent" in axes.get_title() and "average model" in axes.get_title()
    assert "average model (dotted)" in line_looks(figures[0])
    other = fake_run(records, name="detsgrad", algorithm="detsgrad", agents=4)
    plots.plot_accuracy([alone, other], tmp_path / "two.png")
    (axes,) = figures[1].axes
    assert len(axes.collections) == 0 and "band" not in axes.get_title()
    assert list(line_looks(figures[1])) == ["dsgd", "detsgrad"]


def server_records(samples_per_iteration: int) -> list[dict]:
    return [
        {
            "iteration": 100 * step,
            "samples": 100 * step * samples_per_iteration,
            "accuracy_mean": 0.5 + 0.1 * step,
            "test_accuracy": [0.5 + 0.1 * step],
            "model_accuracy": 0.5 + 0.1 * step,
        }
        for step in range(1, 4)
    ]


def test_servers_are_compared_on_the_samples_their_workers_computed(tmp_path, monkeypatch):
    figures = drawn_figures(monkeypatch)
    synchronous = fake_run(
        server_records(8 * 32), **worker_summary("sync", 8, None, None, algorithm="sync-ps")
    )
    asynchronous = fake_run(server_records(32), **worker_summary("async", 8, None, None))
    plots.plot_accuracy([synchronous], tmp_path / "one.png")
    (axes,) = figures[0].axes
    assert axes.get_xlabel() == plots.SAMPLES_AXIS
    assert len(axes.collections) == 0  # one model: no band of agents, no average model
    assert axes.get_title() == "Test accuracy" and len(axes.get_lines()) == 1
    plots.plot_accuracy([synchronous, asynchronous], tmp_path / "two.png")
    (axes,) = figures[1].axes
    sync_line, async_line = axes.get_lines()
    assert list(sync_line.get_xdata()) == [25_600, 51_200, 76_800]  # 8 gradients a step
    assert list(async_line.get_xdata()) == [3_200, 6_400, 9_600]


def test_smoothing_averages_each_curve_over_the_last_evaluations(tmp_path, monkeypatch):
    figures = drawn_figures(monkeypatch)
    records = [
        {"iteration": 10 * i, "accuracy_mean": value, "test_accuracy": [value]}
        for i, value in enumerate([0.1, 0.5, 0.3, 0.7])
    ]
    run = fake_run(records, name="dsgd", algorithm="dsgd", agents=1)
    plots.plot_accuracy([run], tmp_path / "a.png", style=PlotStyle(smooth=2))
    (axes,) = figures[0].axes
    assert list(axes.get_lines()[0].get_ydata()) == pytest.approx([10, 30, 40, 50])


def test_a_report_chooses_its_runs_and_labels_and_captions_its_figures(tmp_path):
    summaries = [summary_for("base", "dsgd"), summary_for("event", "detsgrad", messages=50)]
    run_dirs = [make_run(tmp_path / "runs", s, records_for(4, 8)) for s in summaries]
    report = write_report(
        run_dirs,
        tmp_path / "report",
        choice=Choice(only=("event",), labels={"event": "DETSGRAD (ours)"}),
    ).read_text()
    table = [line for line in report.splitlines() if line.startswith("| ")]
    assert [row.split("|")[1].strip() for row in table[1:]] == ["DETSGRAD (ours)"]
    assert "the fair axis for methods that compress or skip messages" in report
    with pytest.raises(UsageError, match="no run is called 'nobody'"):
        Choice(only=("nobody",)).of([])


@pytest.mark.parametrize(
    "options",
    [["--colour", "dsgd=nope"], ["--label", "base"], ["--only", "nobody"], ["--smooth", "0"]],
)
def test_report_options_are_refused_in_one_line(options, tmp_path, capsys):
    run_dir = make_run(tmp_path, summary_for("base", "dsgd"), records_for(4, 8))
    try:
        code = main(["report", str(run_dir), "--out", str(tmp_path / "out"), *options])
    except SystemExit as stop:  # argparse's own refusals
        code = stop.code
    assert code == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("murmur: error: ")
    assert not (tmp_path / "out").exists()  # nothing written
