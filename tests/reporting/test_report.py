"""Reports from run folders: reading, the comparison table, report.md and plots."""

from __future__ import annotations

import json
import math
import re
import struct
from pathlib import Path

import pytest
from summaries import summary_for, worker_summary

from murmur.errors import UsageError
from murmur.metrics.records import to_json
from murmur.reporting import plots
from murmur.reporting.report import (
    failed_line,
    format_table,
    has_target,
    read_run,
    run_label,
    shown_path,
    speedups,
)
from murmur.reporting.report_files import write_report
from murmur.reporting.versus_dsgd import versus_dsgd
from murmur.units import bytes_in_unit, human_bytes

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def records_for(agents: int, messages_per_step: int, evaluations: int = 3) -> list[dict]:
    records = []
    for step in range(1, evaluations + 1):
        accuracy = [0.5 + 0.1 * step + 0.01 * agent for agent in range(agents)]
        records.append(
            {
                "iteration": 100 * step,
                "samples": 3200 * step,
                "wall_seconds": 1.0 * step,
                "test_accuracy": accuracy,
                "test_loss": [1.0 / step] * agents,
                "accuracy_mean": sum(accuracy) / agents,
                "accuracy_min": min(accuracy),
                "accuracy_max": max(accuracy),
                "train_loss": 1.0 / step,
                "consensus_distance": 0.1 / step,
                "events": 10 * step,
                "messages": messages_per_step * step,
                "bytes": 1000 * messages_per_step * step,
                "events_per_agent": [step + agent for agent in range(agents)],
            }
        )
    return records


def make_run(root: Path, summary: dict, records: list[dict] | None = None) -> Path:
    run_dir = root / summary["name"]
    run_dir.mkdir(parents=True)
    (run_dir / "config.toml").write_text(f'[run]\nname = "{summary["name"]}"\n')
    (run_dir / "summary.json").write_text(json.dumps(summary))
    lines = [json.dumps(record) for record in records or []]
    (run_dir / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))
    return run_dir


def markdown_rows(table: str) -> list[dict[str, str]]:
    """The body of a Markdown table as dicts keyed by header."""
    lines = table.splitlines()
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return [
        dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")), strict=True))
        for line in lines[2:]
    ]


def plain_rows(table: str) -> list[dict[str, str]]:
    """The rows of the plain table, cut at the column spans its dashed rule marks."""
    header, rule, *rows = table.splitlines()
    spans = [match.span() for match in re.finditer(r"-+", rule)]
    names = [header[start:end].strip() for start, end in spans]
    return [
        {name: row[start:end].strip() for name, (start, end) in zip(names, spans, strict=True)}
        for row in rows
    ]


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    return struct.unpack(">II", data[16:24])


def test_read_run_returns_summary_records_and_actual_folder(tmp_path):
    run_dir = make_run(tmp_path, summary_for("a", "dsgd"), records_for(4, 8))
    run = read_run(run_dir)
    assert run.path == run_dir
    assert run.summary["algorithm"] == "dsgd"
    assert run.summary["run_dir"] == str(run_dir.resolve())
    assert [record["iteration"] for record in run.records] == [100, 200, 300]


def test_read_run_without_metrics_file_has_no_records(tmp_path):
    run_dir = make_run(tmp_path, summary_for("a", "dsgd"))
    (run_dir / "metrics.jsonl").unlink()
    assert read_run(run_dir).records == []


def test_missing_folder_is_a_usage_error_naming_it(tmp_path):
    with pytest.raises(UsageError, match="nowhere"):
        read_run(tmp_path / "nowhere")


def test_missing_summary_is_a_usage_error_naming_the_file(tmp_path):
    run_dir = make_run(tmp_path, summary_for("a", "dsgd"))
    (run_dir / "summary.json").unlink()
    with pytest.raises(UsageError) as error:
        read_run(run_dir)
    assert str(run_dir / "summary.json") in str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("bad_line", ['{"iteration": 200, "messages": ', "[1, 2]"])
def test_malformed_metrics_line_is_a_usage_error_naming_file_and_line(tmp_path, bad_line):
    run_dir = make_run(tmp_path, summary_for("a", "dsgd"), records_for(4, 8, evaluations=1))
    with (run_dir / "metrics.jsonl").open("a") as metrics:
        metrics.write("\n" + bad_line + "\n")  # a blank line 2 is skipped, not an error
    with pytest.raises(UsageError) as error:
        read_run(run_dir)
    assert f"{run_dir / 'metrics.jsonl'}, line 3" in str(error.value)


def test_malformed_summary_is_a_usage_error_naming_the_file(tmp_path):
    run_dir = make_run(tmp_path, summary_for("a", "dsgd"))
    (run_dir / "summary.json").write_text("{not json")
    with pytest.raises(UsageError, match="summary.json"):
        read_run(run_dir)


def refusal(run_dir: Path) -> str:
    """The one-line UsageError read_run raises for a damaged run folder."""
    with pytest.raises(UsageError) as error:
        read_run(run_dir)
    message = str(error.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("file", ["summary.json", "metrics.jsonl"])
def test_file_that_is_not_utf8_names_the_byte(tmp_path, file):
    run_dir = make_run(tmp_path, summary_for("a", "dsgd"), records_for(4, 8, evaluations=1))
    path = run_dir / file
    path.write_bytes(path.read_bytes()[:20] + b"\xff" + path.read_bytes()[20:])
    assert refusal(run_dir) == (
        f"{path} is not UTF-8 text (byte 20); the file is damaged, remake the run"
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [("[" * 100_000, "nested too deeply"), ("7" * 5000, "a number has more than 4300 digits")],
)
def test_json_that_python_cannot_hold_is_one_line(tmp_path, text, problem):
    run_dir = make_run(tmp_path, summary_for("a", "dsgd"))
    (run_dir / "summary.json").write_text(text)
    assert f"summary.json is not valid JSON ({problem})" in refusal(run_dir)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"messages": "abc"},
            """field 'messages' must be an integer from 0 to 2**63 - 1, not "abc\"""",
        ),
        ({"messages": 10**30}, "field 'messages' must be an integer from 0 to 2**63 - 1, not 1000"),
        ({"agents": True}, "field 'agents' must be an integer from 1 to 2**63 - 1, not true"),
        ({"agents": 0}, "field 'agents' must be an integer from 1 to 2**63 - 1, not 0"),
        ({"preset": 3}, "field 'preset' must be a string of valid Unicode, not 3"),
        ({"wall_seconds": math.nan}, "field 'wall_seconds' must be a finite number >= 0, not NaN"),
        ({"bytes": 2.5}, "field 'bytes' must be an integer from 0 to 2**63 - 1, not 2.5"),
        ({"accuracy": [0.8]}, "field 'accuracy' must be an object, not a list"),
        (
            {"accuracy": {"mean": 1.5, "min": 0.5, "max": 0.9, "per_agent": None}},
            "field 'accuracy.mean' must be a number from 0 to 1 or null, not 1.5",
        ),
        ({"events_per_agent": [3, -1]}, "field 'events_per_agent[1]' must be an integer from 0"),
        (
            {"communication_saving": math.inf},
            "'communication_saving' must be a finite number or null, not Infinity",
        ),
        ({"test_loss": "low"}, "field 'test_loss' must be a number or null, not \"low\""),
        ({"preset": "\ud800"}, "field 'preset' must be a string of valid Unicode, not"),
        (
            {"status": "done"},
            """field 'status' must be "finished", "diverged", "collapsed" or "failed", """
            'not "done"',
        ),
        (
            {"status": "collapsed", "stopped": {"rule": "chance", "iteration": -1, "reason": "x"}},
            "field 'stopped.iteration' must be an integer from 0",
        ),
        (
            {"virtual_seconds": -1.0},
            "field 'virtual_seconds' must be a finite number >= 0, not -1.0",
        ),
        ({"layers": [122, 0]}, "field 'layers[1]' must be an integer from 1 to 2**63 - 1, not 0"),
        ({"failed_agents": ["2"]}, "field 'failed_agents[0]' must be an integer from 0"),
        ({"iterations_to_target": -5}, "field 'iterations_to_target' must be an integer from 0"),
        (
            {"single_process": {"samples_per_second": 10.0, "accuracy": 2}},
            "field 'single_process.accuracy' must be a number from 0 to 1 or null, not 2",
        ),
        ({"messages": "x" * 100}, 'not "' + "x" * 36 + "...;"),
    ],
)
def test_summary_field_of_the_wrong_type_is_named(tmp_path, fields, message):
    run_dir = make_run(tmp_path, summary_for("a", "dsgd") | fields)
    line = refusal(run_dir)
    assert line.startswith(f"{run_dir / 'summary.json'}: ")
    assert message in line
    assert line.endswith("; the file is damaged, remake the run")


@pytest.mark.parametrize("field", ["name", "accuracy", "messages", "test_loss", "wall_seconds"])
def test_summary_without_a_field_every_run_writes_is_refused(tmp_path, field):
    run_dir = make_run(tmp_path, summary_for("a", "dsgd"))
    summary = summary_for("a", "dsgd")
    del summary[field]
    (run_dir / "summary.json").write_text(json.dumps(summary))
    assert refusal(run_dir) == (
        f"{run_dir / 'summary.json'} has no field '{field}'; the file is damaged, remake the run"
    )


def test_empty_summary_is_refused(tmp_path):
    run_dir = make_run(tmp_path, summary_for("a", "dsgd"))
    (run_dir / "summary.json").write_text("{}")
    assert "summary.json has no field 'name'" in refusal(run_dir)


def test_object_without_a_field_names_the_object_and_the_field(tmp_path):
    staleness = {"mean": 1.0, "max": 2}
    run_dir = make_run(tmp_path, worker_summary("w", 2, None, None, staleness=staleness))
    assert "summary.json has no field 'staleness.histogram'" in refusal(run_dir)


def test_values_runs_may_write_are_accepted(tmp_path):
    # A diverged run's losses and distance; no saving, no target, no accuracy (regression).
    summary = worker_summary(
        "w",
        2,
        None,
        None,
        status="finished",
        test_loss=math.nan,
        consensus_distance=math.inf,
        target_loss=None,
        accuracy={"mean": None, "min": None, "max": None, "per_agent": None},
        failed_workers=[],
    )
    records = records_for(2, 4)
    records[0] |= {"accuracy_mean": None, "test_accuracy": None, "test_loss": [math.nan] * 2}
    run = read_run(make_run(tmp_path, summary, records))
    assert math.isnan(run.summary["test_loss"]) and len(run.records) == 3


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"iteration": "100"}, "field 'iteration' must be an integer from 0 to 2**63 - 1"),
        ({"accuracy_mean": math.nan}, "field 'accuracy_mean' must be a number from 0 to 1 or null"),
        ({"test_accuracy": [0.5, "x", 0.5, 0.5]}, "field 'test_accuracy[1]' must be a number"),
        ({"messages": 1.5}, "field 'messages' must be an integer from 0"),
        ({"layer": None}, "field 'layer' must be an integer from 0"),
        ({"events_per_agent": {}}, "field 'events_per_agent' must be a list, not an object"),
    ],
)
def test_record_field_of_the_wrong_type_names_file_and_line(tmp_path, change, message):
    records = records_for(4, 8)
    records[1] |= change
    run_dir = make_run(tmp_path, summary_for("a", "dsgd"), records)
    line = refusal(run_dir)
    assert line.startswith(f"{run_dir / 'metrics.jsonl'}, line 2: {message}")


def test_record_without_an_iteration_is_refused(tmp_path):
    records = records_for(4, 8)
    del records[2]["iteration"]
    run_dir = make_run(tmp_path, summary_for("a", "dsgd"), records)
    assert refusal(run_dir) == (
        f"{run_dir / 'metrics.jsonl'}, line 3 has no field 'iteration'; "
        "the file is damaged, remake the run"
    )


# ---- runs that failed during training -----------------------------------------------------


def failed_summary(name: str, error: str = "diverged at iteration 40 (loss nan)") -> dict:
    """summary.json of a run that failed during training."""
    return {
        "status": "failed",
        "error": error,
        "name": name,
        "preset": "default",
        "algorithm": "dsgd",
        "dataset": "mnist5k",
        "seed": 0,
        "run_dir": "/elsewhere/" + name,
    }


def test_failed_run_is_read_with_its_error_and_without_records(tmp_path):
    run_dir = make_run(tmp_path, failed_summary("lost"), records_for(4, 8))
    (run_dir / "metrics.jsonl").write_text('{"iteration": 10, "accur')  # cut off: not read
    run = read_run(run_dir)
    assert run.failed and run.records == []
    assert failed_line(run) == f"failed: lost ({run_dir}): diverged at iteration 40 (loss nan)"
    assert not read_run(make_run(tmp_path, summary_for("ok", "dsgd"))).failed


def test_failed_run_needs_only_status_and_error(tmp_path):
    run_dir = make_run(tmp_path, failed_summary("bare"))
    (run_dir / "summary.json").write_text('{"status": "failed", "error": "lost peer 3"}')
    assert failed_line(read_run(run_dir)) == f"failed: bare ({run_dir}): lost peer 3"
    (run_dir / "summary.json").write_text('{"status": "failed"}')
    assert "summary.json has no field 'error'" in refusal(run_dir)
    (run_dir / "summary.json").write_text('{"status": "failed", "error": "x", "seed": "0"}')
    assert "field 'seed' must be an integer" in refusal(run_dir)


def test_report_lists_failed_runs_below_the_table_and_leaves_them_out_of_plots(
    tmp_path, monkeypatch
):
    plotted = []
    monkeypatch.setattr(
        plots,
        "plot_accuracy",
        lambda runs, path, **_: plotted.append([run_label(r.summary) for r in runs]),
    )
    run_dirs = [
        make_run(tmp_path / "runs", summary_for("base", "dsgd"), records_for(4, 8)),
        make_run(tmp_path / "runs", failed_summary("diverged")),
        make_run(tmp_path / "runs", summary_for("event", "detsgrad"), records_for(4, 2)),
    ]
    report = write_report(run_dirs, tmp_path / "report").read_text()
    assert plotted == [["base", "event"]]
    assert "2 runs. Accuracies are" in report
    assert "1 run failed and is listed below the table, left out of it and the plots." in report
    table = [line for line in report.splitlines() if line.startswith("|")]
    assert [row["name"] for row in markdown_rows("\n".join(table))] == ["base", "event"]
    failed = f"- failed: diverged ({run_dirs[1]}): diverged at iteration 40 (loss nan)"
    lines = report.splitlines()
    assert lines.index(failed) > lines.index(table[-1])
    assert "**diverged**" in report  # its configuration is still listed


def test_report_of_failed_runs_only_says_so_and_draws_nothing(tmp_path):
    out = tmp_path / "report"
    out.mkdir()
    (out / "accuracy.png").write_bytes(PNG_MAGIC)  # a stale plot of an earlier report goes
    run_dirs = [
        make_run(tmp_path / "runs", failed_summary("a")),
        make_run(tmp_path / "runs", failed_summary("b", "lost peer 2")),
    ]
    report = write_report(run_dirs, out).read_text()
    assert "No run finished: 2 runs failed, so there is no table and no plot." in report
    assert f"- failed: b ({run_dirs[1]}): lost peer 2" in report
    assert "|" not in report and ".png" not in report
    assert list(out.iterdir()) == [out / "report.md"]


def test_messages_vs_dsgd_is_relative_to_the_dsgd_run_in_the_table():
    summaries = [
        summary_for("event", "detsgrad", messages=5_000),
        summary_for("base", "dsgd", messages=20_000),
        summary_for("chatty", "detsgrad", messages=30_000),
        summary_for("single", "centralized", agents=1, messages=0),
        summary_for("unknown", "detsgrad", messages=None),
    ]
    rows = {row["name"]: row for row in markdown_rows(format_table(summaries, markdown=True))}
    share = "messages vs DSGD %"
    assert rows["event"][share] == "25.00"
    assert rows["base"][share] == "100.00"
    assert rows["chatty"][share] == "150.00"
    assert rows["single"][share] == "-"
    assert rows["unknown"][share] == "-"
    assert rows["unknown"]["messages"] == "-"


def test_vs_dsgd_columns_are_absent_without_a_dsgd_run_or_a_full_exchange():
    table = format_table([summary_for("event", "detsgrad", messages=5_000)], markdown=True)
    assert "vs DSGD" not in table


def test_accuracies_are_percent_with_two_decimals_and_bytes_in_units():
    summary = summary_for(
        "a", "detsgrad", bytes=530_000_000, accuracy={"mean": 0.81234, "min": 0.7, "max": 0.84567}
    )
    row = markdown_rows(format_table([summary], markdown=True))[0]
    assert (row["final acc mean %"], row["final acc min %"], row["final acc max %"]) == (
        "81.23",
        "70.00",
        "84.57",
    )
    assert row["bytes"] == "530.00 MB"
    assert row["wall s"] == "12.3"


@pytest.mark.parametrize(
    ("count", "text"),
    [
        (12, "12 B"),
        (1_500, "1.50 KB"),
        (530_000_000, "530.00 MB"),
        (4.4e9, "4.40 GB"),
        (None, "-"),
        ("lots", "-"),
    ],
)
def test_human_bytes(count, text):
    assert human_bytes(count) == text


def test_a_spread_of_bytes_is_written_in_its_means_unit():
    assert bytes_in_unit(6.81e9, 6.1279e8) == ("6.81", "0.61", "GB")
    assert bytes_in_unit(512, 3.4) == ("512", "3", "B")
    assert bytes_in_unit(2_000_000, 0) == ("2.00", "0.00", "MB")


def test_markdown_table_has_separator_and_one_row_per_run():
    summaries = [summary_for(name, "dsgd") for name in ("a", "b", "c")]
    lines = format_table(summaries, markdown=True).splitlines()
    assert len(lines) == 2 + len(summaries)
    assert re.fullmatch(r"\|(:?-{3,}:?\|)+", lines[1])
    assert len({line.count("|") for line in lines}) == 1
    assert "run folder" not in lines[0]
    assert [row["name"] for row in markdown_rows("\n".join(lines))] == ["a", "b", "c"]


def test_markdown_cells_escape_pipes():
    table = format_table([summary_for("x|y", "dsgd")], markdown=True)
    assert "x\\|y" in table
    assert len({line.count("|") - line.count("\\|") for line in table.splitlines()}) == 1


def test_plain_table_aligns_columns_and_shows_the_run_folder():
    summaries = [
        summary_for("detsgrad-long-name", "detsgrad", messages=5_000, bytes=4.4e9),
        summary_for("d", "dsgd", messages=20_000),
    ]
    rows = plain_rows(format_table(summaries))
    assert [row["name"] for row in rows] == ["detsgrad-long-name", "d"]
    assert [row["messages"] for row in rows] == ["5000", "20000"]
    assert [row["bytes"] for row in rows] == ["4.40 GB", "2.00 MB"]
    assert [row["messages vs DSGD %"] for row in rows] == ["25.00", "100.00"]
    assert rows[0]["run folder"] == "/elsewhere/detsgrad-long-name"


def test_missing_and_null_fields_render_as_dash():
    sparse = {"algorithm": "centralized", "agents": 1, "accuracy": None, "bytes": None}
    row = markdown_rows(format_table([sparse, summary_for("d", "dsgd")], markdown=True))[0]
    assert row["name"] == "centralized"  # falls back to the algorithm
    for column in (
        "dataset",
        "topology",
        "iterations",
        "final acc mean %",
        "final acc min %",
        "final acc max %",
        "messages",
        "bytes",
        "messages vs DSGD %",
        "bytes vs DSGD %",
        "wall s",
    ):
        assert row[column] == "-", column
    assert row["agents"] == "1"


def test_write_report_writes_table_plots_and_config_list(tmp_path):
    run_dirs = [
        make_run(
            tmp_path / "runs", summary_for("base", "dsgd", messages=20_000), records_for(4, 80)
        ),
        make_run(
            tmp_path / "runs",
            summary_for("event", "detsgrad", messages=5_000, bytes=500_000),
            records_for(4, 20),
        ),
        make_run(
            tmp_path / "runs",
            summary_for(
                "single", "centralized", agents=1, messages=0, bytes=0, events_per_agent=[0]
            ),
            records_for(1, 0),
        ),
    ]
    out = tmp_path / "report"
    report_path = write_report(run_dirs, out)
    assert report_path == out / "report.md"
    report = report_path.read_text()

    for file in (
        "accuracy.png",
        "messages.png",
        "events_per_agent.png",
        "accuracy_vs_bytes.png",
        "accuracy_vs_messages.png",
    ):
        assert f"]({file})" in report
        assert (out / file).stat().st_size > 5_000
        width, height = png_size(out / file)  # 7 x 4.2 inches at 150 dpi, cropped
        assert width > height > 500

    table = "\n".join(line for line in report.splitlines() if line.startswith("|"))
    rows = markdown_rows(table)
    assert [row["name"] for row in rows] == ["base", "event", "single"]
    assert rows[1]["messages vs DSGD %"] == "25.00"
    assert [row["bytes vs DSGD %"] for row in rows] == ["100.00", "25.00", "-"]
    assert "- **bytes vs DSGD %**: bytes over DSGD's" in report  # the columns' meanings
    assert "no such DSGD run" not in report

    links = re.findall(r"\]\(([^)]*config\.toml)\)", report)
    assert len(links) == 3
    assert all((out / link).resolve().is_file() for link in links)

    write_report(run_dirs, out)  # re-running overwrites
    assert report_path.read_text() == report


def test_write_report_reads_every_run_before_writing(tmp_path):
    good = make_run(tmp_path, summary_for("good", "dsgd"), records_for(4, 8))
    out = tmp_path / "report"
    with pytest.raises(UsageError, match="missing"):
        write_report([good, tmp_path / "missing"], out)
    assert not out.exists()


def test_plots_without_anything_to_show_still_write_a_png(tmp_path):
    single = read_run(make_run(tmp_path, summary_for("single", "centralized", agents=1)))
    plots.plot_accuracy([single], tmp_path / "accuracy.png")
    plots.plot_messages([single], tmp_path / "messages.png")
    plots.plot_events_per_agent([single], tmp_path / "events.png")
    for file in ("accuracy.png", "messages.png", "events.png"):
        width, height = png_size(tmp_path / file)
        assert width > height > 500


def test_accuracy_band_comes_from_per_agent_values_when_statistics_are_missing():
    records = records_for(3, 8, evaluations=2)
    for record in records:
        del record["accuracy_mean"], record["accuracy_min"], record["accuracy_max"]
    iterations, mean, low, high = plots._accuracy_series(records)
    assert list(iterations) == [100, 200]
    assert mean == pytest.approx([61.0, 71.0])
    assert low == pytest.approx([60.0, 70.0])
    assert high == pytest.approx([62.0, 72.0])


def layerwise_summary(name: str, algorithm: str, agents: int = 5, **fields) -> dict:
    """A summary as SSFN / dSSFN runs write it: SGD fields plus layer-wise ones."""
    summary = summary_for(
        name,
        algorithm,
        agents=agents,
        dataset="vowel",
        communication_saving=None,
        virtual_seconds=0.0474,
        layers=[122, 122, 122],
        train_accuracy={"mean": 0.96969, "min": 0.96, "max": 0.98, "per_agent": [0.97] * agents},
        train_nme=-8.1,
        admm_iterations=120,
        mean_degree=2.0,
    )
    summary.update(fields)
    return summary


LAYERWISE_COLUMNS = ("train acc %", "layers", "virtual s")


@pytest.mark.parametrize("markdown", [True, False])
def test_layerwise_columns_show_train_accuracy_layers_and_virtual_seconds(markdown):
    summaries = [
        layerwise_summary("sync", "dssfn"),
        layerwise_summary("grow", "dssfn-async", layers=[122, 172, 222], virtual_seconds=12.345),
        layerwise_summary("central", "ssfn", agents=1, virtual_seconds=1234.5, mean_degree=0.0),
        summary_for("sgd", "detsgrad"),
    ]
    table = format_table(summaries, markdown=markdown)
    rows = {row["name"]: row for row in (markdown_rows if markdown else plain_rows)(table)}

    assert rows["sync"]["train acc %"] == "96.97"
    assert rows["sync"]["layers"] == "3 x 122"
    assert rows["sync"]["virtual s"] == "0.0474"
    assert rows["sync"]["wall s"] == "12.3"
    assert rows["grow"]["layers"] == "122,172,222"
    assert rows["grow"]["virtual s"] == "12.3"
    assert rows["central"]["virtual s"] == "1234.5"
    for column in LAYERWISE_COLUMNS:  # an SGD run lacks them all
        assert rows["sgd"][column] == "-", column
    assert rows["sgd"]["final acc mean %"] == "80.00"


def test_layerwise_columns_sit_beside_their_sgd_counterparts():
    header = markdown_rows(format_table([layerwise_summary("a", "dssfn")], markdown=True))[0]
    names = list(header)
    assert names.index("layers") == names.index("iterations") + 1
    assert names.index("train acc %") == names.index("final acc max %") + 1
    assert names.index("virtual s") == names.index("wall s") + 1


def test_sgd_only_tables_have_no_layerwise_columns():
    summaries = [summary_for("base", "dsgd"), summary_for("event", "detsgrad", messages=50)]
    for markdown in (True, False):
        header = format_table(summaries, markdown=markdown).splitlines()[0]
        for column in LAYERWISE_COLUMNS:
            assert column not in header
    # Null values count as absent: older or partial summaries add no empty columns.
    nulls = summary_for("n", "dsgd", layers=None, train_accuracy=None, virtual_seconds=None)
    header = format_table([nulls], markdown=True).splitlines()[0]
    assert not any(column in header for column in LAYERWISE_COLUMNS)


def test_each_layerwise_column_appears_with_its_own_field():
    only_virtual = summary_for("later-sgd", "dsgd", virtual_seconds=3.0)
    row = markdown_rows(format_table([only_virtual], markdown=True))[0]
    assert row["virtual s"] == "3.00"
    assert "layers" not in row and "train acc %" not in row


@pytest.mark.parametrize(
    ("layers", "text"),
    [([50], "1 x 50"), ([10, 10.0], "2 x 10"), ([], "-"), (None, "-"), ([1, "x"], "-")],
)
def test_layers_cell(layers, text):
    summaries = [layerwise_summary("a", "dssfn", layers=layers), layerwise_summary("b", "dssfn")]
    assert markdown_rows(format_table(summaries, markdown=True))[0]["layers"] == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.0, "0.0"), (0.0188, "0.0188"), (1.29, "1.29"), (0.00002243, "2.24e-05"), (None, "-")],
)
def test_virtual_seconds_keep_three_significant_digits(seconds, text):
    summaries = [
        layerwise_summary("a", "dssfn", virtual_seconds=seconds),
        layerwise_summary("b", "dssfn"),
    ]
    assert markdown_rows(format_table(summaries, markdown=True))[0]["virtual s"] == text


def test_vs_dsgd_is_dash_for_runs_with_null_communication_saving():
    summaries = [
        summary_for("base", "dsgd", messages=20_000),
        layerwise_summary("sync", "dssfn", messages=5_000),
        summary_for("event", "detsgrad", messages=5_000),
    ]
    rows = {row["name"]: row for row in markdown_rows(format_table(summaries, markdown=True))}
    assert rows["sync"]["messages vs DSGD %"] == "-"
    assert rows["sync"]["messages"] == "5000"
    assert rows["event"]["messages vs DSGD %"] == "25.00"


def test_report_says_which_seconds_are_virtual(tmp_path):
    layerwise = make_run(tmp_path / "runs", layerwise_summary("sync", "dssfn"), records_for(5, 8))
    sgd = make_run(tmp_path / "runs", summary_for("base", "dsgd"), records_for(4, 8))
    report = write_report([layerwise, sgd], tmp_path / "mixed").read_text()
    assert "virtual s is simulated time on the virtual clock" in report
    rows = markdown_rows("\n".join(line for line in report.splitlines() if line.startswith("|")))
    assert rows[0]["virtual s"] == "0.0474"
    report = write_report([sgd], tmp_path / "sgd").read_text()
    assert "seconds are wall-clock" in report and "virtual s" not in report


# Worker-based runs (AsySG-con, sync-ps, AsySG-incon): W, staleness, time to target, speedups.

SGD_HEADER = [
    "name",
    "algorithm",
    "dataset",
    "agents",
    "topology",
    "iterations",
    "final acc mean %",
    "final acc min %",
    "final acc max %",
    "messages",
    "bytes",
    "wall s",
]
WORKER_COLUMNS = ("W", "gradients", "staleness mean/max")
TARGET_COLUMNS = ("its to target", "virtual s to target", "iteration speedup", "time speedup")


def speedup_summaries() -> list[dict]:
    """W = 1, 2, 4 reach the target, W = 8 does not; the W = 1 run is not listed first."""
    return [
        worker_summary("w2", 2, 1000, 4.0),
        worker_summary("w1", 1, 1000, 8.0),
        worker_summary("w4", 4, 800, 2.5),
        worker_summary("w8", 8, None, None),
    ]


@pytest.mark.parametrize("markdown", [True, False])
def test_target_columns_show_workers_staleness_time_to_target_and_speedups(markdown):
    table = format_table(speedup_summaries(), markdown=markdown)
    rows = {row["name"]: row for row in (markdown_rows if markdown else plain_rows)(table)}
    expected = {
        # name: W, gradients, staleness, its, virtual s, iteration speedup, time speedup
        "w1": ("1", "100", "0.0 / 0", "1000", "8.00", "1.00", "1.00"),
        "w2": ("2", "101", "1.0 / 1", "1000", "4.00", "2.00", "2.00"),
        # 4 * 1000 / 800 = 5 (iterations), 8.0 / 2.5 = 3.2 (virtual time)
        "w4": ("4", "103", "3.0 / 3", "800", "2.50", "5.00", "3.20"),
        "w8": ("8", "107", "7.0 / 7", "-", "-", "-", "-"),
    }
    for name, cells in expected.items():
        assert tuple(rows[name][column] for column in WORKER_COLUMNS + TARGET_COLUMNS) == cells
    assert rows["w4"]["final acc mean %"] == "80.00"
    assert rows["w4"]["virtual s"] == "2.50"


def test_worker_columns_come_last_in_order_and_keep_the_others():
    header = markdown_rows(format_table(speedup_summaries(), markdown=True))[0]
    assert list(header) == [*SGD_HEADER, "virtual s", *WORKER_COLUMNS, *TARGET_COLUMNS]
    plain_header = list(plain_rows(format_table(speedup_summaries()))[0])
    assert plain_header[-1] == "run folder"
    assert plain_header[-8:-1] == [*WORKER_COLUMNS, *TARGET_COLUMNS]


def test_staleness_cell_rounds_the_mean_and_shows_the_largest():
    summary = worker_summary("w", 10, 500, 1.0, staleness={"mean": 7.04, "max": 9})
    row = markdown_rows(format_table([summary], markdown=True))[0]
    assert row["staleness mean/max"] == "7.0 / 9"


def test_speedups_follow_lians_definition():
    result = speedups(speedup_summaries())
    assert result[0] == pytest.approx((2.0, 2.0))
    assert result[1] == pytest.approx((1.0, 1.0))
    assert result[2] == pytest.approx((4 * 1000 / 800, 8.0 / 2.5))
    assert result[3] == (None, None)


def test_speedups_are_missing_without_a_reached_w1_run_of_the_same_algorithm_and_dataset():
    summaries = [
        worker_summary("con-1", 1, 1000, 8.0),
        worker_summary("con-2", 2, 600, 3.0),
        # No W = 1 run of sync-ps among the summaries.
        worker_summary("ps-2", 2, 700, 5.0, algorithm="sync-ps"),
        # A W = 1 run of asysg-con on another dataset does not count.
        worker_summary("cifar-2", 2, 500, 2.0, dataset="cifar10"),
        # The W = 1 run of asysg-incon did not reach the target.
        worker_summary("incon-1", 1, None, None, algorithm="asysg-incon"),
        worker_summary("incon-4", 4, 900, 2.0, algorithm="asysg-incon"),
    ]
    rows = {row["name"]: row for row in markdown_rows(format_table(summaries, markdown=True))}
    assert (rows["con-2"]["iteration speedup"], rows["con-2"]["time speedup"]) == ("3.33", "2.67")
    for name in ("ps-2", "cifar-2", "incon-1", "incon-4"):
        assert rows[name]["iteration speedup"] == "-", name
        assert rows[name]["time speedup"] == "-", name
    assert rows["ps-2"]["its to target"] == "700"
    assert rows["incon-4"]["virtual s to target"] == "2.00"
    assert rows["incon-1"]["its to target"] == "-"


def test_only_the_iteration_speedup_needs_iterations_and_only_time_needs_seconds():
    summaries = [
        worker_summary("w1", 1, 1000, 8.0),
        worker_summary("w2", 2, 1000, None),
    ]
    row = markdown_rows(format_table(summaries, markdown=True))[1]
    assert (row["iteration speedup"], row["time speedup"]) == ("2.00", "-")


def test_runs_with_staleness_but_no_target_show_workers_and_staleness_only():
    # target_loss 0 is "no target": the field iterations_to_target is there, null.
    untargeted = worker_summary("ac", 8, None, None, target_loss=0.0)
    sgd = summary_for("sgd", "dsgd")
    assert not has_target(untargeted)
    for markdown in (True, False):
        table = format_table([untargeted, sgd], markdown=markdown)
        rows = (markdown_rows if markdown else plain_rows)(table)
        assert (rows[0]["W"], rows[0]["staleness mean/max"]) == ("8", "7.0 / 7")
        assert (rows[1]["W"], rows[1]["staleness mean/max"]) == ("-", "-")
        for column in TARGET_COLUMNS:
            assert column not in rows[0], column


def test_sgd_rows_show_dashes_in_worker_columns_beside_target_runs():
    rows = markdown_rows(
        format_table([summary_for("sgd", "dsgd"), *speedup_summaries()], markdown=True)
    )
    for column in WORKER_COLUMNS + TARGET_COLUMNS:
        assert rows[0][column] == "-", column
    assert rows[0]["messages vs DSGD %"] == "100.00"
    assert rows[2]["iteration speedup"] == "1.00"  # w1 is still the baseline


def test_sgd_only_tables_look_as_before():
    summaries = [summary_for("base", "dsgd"), summary_for("event", "detsgrad", messages=50)]
    header = markdown_rows(format_table(summaries, markdown=True))[0]
    after_bytes = SGD_HEADER.index("bytes") + 1
    versus = ["messages vs DSGD %", "bytes vs DSGD %"]
    expected = [*SGD_HEADER[:after_bytes], *versus, *SGD_HEADER[after_bytes:]]
    assert list(header) == expected
    assert list(plain_rows(format_table(summaries))[0]) == [*expected, "run folder"]
    without_dsgd = [summaries[1]]
    assert list(markdown_rows(format_table(without_dsgd, markdown=True))[0]) == SGD_HEADER


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"iterations_to_target": 100, "target_loss": 0.3}, True),
        ({"iterations_to_target": None, "target_loss": 0.3}, True),
        ({"iterations_to_target": None}, True),
        ({"iterations_to_target": None, "target_loss": 0.0}, False),
        ({"iterations_to_target": None, "target_loss": None}, False),
        ({"target_loss": 0.3}, False),
        ({}, False),
    ],
)
def test_has_target(fields, expected):
    assert has_target(fields) is expected


def test_report_explains_speedups_only_with_a_target(tmp_path):
    targets = [make_run(tmp_path / "runs", s) for s in speedup_summaries()]
    report = write_report(targets, tmp_path / "targets").read_text()
    assert "iteration speedup = W * its(1) / its(W)" in report
    assert "target (0.25)" in report
    untargeted = make_run(tmp_path / "runs", worker_summary("ac", 8, None, None, target_loss=0))
    report = write_report([untargeted], tmp_path / "untargeted").read_text()
    assert "speedup" not in report


def test_parallel_runs_show_their_speed_against_one_process():
    hogwild = {
        **summary_for("hogwild", "hogwild"),
        "samples_per_second": 140223.4,
        "single_process": {"samples_per_second": 70031.2, "accuracy": 0.94},
        "speedup": 2.0023,
    }
    row = markdown_rows(format_table([hogwild], markdown=True))[0]
    assert row["samples/s"] == "140223"
    assert row["1-process samples/s"] == "70031"
    assert row["1-process acc %"] == "94.00"
    assert row["speedup"] == "2.00"
    header = format_table([summary_for("d", "dsgd")]).splitlines()[0].split()
    assert "speedup" not in header and "samples/s" not in header


# ---- runs of the distributed runtime ------------------------------------------------------


def distributed_worker_summary(name: str, workers: int, its: int | None, seconds: float | None):
    """What a distributed AsySG-con run writes: real seconds to target, no virtual ones."""
    summary = worker_summary(name, workers, its, None, runtime="distributed", failed_workers=[])
    for key in ("virtual_seconds", "virtual_seconds_to_target"):
        summary.pop(key)
    summary["wall_seconds_to_target"] = seconds
    return summary


def test_distributed_runs_show_real_seconds_to_target_and_their_time_speedup():
    summaries = [
        distributed_worker_summary("d1", 1, 1000, 10.0),
        distributed_worker_summary("d3", 3, 900, 4.0),
    ]
    rows = {row["name"]: row for row in markdown_rows(format_table(summaries, markdown=True))}
    assert rows["d3"]["s to target"] == "4.0"
    assert rows["d3"]["virtual s to target"] == "-"
    # 3 * 1000 / 900 (iterations); 10.0 / 4.0 (real seconds)
    assert (rows["d3"]["iteration speedup"], rows["d3"]["time speedup"]) == ("3.33", "2.50")
    assert "failed ranks" not in rows["d3"]  # nothing was lost


def test_real_and_virtual_seconds_never_make_one_speedup():
    summaries = [
        worker_summary("w1", 1, 1000, 8.0),  # simulated: virtual seconds
        distributed_worker_summary("d2", 2, 1000, 4.0),
    ]
    rows = {row["name"]: row for row in markdown_rows(format_table(summaries, markdown=True))}
    assert (rows["d2"]["iteration speedup"], rows["d2"]["time speedup"]) == ("2.00", "-")


def test_ranks_a_distributed_run_lost_get_a_column():
    summaries = [
        summary_for("dssfn-async", "dssfn-async", failed_agents=[2], ranks=[0, 1, 3]),
        distributed_worker_summary("asysg", 3, 500, 2.0) | {"failed_workers": [1, 3]},
        summary_for("simulated", "dsgd"),
    ]
    rows = {row["name"]: row for row in markdown_rows(format_table(summaries, markdown=True))}
    assert rows["dssfn-async"]["failed ranks"] == "2"
    assert rows["asysg"]["failed ranks"] == "1, 3"
    assert rows["simulated"]["failed ranks"] == "-"


# ---- bytes relative to DSGD ---------------------------------------------------------------


@pytest.mark.parametrize("markdown", [True, False])
def test_bytes_vs_dsgd_divides_by_the_dsgd_runs_bytes(markdown):
    summaries = [
        summary_for("event", "detsgrad", bytes=36_000),  # 36 kB / 2 MB
        summary_for("base", "dsgd", bytes=2_000_000),
        summary_for("compressed", "choco", bytes=1_000),
        summary_for("chatty", "detsgrad", bytes=5_000_000),
        summary_for("close", "detsgrad", bytes=199_000),  # 9.95 %: two digits round up to 10
        summary_for("single", "centralized", agents=1, messages=0, bytes=0),
        summary_for("unknown", "detsgrad", bytes=None),
    ]
    table = format_table(summaries, markdown=markdown)
    rows = {row["name"]: row for row in (markdown_rows if markdown else plain_rows)(table)}
    expected = {
        "event": "1.80",
        "base": "100.00",
        "compressed": "0.05",
        "chatty": "250.00",
        "close": "9.95",
        "single": "-",
        "unknown": "-",
    }
    assert {name: row["bytes vs DSGD %"] for name, row in rows.items()} == expected
    header = list(rows["event"])
    assert header.index("bytes vs DSGD %") == header.index("bytes") + 2


def test_bytes_vs_dsgd_uses_the_dsgd_run_of_the_same_set_up_else_the_full_exchange():
    summaries = [
        summary_for("dsgd-4", "dsgd", bytes=2_000_000),
        summary_for("dsgd-8", "dsgd", agents=8, bytes=8_000_000),
        summary_for("dsgd-cifar", "dsgd", dataset="cifar10", bytes=400_000_000),
        summary_for("event-8", "detsgrad", agents=8, bytes=144_000),
        summary_for("event-cifar", "detsgrad", dataset="cifar10", bytes=4_000_000),
        # No DSGD run on a torus: what DSGD would send on the torus is the baseline.
        summary_for(
            "event-torus",
            "detsgrad",
            topology="torus",
            bytes=1_000_000,
            full_exchange={"events": 1_200, "messages": 4_800, "bytes": 2_000_000},
        ),
        # The DSGD run of other iterations is no baseline, and there is no full exchange.
        summary_for("event-long", "detsgrad", iterations=600, bytes=1_000_000),
    ]
    names = (s["name"] for s in summaries)
    shares = dict(zip(names, versus_dsgd(summaries, "bytes"), strict=True))
    assert shares == {
        "dsgd-4": 1.0,
        "dsgd-8": 1.0,
        "dsgd-cifar": 1.0,
        "event-8": pytest.approx(144_000 / 8_000_000),
        "event-cifar": pytest.approx(0.01),
        "event-torus": pytest.approx(0.5),
        "event-long": None,
    }
    rows = {row["name"]: row for row in markdown_rows(format_table(summaries, markdown=True))}
    assert rows["event-8"]["bytes vs DSGD %"] == "1.80"
    assert rows["event-cifar"]["bytes vs DSGD %"] == "1.00"
    assert rows["event-torus"]["bytes vs DSGD %"] == "50.00"
    event_torus = [s["name"] for s in summaries].index("event-torus")
    assert versus_dsgd(summaries, "events")[event_torus] == pytest.approx(100 / 1_200)


@pytest.mark.parametrize(
    "summaries",
    [
        [summary_for("event", "detsgrad"), summary_for("single", "centralized", agents=1)],
        # A DSGD run that sent nothing (one agent) is no baseline.
        [summary_for("lonely", "dsgd", agents=1, bytes=0), summary_for("event", "detsgrad")],
    ],
)
def test_bytes_vs_dsgd_column_is_absent_without_a_dsgd_run_that_sent_bytes(tmp_path, summaries):
    for markdown in (True, False):
        assert "vs DSGD" not in format_table(summaries, markdown=markdown)
    assert versus_dsgd(summaries, "bytes") == [None, None]
    run_dirs = [make_run(tmp_path / "runs", summary, records_for(4, 8)) for summary in summaries]
    assert "vs DSGD" not in write_report(run_dirs, tmp_path / "report").read_text()


def test_report_names_the_runs_measured_against_their_full_exchange(tmp_path):
    exchange = {"events": 400, "messages": 800, "bytes": 4_000_000}
    summaries = [
        summary_for("base", "dsgd"),
        summary_for("event", "detsgrad", messages=100, full_exchange=exchange),
        summary_for("torus", "detsgrad", topology="torus", full_exchange=exchange),
    ]
    run_dirs = [make_run(tmp_path / "runs", s, records_for(4, 8)) for s in summaries]
    report = write_report(run_dirs, tmp_path / "report").read_text()
    rows = markdown_rows("\n".join(line for line in report.splitlines() if line.startswith("|")))
    assert [row["messages vs DSGD %"] for row in rows] == ["100.00", "50.00", "25.00"]
    assert [row["bytes vs DSGD %"] for row in rows] == ["100.00", "100.00", "50.00"]
    (note,) = [line for line in report.splitlines() if line.startswith("messages / bytes")]
    assert "the table has no DSGD run of the set-up of torus: its figures" in note
    measured = write_report(run_dirs[:2], tmp_path / "measured").read_text()
    assert "bytes vs DSGD %" in measured
    assert "no DSGD run" not in measured


def test_run_files_are_strict_json_with_null_for_numbers_that_are_not_finite():
    text = to_json({"loss": float("nan"), "per_agent": [1.0, float("inf")], "n": 3})
    assert json.loads(text, parse_constant=pytest.fail) == {
        "loss": None,
        "per_agent": [1.0, None],
        "n": 3,
    }


def test_bytes_vs_dsgd_column_is_absent_when_the_dsgd_run_has_no_byte_count():
    summaries = [summary_for("old", "dsgd", bytes=None), summary_for("event", "detsgrad")]
    for markdown in (True, False):
        assert "vs DSGD" not in format_table(summaries, markdown=markdown)
    assert versus_dsgd(summaries, "bytes") == [None, None]


def test_the_compact_table_keeps_the_terminals_columns_under_their_short_headers():
    summaries = [summary_for(name, name) for name in ("dsgd", "detsgrad", "choco-sgd")]
    full = format_table(summaries).splitlines()[0].split("  ")
    compact = format_table(summaries, compact=True).splitlines()
    headers = [cell.strip() for cell in re.split(r"\s{2,}", compact[0].strip())]
    assert headers == [
        "name",
        "acc %",
        "worst agent %",
        "msgs vs DSGD %",
        "bytes vs DSGD %",
        "wall s",
    ]
    assert "final acc mean %" in " ".join(full) and "run folder" in " ".join(full)
    assert compact[2].split()[:3] == ["dsgd", "80.00", "75.00"]
    one = format_table(summaries[:1], compact=True).splitlines()
    assert one[0].rstrip().endswith("run folder") and one[2].endswith("/elsewhere/dsgd")


def test_a_run_folder_is_shown_relative_to_the_current_directory_where_it_lies_under_it(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    assert shown_path(str(tmp_path / "runs" / "a")) == str(Path("runs") / "a")
    assert shown_path("/elsewhere/a") == "/elsewhere/a"
    assert shown_path(None) == "-"


def test_server_runs_show_the_gradients_they_applied():
    """A synchronous server applies W gradients an update, an asynchronous one one: the
    gradients column tells apart two rows of the same iterations."""
    sync = worker_summary("sync-ps", 4, None, None, algorithm="sync-ps")
    sync["staleness"] = {"mean": 0.0, "max": 0, "histogram": [4 * 300]}
    asynchronous = worker_summary("asysg-con", 4, None, None)
    table = format_table([sync, asynchronous], compact=True).splitlines()
    column = re.split(r"\s{2,}", table[0].strip()).index("gradients")
    cells = [re.split(r"\s{2,}", line.strip())[column] for line in table[2:]]
    assert cells == ["1200", str(3 + 100)]
