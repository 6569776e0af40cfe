"""Runs that a rule stopped early (collapsed, diverged): tables, reports and plots
show them and never average them into a seed group's figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from matplotlib.container import BarContainer
from summaries import stopped, summary_for
from test_plots import drawn_figures
from test_report import markdown_rows, plain_rows

from murmur import cli
from murmur.metrics.stops import Stop, group_status, status_text, stop_of, stops_note
from murmur.reporting import plots
from murmur.reporting.report import read_run, stopped_line
from murmur.reporting.seed_table import (
    STOPPED_HEADING,
    comparison_markdown,
    format_results,
    format_seed_table,
)
from murmur.reporting.statistics import spread

MEANS = [0.96, 0.10, 0.10, 0.95, 0.94]
"""Final mean accuracy of seeds 0 to 4; seeds 1 and 2 collapse at iterations 400, 500."""
COLLAPSED = {1: 400, 2: 500}
FINISHED = [0, 3, 4]


def seed_group(name: str, algorithm: str = "dsgd", stops: dict | None = None, **fields) -> list:
    """Five seeds of ``name``: accuracy MEANS, messages 200 + 10 seed; ``stops`` maps a
    seed to the iteration it collapsed at (COLLAPSED by default)."""
    group = []
    for seed, mean in enumerate(MEANS):
        summary = summary_for(
            name,
            algorithm,
            seed=seed,
            accuracy={"mean": mean, "min": mean - 0.02, "max": mean + 0.01, "per_agent": None},
            run_dir=f"/runs/x/{name}/seed-{seed}",
            **{"messages": 200 + 10 * seed, **fields},
        )
        at = (COLLAPSED if stops is None else stops).get(seed)
        group.append(summary if at is None else stopped(summary, at))
    return group


def test_a_summary_says_whether_and_how_its_run_stopped():
    assert stop_of(summary_for("a", "dsgd")) is None
    assert stop_of(summary_for("a", "dsgd", status="finished")) is None
    assert stop_of({"status": "failed", "error": "lost peer"}) is None
    stop = stop_of(stopped(summary_for("a", "dsgd"), 200, "diverged", "non-finite", "loss nan"))
    assert stop == Stop("diverged", "non-finite", 200, "loss nan")
    assert status_text(stop) == "diverged at 200"


def test_notes_count_the_stopped_seeds_by_status_and_rule():
    stops = [
        Stop("collapsed", "chance", 500, ""),
        Stop("diverged", "non-finite", 200, ""),
        Stop("collapsed", "chance", 400, ""),
        Stop("collapsed", "consensus-growing", 300, ""),
    ]
    assert stops_note(stops, 7) == (
        "3 of 7 seeds collapsed (chance, at 400 and 500; consensus-growing, at 300), "
        "1 diverged (non-finite, at 200)"
    )
    assert group_status(stops[:1], 1) == "collapsed at 500"
    assert stops_note(stops[:1], 1) == "collapsed (chance, at 500)"
    assert group_status(stops[:1], 2) == "collapsed (1 of 2 seeds)"
    assert group_status(stops[:2], 2) == "stopped (2 of 2 seeds)"


def test_every_figure_of_a_group_is_over_its_finished_seeds():
    row = markdown_rows(format_seed_table([seed_group("dsgd")], markdown=True))[0]
    accuracy = spread([MEANS[seed] for seed in FINISHED])
    assert row["seeds"] == "5"
    assert row["final acc mean %"] == (
        f"{100 * accuracy.mean:.2f} ± {100 * accuracy.sd:.2f} (3 of 5 seeds)"
    )
    assert row["final acc mean %"].startswith("95.00 ± 1.00")
    assert row["95 % CI"] == f"[{100 * accuracy.low:.2f}, {100 * accuracy.high:.2f}]"
    assert row["stopped"] == "2 of 5 seeds collapsed (chance, at 400 and 500)"
    worst = spread([MEANS[seed] - 0.02 for seed in FINISHED])
    assert row["final acc min %"] == f"{100 * worst.mean:.2f} ± {100 * worst.sd:.2f}"
    messages = spread([200.0 + 10 * seed for seed in FINISHED])
    assert row["messages"] == f"{round(messages.mean)} ± {round(messages.sd)}"
    plain = plain_rows(format_seed_table([seed_group("dsgd")]))[0]
    assert plain["final acc mean %"] == f"{accuracy.text(scale=100)} (3 of 5 seeds)"


def test_last_k_and_the_ratios_to_dsgd_leave_stopped_seeds_out():
    """DSGD's seeds 1 and 2 collapsed: they are no baseline, so the other method's
    seeds 1 and 2 have none; its own seed 4 diverged and is in no figure."""
    last_k = {"mean": 0.5, "min": 0.4, "max": 0.6}
    dsgd = seed_group("dsgd", accuracy_last_k=last_k)
    for summary in dsgd:
        summary["accuracy_last_k"] = {**last_k, "mean": summary["accuracy"]["mean"]}
    less = seed_group("less", "detsgrad", stops={}, messages=100)
    less[4] = stopped(less[4], 200, "diverged", "non-finite")
    rows = markdown_rows(format_seed_table([dsgd, less], markdown=True))
    kept = spread([MEANS[seed] for seed in FINISHED])
    assert rows[0]["last-k acc %"] == f"{100 * kept.mean:.2f} ± {100 * kept.sd:.2f}"
    shares = spread([100 / 200, 100 / 230])  # seeds 0 and 3; 1, 2 lack a baseline, 4 stopped
    assert rows[1]["messages vs DSGD %"] == f"{100 * shares.mean:.2f} ± {100 * shares.sd:.2f}"
    assert rows[1]["final acc mean %"].endswith(" (4 of 5 seeds)")
    assert rows[1]["stopped"] == "1 of 5 seeds diverged (non-finite, at 200)"


def test_a_group_whose_every_seed_stopped_shows_its_status_and_no_figure():
    stops = {seed: 300 + 100 * seed for seed in range(5)}
    row = markdown_rows(
        format_seed_table([seed_group("dsgd"), seed_group("gt", stops=stops)], markdown=True)
    )[1]
    assert row["final acc mean %"] == "collapsed (5 of 5 seeds)"
    assert row["stopped"] == "5 of 5 seeds collapsed (chance, at 300, 400, 500, 600 and 700)"
    for column in ("95 % CI", "final acc min %", "messages", "bytes", "wall s"):
        assert row[column] == "-", column


def test_a_table_without_stopped_runs_has_no_stopped_column():
    table = format_seed_table([seed_group("dsgd", stops={})], markdown=True)
    assert "stopped" not in table.splitlines()[0]
    assert "of 5 seeds" not in table


def test_a_run_alone_shows_its_status_instead_of_its_accuracy():
    alone = stopped(summary_for("solo", "dsgd"), 400)
    rows = markdown_rows(format_results([[alone], [summary_for("fine", "dsgd")]], markdown=True))
    assert [row["final acc mean %"] for row in rows] == ["collapsed at 400", "80.00"]
    assert plain_rows(format_results([[alone]]))[0]["final acc mean %"] == "collapsed at 400"


def test_comparison_md_lists_the_stopped_runs_with_rule_and_reason():
    text = comparison_markdown([seed_group("dsgd")], failed=["lost: failed"])
    assert text.index("(3 of 5 seeds)") < text.index("Each seed:") < text.index(STOPPED_HEADING)
    assert text.index(STOPPED_HEADING) < text.index("Failed:")
    assert (
        "- dsgd (seed 1, /runs/x/dsgd/seed-1): collapsed at iteration 400 (chance): "
        "mean accuracy at chance for 3 evaluations\n"
    ) in text
    each = markdown_rows(text.split("Each seed:\n\n")[1].split("\n\n")[0])
    assert [row["final acc mean %"] for row in each] == [
        "96.00",
        "collapsed at 400",
        "collapsed at 500",
        "95.00",
        "94.00",
    ]
    assert stopped_line(seed_group("dsgd")[0]) is None


# Run folders: murmur report and the plots.


def accuracy_at(seed: int, iteration: int) -> float:
    """A finished seed's mean accuracy; a collapsed one falls to chance after 200."""
    if seed in COLLAPSED and iteration > 200:
        return 0.1
    return 0.5 + 0.07 * iteration / 100 + 0.01 * seed


def seed_records(seed: int) -> list[dict]:
    """Evaluations every 100 iterations, to 600 or to where the seed collapsed."""
    last = COLLAPSED.get(seed, 600)
    records = []
    for iteration in range(0, last + 1, 100):
        mean = accuracy_at(seed, iteration)
        records.append(
            {
                "iteration": iteration,
                "test_accuracy": [mean, mean],
                "accuracy_mean": mean,
                "accuracy_min": mean,
                "accuracy_max": mean,
                "messages": 2 * iteration,
                "bytes": 800 * iteration,
                "events_per_agent": [iteration // 10, iteration // 20],
                "wall_seconds": iteration / 100,
            }
        )
    return records


def write_seeds(root: Path, name: str, seeds: dict[int, int | None]) -> list[Path]:
    """Run folders root/name/seed-N; ``seeds`` maps a seed to where it collapsed (None:
    finished)."""
    folders = []
    for seed, at in seeds.items():
        records = seed_records(seed)
        mean = records[-1]["accuracy_mean"]
        summary = summary_for(
            name,
            "dsgd",
            agents=2,
            seed=seed,
            accuracy={"mean": mean, "min": mean, "max": mean, "per_agent": [mean, mean]},
            events_per_agent=records[-1]["events_per_agent"],
        )
        folder = root / name / f"seed-{seed}"
        folder.mkdir(parents=True)
        (folder / "config.toml").write_text(f'[run]\nname = "{name}"\nseed = {seed}\n')
        (folder / "summary.json").write_text(
            json.dumps(summary if at is None else stopped(summary, at))
        )
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        folders.append(folder)
    return folders


def comparison(root: Path) -> list:
    """dsgd: five seeds, 1 and 2 collapsed; solo: one run, collapsed at 400."""
    folders = write_seeds(root, "dsgd", {seed: COLLAPSED.get(seed) for seed in range(5)})
    folders += write_seeds(root, "solo", {1: 400})
    return [read_run(folder) for folder in folders]


def test_a_stopped_run_is_read_as_a_run_with_its_stop(tmp_path):
    run = comparison(tmp_path)[1]
    assert not run.failed
    assert stop_of(run.summary) == Stop(
        "collapsed", "chance", 400, "mean accuracy at chance for 3 evaluations"
    )


def test_murmur_report_shows_and_lists_the_stopped_runs(tmp_path, capsys):
    comparison(tmp_path / "runs")
    out = tmp_path / "report"
    assert cli.main(["report", str(tmp_path / "runs"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    report = (out / "report.md").read_text()
    for text in (report, printed):
        assert "(3 of 5 seeds)" in text
        assert "2 of 5 seeds collapsed (chance, at 400 and 500)" in text
        assert STOPPED_HEADING in text
        assert "collapsed at iteration 500 (chance)" in text
    assert "3 runs stopped early" in report
    assert "| solo | dsgd | mnist5k | 2 | ring | 300 | 1 | collapsed at 400 |" in report
    assert (out / "accuracy.png").is_file() and (out / "accuracy_vs_messages.png").is_file()


def test_murmur_report_of_a_single_stopped_run_shows_its_status(tmp_path, capsys):
    (folder,) = write_seeds(tmp_path, "solo", {1: 400})
    assert cli.main(["report", str(folder)]) == 0
    assert plain_rows(capsys.readouterr().out.split("\n\n")[0])[0]["acc %"] == ("collapsed at 400")


def labelled(axes) -> dict:
    return {line.get_label(): line for line in axes.get_lines()}


def test_accuracy_curves_average_finished_seeds_and_end_stopped_runs_at_an_x(tmp_path, monkeypatch):
    figures = drawn_figures(monkeypatch)
    plots.plot_accuracy(comparison(tmp_path), tmp_path / "accuracy.png")
    (axes,) = figures[0].axes
    lines = labelled(axes)
    mean = lines["dsgd (3 of 5 seeds)"]
    assert list(mean.get_xdata()) == [0, 100, 200, 300, 400, 500, 600]
    expected = [
        100 * sum(accuracy_at(seed, it) for seed in FINISHED) / 3 for it in range(0, 601, 100)
    ]
    assert list(mean.get_ydata()) == pytest.approx(expected)
    seeds = [line for line in axes.get_lines() if line.get_marker() == plots.STOP_MARKER]
    assert [line.get_xdata()[-1] for line in seeds] == [400, 500, 400]
    assert [line.get_markevery() for line in seeds] == [[4], [5], [4]]
    assert [line.get_label() for line in seeds] == [
        "dsgd: 2 of 5 seeds collapsed (chance, at 400 and 500)",
        "_nolegend_",
        "solo (collapsed at 400)",
    ]
    legend = axes.get_legend()
    texts = [text.get_text() for text in legend.get_texts()]
    entries = dict(zip(texts, legend.legend_handles, strict=True))
    assert entries["solo (collapsed at 400)"].get_marker() == plots.STOP_MARKER
    assert "dsgd (3 of 5 seeds)" in entries


def test_the_other_line_plots_end_stopped_runs_at_an_x_too(tmp_path, monkeypatch):
    figures = drawn_figures(monkeypatch)
    runs = comparison(tmp_path)
    plots.plot_accuracy_vs_messages(runs, tmp_path / "messages.png")
    plots.plot_accuracy_vs_wall_time(runs, tmp_path / "wall.png")
    for figure in figures:
        (axes,) = figure.axes
        lines = labelled(axes)
        assert "dsgd (3 of 5 seeds)" in lines
        assert lines["solo (collapsed at 400)"].get_marker() == plots.STOP_MARKER


def test_event_bars_are_over_finished_seeds_and_name_the_groups_left_out(tmp_path, monkeypatch):
    figures = drawn_figures(monkeypatch)
    plots.plot_events_per_agent(comparison(tmp_path), tmp_path / "events.png")
    (axes,) = figures[0].axes
    bars = {bar.get_label(): bar for bar in axes.containers if isinstance(bar, BarContainer)}
    assert list(bars) == ["dsgd (3 of 5 seeds)"]
    assert [patch.get_height() for patch in bars["dsgd (3 of 5 seeds)"]] == [60, 30]
    assert "left out, stopped early: solo" in labelled(axes)
