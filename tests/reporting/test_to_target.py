"""Time and bytes to a target accuracy, and the meaning of every column under a table."""

from __future__ import annotations

import pytest
from summaries import summary_for, worker_summary
from test_report import make_run, markdown_rows, records_for

from murmur.reporting.column_meanings import MEANINGS, footer, meaning, short_header
from murmur.reporting.report import format_table
from murmur.reporting.report_files import write_report
from murmur.reporting.seed_table import comparison_markdown, format_seed_table
from murmur.reporting.to_target import default_target, reach, with_targets


def curve(*means: float) -> list[dict]:
    """Records every 100 iterations whose mean accuracy is ``means``, each second one
    second and 1,000 bytes later."""
    return [
        {
            "iteration": 100 * (i + 1),
            "accuracy_mean": mean,
            "wall_seconds": 2.0 * (i + 1),
            "virtual_seconds": 0.5 * (i + 1),
            "bytes": 1_000 * (i + 1),
            "messages": 10 * (i + 1),
        }
        for i, mean in enumerate(means)
    ]


def test_reach_is_the_first_evaluation_at_or_above_the_target():
    records = curve(0.5, 0.85, 0.8, 0.9)
    assert reach(records, 0.85) == {
        "accuracy": 0.85,
        "iteration": 200,
        "wall_seconds": 4.0,
        "virtual_seconds": 1.0,
        "bytes": 2_000,
        "messages": 20,
    }
    assert reach(records, 0.88)["iteration"] == 400  # not the dip at 300
    assert reach(records, 0.95) == {"accuracy": 0.95}  # never reached
    assert reach([{"iteration": 100, "accuracy_mean": None}], 0.1) == {"accuracy": 0.1}


def test_the_default_target_is_95_percent_of_the_best_finished_run_rounded_down():
    best = summary_for("best", "dsgd", accuracy={"mean": 0.9353, "min": 0.9, "max": 0.95})
    worse = summary_for("worse", "detsgrad")
    collapsed = summary_for(
        "collapsed",
        "choco",
        accuracy={"mean": 0.99, "min": 0.99, "max": 0.99},
        status="collapsed",
        stopped={"rule": "chance", "iteration": 400, "reason": "at chance"},
    )
    assert default_target([worse, best, collapsed]) == 0.88  # floor(95 % of 93.53)
    assert default_target([collapsed]) is None
    assert default_target([summary_for("regression", "dsgd", accuracy=None)]) is None


def test_table_shows_iterations_seconds_and_bytes_to_the_target():
    summaries = [summary_for("fast", "dsgd"), summary_for("slow", "choco")]
    records = [curve(0.6, 0.8, 0.9), curve(0.5, 0.6, 0.7)]
    shown = with_targets(summaries, records, 0.8)
    assert "to_accuracy" not in summaries[0]  # copies: the summaries stay as they were
    rows = {row["name"]: row for row in markdown_rows(format_table(shown, markdown=True))}
    assert [rows["fast"][h] for h in ("its to 80 %", "s to 80 %", "bytes to 80 %")] == [
        "200",
        "4.0",
        "2.00 KB",
    ]
    assert [rows["slow"][h] for h in ("its to 80 %", "s to 80 %", "bytes to 80 %")] == ["-"] * 3
    assert "to 80" not in format_table(summaries, markdown=True)  # without a target: none
    compact = format_table(shown, compact=True)
    assert "bytes to 80%" in compact.splitlines()[0]


def test_seed_table_spreads_the_way_to_the_target_over_the_seeds_that_reached_it():
    seeds = [summary_for("dsgd", "dsgd", seed=seed) for seed in range(3)]
    shown = with_targets(seeds, [curve(0.8), curve(0.5, 0.8), curve(0.5, 0.6)], 0.8)
    (row,) = markdown_rows(format_seed_table([shown], markdown=True))
    assert row["its to 80 %"] == "150 ± 71"  # 100 and 200; the third seed never got there
    assert row["reached 80 %"] == "2/3"


def test_a_run_that_sends_nothing_has_no_bytes_to_the_target():
    sending = summary_for("dsgd", "dsgd")
    silent = summary_for("centralized", "centralized", bytes=0, messages=0)
    shown = with_targets([sending, silent], [curve(0.9), curve(0.9)], 0.8)
    rows = {row["name"]: row for row in markdown_rows(format_table(shown, markdown=True))}
    assert rows["dsgd"]["bytes to 80 %"] == "1.00 KB"
    assert rows["centralized"]["bytes to 80 %"] == "-"  # reached it, but sends no byte
    assert rows["centralized"]["its to 80 %"] == "100"
    seeds = [summary_for("centralized", "centralized", bytes=0, seed=s) for s in (0, 1)]
    group = with_targets([*seeds, sending], [curve(0.9), curve(0.9), curve(0.9)], 0.8)
    (row, _) = markdown_rows(format_seed_table([group[:2], group[2:]], markdown=True))
    assert row["bytes to 80 %"] == "-"


def test_the_terminal_table_keeps_one_time_column():
    simulated = [summary_for("a", "dsgd", wall_seconds=3.0, virtual_seconds=1.5)]
    header = format_table(simulated, compact=True).splitlines()[0]
    assert "virtual s" in header and "wall s" not in header
    assert "wall s" in format_table(simulated, markdown=True).splitlines()[0]  # files: both
    real = [summary_for("a", "dsgd", wall_seconds=3.0)]
    assert "wall s" in format_table(real, compact=True).splitlines()[0]


def test_the_last_k_header_says_k():
    last = {"k": 5, "mean": 0.8, "min": 0.7, "max": 0.9}
    table = format_table([summary_for("a", "dsgd", accuracy_last_k=last)], markdown=True)
    assert "last-5 acc %" in table.splitlines()[0]
    other = {**last, "k": 3}
    mixed = [
        summary_for("a", "dsgd", accuracy_last_k=last),
        summary_for("b", "dsgd", accuracy_last_k=other),
    ]
    assert "last-k acc %" in format_table(mixed, markdown=True).splitlines()[0]


def every_kind_of_table() -> list[str]:
    """Markdown tables with every optional column some run can bring."""
    last = {"k": 4, "mean": 0.8, "min": 0.7, "max": 0.9}
    sgd = [
        summary_for(
            "dsgd",
            "dsgd",
            seed=seed,
            accuracy_last_k=last,
            validation_last_k=last,
            model_accuracy=0.8,
            virtual_seconds=1.5,
            mixing="laplacian",
            steps={"b": 0.5},
            dropped_messages=3,
            failed_agents=[1],
            layers=[10, 10],
            train_accuracy={"mean": 0.9, "min": 0.9, "max": 0.9},
        )
        for seed in range(2)
    ]
    sgd = with_targets(sgd, [curve(0.9), curve(0.9)], 0.85)
    workers = [
        worker_summary("w1", 1, 1000, 8.0),
        worker_summary("w2", 2, 500, 4.0, wall_seconds_to_target=3.0),
    ]
    hogwild = summary_for(
        "hogwild",
        "hogwild",
        agents=1,
        single_process={"samples_per_second": 10.0, "accuracy": 0.8},
        speedup=1.5,
    )
    return [
        format_table([*sgd, *workers, hogwild], markdown=True),
        format_seed_table([sgd, workers, [hogwild]], markdown=True),
    ]


def test_every_column_of_every_table_has_a_meaning_in_its_footer():
    for table in every_kind_of_table():
        headers = [cell.strip() for cell in table.splitlines()[0].strip("|").split("|")]
        missing = [header for header in headers if meaning(header) is None]
        assert not missing
        explained = footer(headers)
        assert all(f"- **{header}**: " in explained for header in headers)
    assert meaning("last-4 acc %") == (
        "the agents' mean test accuracy averaged over the last 4 evaluations"
    )
    assert meaning("95 % CI").startswith("the 95 % confidence interval")
    assert meaning("no such column") is None
    assert short_header("bytes to 88 %") == "bytes to 88%"
    assert short_header("algorithm") is None  # the compact table leaves it out
    assert "N" not in "".join(short_header(key) or "" for key in MEANINGS if "N" not in key)


def test_comparison_and_report_explain_their_columns(tmp_path):
    summaries = [summary_for("base", "dsgd"), summary_for("event", "detsgrad", messages=50)]
    text = comparison_markdown([[summary] for summary in summaries])
    assert "Columns:" in text and "- **bytes vs DSGD %**: " in text
    run_dirs = [make_run(tmp_path / "runs", s, records_for(4, 8)) for s in summaries]
    report = write_report(run_dirs, tmp_path / "report", target=0.7).read_text()
    rows = markdown_rows("\n".join(line for line in report.splitlines() if line.startswith("|")))
    assert [row["its to 70 %"] for row in rows] == ["200", "200"]  # means 0.665, 0.765
    assert "- **its to 70 %**: iterations until the agents' mean test accuracy" in report


@pytest.mark.parametrize("given", ["0", "101", "nan", "high"])
def test_a_target_outside_0_to_100_percent_is_refused_in_one_line(given, tmp_path, capsys):
    from murmur.cli import main

    run_dir = make_run(tmp_path, summary_for("base", "dsgd"), records_for(4, 8))
    with pytest.raises(SystemExit) as stop:
        main(["report", str(run_dir), "--target", given])
    assert stop.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert "--target" in line and "percentage" in line
