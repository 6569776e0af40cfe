"""Plots beyond the per-iteration ones: time vs nodes, accuracy vs degree and the x-axis
label (layer-wise runs), speedup and staleness (worker-based runs), accuracy against
cumulative bytes and messages and the share of messages lost; seed groups drawn as one
line with a band, the time, loss and consensus curves, the formats and the legend."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import pytest
from matplotlib.container import BarContainer
from summaries import summary_for, worker_summary

from murmur import cli
from murmur.cli import main
from murmur.errors import UsageError
from murmur.reporting import plots
from murmur.reporting.palette import METHOD_COLOURS
from murmur.reporting.report import Run, read_run
from murmur.reporting.report_files import write_report
from murmur.reporting.seed_curves import plot_groups, seed_curve
from murmur.reporting.statistics import spread

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
NEW_PLOTS = ("time_vs_nodes.png", "accuracy_vs_degree.png")


def layer_records(agents: int, layers: int = 3) -> list[dict]:
    """metrics.jsonl of a layer-wise run: one record per layer, iteration == layer."""
    records = []
    for layer in range(layers + 1):
        accuracy = [0.3 + 0.1 * layer + 0.01 * agent for agent in range(agents)]
        records.append(
            {
                "iteration": layer,
                "layer": layer,
                "width": 10 if layer == 0 else 122,
                "admm_iterations": 30,
                "test_accuracy": accuracy,
                "accuracy_mean": sum(accuracy) / agents,
                "accuracy_min": min(accuracy),
                "accuracy_max": max(accuracy),
                "train_accuracy": [0.9] * agents,
                "train_accuracy_mean": 0.9,
                "train_nme": -5.0,
                "consensus_distance": 0.01,
                "events": 30 * agents * layer,
                "messages": 60 * agents * layer,
                "bytes": 8000 * agents * layer,
                "events_per_agent": [30 * layer] * agents,
                "virtual_seconds": 0.01 * layer,
                "wall_seconds": 0.02 * layer,
            }
        )
    return records


def sgd_records(agents: int) -> list[dict]:
    return [
        {
            "iteration": iteration,
            "test_accuracy": [0.5] * agents,
            "accuracy_mean": 0.5,
            "messages": 10 * iteration,
            "events_per_agent": [iteration] * agents,
        }
        for iteration in (0, 25, 50)
    ]


def layer_summary(
    name: str, algorithm: str, agents: int, mean_degree: float, virtual_seconds: float, **fields
) -> dict:
    summary = summary_for(
        name,
        algorithm,
        agents=agents,
        dataset="vowel",
        topology="ring" if agents > 1 else "none",
        iterations=120,
        accuracy={"mean": 0.55, "min": 0.5, "max": 0.6, "per_agent": [0.55] * agents},
        events=600,
        events_per_agent=[120] * agents,
        messages=1200,
        bytes=9_926_400,
        communication_saving=None,
        wall_seconds=0.2,
        virtual_seconds=virtual_seconds,
        layers=[122, 122, 122],
        train_accuracy={"mean": 0.97, "min": 0.96, "max": 0.98, "per_agent": [0.97] * agents},
        train_nme=-8.1,
        admm_iterations=120,
        mean_degree=mean_degree,
    )
    summary.update(fields)
    return summary


def accuracy(mean: float, agents: int) -> dict:
    """The accuracy field of a summary whose agents all reached ``mean``."""
    return {"mean": mean, "min": mean, "max": mean, "per_agent": [mean] * agents}


def make_run(root: Path, summary: dict, records: list[dict]) -> Path:
    run_dir = root / summary["name"]
    run_dir.mkdir(parents=True)
    (run_dir / "config.toml").write_text(f'[run]\nname = "{summary["name"]}"\n')
    (run_dir / "summary.json").write_text(json.dumps(summary))
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run_dir


def sweep(root: Path) -> list[Path]:
    """dSSFN runs at 4 and 8 nodes on degree-2 rings and a complete graph, plus SSFN and SGD."""
    summaries = [
        layer_summary("sync-8", "dssfn", 8, 2.0, 1.5),
        layer_summary("sync-4", "dssfn", 4, 2.0, 1.0),
        layer_summary("sync-8-full", "dssfn", 8, 7.0, 2.0, accuracy=accuracy(0.6, 8)),
        layer_summary("async-4", "dssfn-async", 4, 2.0, 0.05),
        layer_summary("central", "ssfn", 1, 0.0, 0.02),
    ]
    runs = [make_run(root, s, layer_records(s["agents"])) for s in summaries]
    sgd = summary_for("sgd", "detsgrad", agents=10, accuracy=accuracy(0.2, 10))
    runs.append(make_run(root, sgd, sgd_records(10)))
    return runs


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    return struct.unpack(">II", data[16:24])


def is_png(path: Path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == PNG_MAGIC


def fake_run(records: list[dict], **summary) -> Run:
    return Run(path=Path("nowhere"), summary=summary, records=records)


def test_report_writes_and_links_time_vs_nodes_and_accuracy_vs_degree(tmp_path):
    out = tmp_path / "report"
    report = write_report(sweep(tmp_path / "runs"), out).read_text()
    for file in NEW_PLOTS:
        assert is_png(out / file), file
        assert (out / file).stat().st_size > 5_000
        assert f"]({file})" in report
    assert "virtual" in report.split("(time_vs_nodes.png)")[0].rsplit("##", 1)[1]


def test_new_plots_are_not_written_with_a_single_x_value(tmp_path):
    summaries = [
        layer_summary("sync", "dssfn", 5, 2.0, 1.0),
        layer_summary("sync-seed", "dssfn", 5, 2.0, 1.1),
        layer_summary("async", "dssfn-async", 5, 2.0, 0.05),
    ]
    run_dirs = [make_run(tmp_path / "runs", s, layer_records(5)) for s in summaries]
    out = tmp_path / "report"
    out.mkdir()
    for file in NEW_PLOTS:  # stale copies from an earlier report go
        (out / file).write_bytes(PNG_MAGIC)
    report = write_report(run_dirs, out).read_text()
    for file in NEW_PLOTS:
        assert not (out / file).exists(), file
        assert file not in report
    assert is_png(out / "accuracy.png")


def test_new_plots_need_their_fields(tmp_path):
    # SGD runs at several agent counts have no virtual seconds or mean degree.
    runs = [
        read_run(make_run(tmp_path, summary_for(f"sgd-{n}", "dsgd", agents=n), [])) for n in (4, 8)
    ]
    assert not plots.plot_time_vs_nodes(runs, tmp_path / "time.png")
    assert not plots.plot_accuracy_vs_degree(runs, tmp_path / "degree.png")
    assert not (tmp_path / "time.png").exists()
    assert not (tmp_path / "degree.png").exists()


def test_plot_functions_report_whether_they_wrote(tmp_path):
    runs = [read_run(run_dir) for run_dir in sweep(tmp_path / "runs")]
    assert plots.plot_time_vs_nodes(runs, tmp_path / "time.png")
    assert plots.plot_accuracy_vs_degree(runs, tmp_path / "degree.png")
    assert is_png(tmp_path / "time.png") and is_png(tmp_path / "degree.png")


def test_points_are_grouped_by_algorithm_and_lines_sorted_by_x(tmp_path):
    runs = [read_run(run_dir) for run_dir in sweep(tmp_path / "runs")]
    by_nodes = plots.algorithm_points(
        runs, lambda s: s.get("agents"), lambda s: s.get("virtual_seconds")
    )
    assert list(by_nodes) == ["dssfn", "dssfn-async", "ssfn"]  # the SGD run has no time
    assert plots.mean_line(by_nodes["dssfn"]) == ([4, 8], [1.0, 1.75])  # 8 nodes: mean of two
    assert plots.mean_line(by_nodes["ssfn"]) == ([1], [0.02])


def test_lines_are_split_by_dataset_when_runs_span_several():
    runs = [
        fake_run([], algorithm="dssfn", dataset="vowel", mean_degree=2.0),
        fake_run([], algorithm="dssfn", dataset="letter", mean_degree=4.0),
    ]
    points = plots.algorithm_points(runs, lambda s: s["mean_degree"], lambda s: 1.0)
    assert list(points) == ["dssfn (vowel)", "dssfn (letter)"]


def test_x_axis_label_is_layer_only_when_every_run_is_layer_wise():
    ssfn = fake_run(layer_records(1), algorithm="ssfn")
    dssfn = fake_run(layer_records(5), algorithm="dssfn")
    sgd = fake_run(sgd_records(10), algorithm="detsgrad")
    empty = fake_run([], algorithm="dsgd")
    assert plots.x_axis_label([ssfn, dssfn]) == "layer"
    assert plots.x_axis_label([ssfn, empty]) == "layer"  # runs without records do not count
    assert plots.x_axis_label([ssfn, sgd]) == "iteration"
    assert plots.x_axis_label([sgd]) == "iteration"
    assert plots.x_axis_label([]) == "iteration"


@pytest.mark.parametrize("plot", [plots.plot_accuracy, plots.plot_messages])
def test_per_run_plots_take_their_x_label_from_the_runs(plot, tmp_path, monkeypatch):
    labels = []
    finish = plots._finish

    def recording_finish(axes, drawn, note, xlabel, *rest):
        labels.append(xlabel)
        finish(axes, drawn, note, xlabel, *rest)

    monkeypatch.setattr(plots, "_finish", recording_finish)
    layer_wise = fake_run(layer_records(5), algorithm="dssfn", agents=5)
    sgd = fake_run(sgd_records(10), algorithm="detsgrad", agents=10)
    plot([layer_wise], tmp_path / "layer.png")
    plot([layer_wise, sgd], tmp_path / "mixed.png")
    assert labels == ["layer", "iteration"]


# Worker-based runs: speedup vs workers and the staleness histogram.

WORKER_PLOTS = ("speedup_vs_workers.png", "staleness.png")


def worker_records(workers: int) -> list[dict]:
    return [
        {
            "iteration": iteration,
            "virtual_seconds": 0.01 * iteration,
            "train_loss": 2.0 / (1 + iteration),
            "staleness_mean": workers - 1.0,
            "test_accuracy": [0.5],
            "accuracy_mean": 0.5,
            "messages": 2 * iteration,
            "events_per_agent": [iteration // workers] * workers,
        }
        for iteration in (0, 20, 40)
    ]


def worker_runs(root: Path, summaries: list[dict]) -> list[Path]:
    return [make_run(root, s, worker_records(s["workers"])) for s in summaries]


def speedup_sweep() -> list[dict]:
    """W = 1, 2, 4 reach the target, W = 8 does not."""
    return [
        worker_summary("w1", 1, 1000, 8.0),
        worker_summary("w2", 2, 1000, 4.0),
        worker_summary("w4", 4, 800, 2.5),
        worker_summary("w8", 8, None, None),
    ]


def drawn_figures(monkeypatch) -> list:
    """Figures the plots save, collected while still saving them."""
    figures = []
    save = plots._save

    def recording_save(figure, path, *args):
        figures.append(figure)
        save(figure, path, *args)

    monkeypatch.setattr(plots, "_save", recording_save)
    return figures


def test_report_writes_and_links_speedup_and_staleness_plots(tmp_path):
    out = tmp_path / "report"
    report = write_report(worker_runs(tmp_path / "runs", speedup_sweep()), out).read_text()
    for file in WORKER_PLOTS:
        assert is_png(out / file), file
        assert (out / file).stat().st_size > 5_000
        assert f"]({file})" in report
    write_report([make_run(tmp_path / "sgd", summary_for("sgd", "dsgd"), [])], out)
    for file in WORKER_PLOTS:  # a later report without worker runs removes them
        assert not (out / file).exists(), file


def test_speedup_plot_draws_both_speedups_the_linear_line_and_names_left_out_runs(
    tmp_path, monkeypatch
):
    figures = drawn_figures(monkeypatch)
    runs = [read_run(d) for d in worker_runs(tmp_path, speedup_sweep())]
    assert plots.plot_speedup_vs_workers(runs, tmp_path / "speedup.png")
    (axes,) = figures[0].axes
    lines = {line.get_label(): line for line in axes.get_lines()}
    iterations, time = lines["asysg-con: iterations"], lines["asysg-con: virtual time"]
    assert list(iterations.get_xdata()) == [1, 2, 4]  # W = 8 did not reach the target
    assert list(iterations.get_ydata()) == pytest.approx([1.0, 2.0, 5.0])
    assert list(time.get_xdata()) == [1, 2, 4]
    assert list(time.get_ydata()) == pytest.approx([1.0, 2.0, 3.2])
    linear = lines["linear (W)"]
    assert list(linear.get_xdata()) == list(linear.get_ydata()) == [1, 8]
    assert "asysg-con: not reached, left out: W = 8" in lines
    assert axes.get_xscale() == "log"


def test_speedup_lines_group_by_algorithm_and_keep_runs_that_missed_the_target():
    runs = [
        fake_run([], **summary)
        for summary in [
            *speedup_sweep(),
            worker_summary("ps-1", 1, 1200, 10.0, algorithm="sync-ps"),
            worker_summary("ps-2", 2, 1200, 6.0, algorithm="sync-ps"),
            worker_summary("ac", 8, None, None, target_loss=0.0),  # no target: not a point
        ]
    ]
    lines = plots.speedup_lines(runs)
    assert list(lines) == ["asysg-con", "sync-ps"]
    points, not_reached = lines["asysg-con"]
    assert [w for w, _, _ in points] == [1, 2, 4]
    assert not_reached == [8]
    assert lines["sync-ps"][0] == [(1, 1.0, 1.0), (2, 2.0, pytest.approx(10.0 / 6.0))]


@pytest.mark.parametrize(
    "summaries",
    [
        # The W = 1 run did not reach the target.
        [worker_summary("w1", 1, None, None), worker_summary("w2", 2, 1000, 4.0)],
        # Only the W = 1 run reached it.
        [worker_summary("w1", 1, 1000, 8.0), worker_summary("w2", 2, None, None)],
        # No W = 1 run of that algorithm.
        [worker_summary("w2", 2, 1000, 4.0), worker_summary("w4", 4, 900, 2.0)],
        [
            worker_summary("w1", 1, 1000, 8.0, algorithm="sync-ps"),
            worker_summary("w2", 2, 1000, 4.0),
        ],
        # No target (target_loss 0): staleness only.
        [
            worker_summary("w1", 1, None, None, target_loss=0.0),
            worker_summary("w2", 2, None, None, target_loss=0.0),
        ],
    ],
)
def test_speedup_plot_needs_a_reached_w1_run_and_another_w(tmp_path, summaries):
    out = tmp_path / "report"
    out.mkdir()
    (out / "speedup_vs_workers.png").write_bytes(PNG_MAGIC)  # a stale copy goes
    report = write_report(worker_runs(tmp_path / "runs", summaries), out).read_text()
    assert not (out / "speedup_vs_workers.png").exists()
    assert "speedup_vs_workers.png" not in report
    assert is_png(out / "staleness.png")  # every one of these runs has a staleness histogram
    assert "](staleness.png)" in report


def test_staleness_plot_draws_one_share_line_per_run_with_a_histogram(tmp_path, monkeypatch):
    figures = drawn_figures(monkeypatch)
    runs = [
        fake_run([], name="sgd", algorithm="dsgd"),
        fake_run([], **worker_summary("w1", 1, 1000, 8.0)),
        fake_run([], **worker_summary("w4", 4, 800, 2.5, staleness={"histogram": [0, 1, 3]})),
    ]
    assert plots.plot_staleness(runs, tmp_path / "staleness.png")
    assert is_png(tmp_path / "staleness.png")
    (axes,) = figures[0].axes
    lines = {line.get_label(): line for line in axes.get_lines()}
    assert list(lines) == ["w1", "w4"]
    assert list(lines["w1"].get_ydata()) == [100.0]
    shares = list(lines["w4"].get_ydata())
    assert math.isnan(shares[0])  # no gradient with staleness 0: a gap on the log axis
    assert shares[1:] == pytest.approx([25.0, 75.0])
    assert lines["w4"].get_color() == lines["w1"].get_color() == METHOD_COLOURS["asysg-con"]
    assert lines["w4"].get_linestyle() == "--"  # the method's second line


@pytest.mark.parametrize(
    "staleness", [None, {"mean": 1.0, "max": 2}, {"histogram": []}, {"histogram": [0, "x"]}]
)
def test_staleness_plot_is_not_written_without_a_histogram(tmp_path, staleness):
    stale = tmp_path / "staleness.png"
    stale.write_bytes(PNG_MAGIC)
    runs = [fake_run([], name="a", algorithm="dsgd", staleness=staleness)]
    assert not plots.plot_staleness(runs, stale)
    assert not stale.exists()


# Accuracy against cumulative bytes and messages.

COMMUNICATION_PLOTS = ("accuracy_vs_bytes.png", "accuracy_vs_messages.png")


def communication_records(messages_per_step: int) -> list[dict]:
    """Evaluations at iterations 0, 10, 20: nothing sent yet at 0, accuracy 50, 60, 70 %."""
    return [
        {
            "iteration": 10 * step,
            "test_accuracy": [0.45 + 0.1 * step, 0.55 + 0.1 * step],
            "accuracy_mean": 0.5 + 0.1 * step,
            "messages": messages_per_step * step,
            "bytes": 400 * messages_per_step * step,
        }
        for step in range(3)
    ]


def communication_runs() -> list[Run]:
    records = communication_records(8)
    for record in records:  # the mean comes from per-agent accuracy when the record lacks it
        del record["accuracy_mean"]
    return [
        fake_run(communication_records(20), name="base", algorithm="dsgd"),
        fake_run([], name="empty", algorithm="dsgd"),
        fake_run(communication_records(0), name="central", algorithm="centralized"),
        fake_run(records, name="event", algorithm="detsgrad"),
    ]


def test_accuracy_vs_bytes_starts_at_the_first_byte_on_a_log_axis(tmp_path, monkeypatch):
    figures = drawn_figures(monkeypatch)
    plots.plot_accuracy_vs_bytes(communication_runs(), tmp_path / "bytes.png")
    assert is_png(tmp_path / "bytes.png")
    (axes,) = figures[0].axes
    assert axes.get_xscale() == "log"
    lines = {line.get_label(): line for line in axes.get_lines()}
    assert list(lines) == ["base", "event", "left out, no bytes: central"]
    assert list(lines["base"].get_xdata()) == [8_000, 16_000]  # the evaluation at 0 bytes goes
    assert list(lines["base"].get_ydata()) == pytest.approx([60.0, 70.0])
    assert list(lines["event"].get_xdata()) == [3_200, 6_400]
    assert list(lines["event"].get_ydata()) == pytest.approx([60.0, 70.0])
    assert lines["event"].get_color() == METHOD_COLOURS["detsgrad"]  # the method's colour
    assert lines["base"].get_color() == METHOD_COLOURS["dsgd"]


def test_accuracy_vs_messages_keeps_the_start_on_a_linear_axis(tmp_path, monkeypatch):
    figures = drawn_figures(monkeypatch)
    plots.plot_accuracy_vs_messages(communication_runs(), tmp_path / "messages.png")
    (axes,) = figures[0].axes
    assert axes.get_xscale() == "linear"
    lines = {line.get_label(): line for line in axes.get_lines()}
    assert list(lines) == ["base", "event", "left out, no messages: central"]
    assert list(lines["base"].get_xdata()) == [0, 20, 40]
    assert list(lines["base"].get_ydata()) == pytest.approx([50.0, 60.0, 70.0])
    assert list(lines["event"].get_xdata()) == [0, 8, 16]


@pytest.mark.parametrize("plot", [plots.plot_accuracy_vs_bytes, plots.plot_accuracy_vs_messages])
def test_communication_plots_without_a_run_that_sends_still_write_a_png(plot, tmp_path):
    central = fake_run(communication_records(0), name="central", algorithm="centralized")
    plot([central], tmp_path / "plot.png")
    assert is_png(tmp_path / "plot.png")


def test_report_writes_and_links_the_communication_plots(tmp_path):
    out = tmp_path / "report"
    summaries = [
        summary_for("base", "dsgd", bytes=16_000),
        summary_for("central", "centralized", agents=1, messages=0, bytes=0),
    ]
    run_dirs = [
        make_run(tmp_path / "runs", summary, communication_records(20 if index == 0 else 0))
        for index, summary in enumerate(summaries)
    ]
    report = write_report(run_dirs, out).read_text()
    for file in COMMUNICATION_PLOTS:
        assert is_png(out / file), file
        assert (out / file).stat().st_size > 5_000
        assert f"]({file})" in report


def drop_sweep(root: Path) -> list[Path]:
    """DSGD and DETSGRAD without faults and with 10 % and 30 % of 200 messages lost,
    and centralized SGD, which sends none."""
    summaries = []
    for algorithm, accuracies in (("dsgd", (0.94, 0.90, 0.86)), ("detsgrad", (0.91, 0.90, 0.90))):
        for lost, accuracy in zip((None, 20, 60), accuracies, strict=True):
            fields = {} if lost is None else {"dropped_messages": lost}
            summaries.append(
                summary_for(
                    f"{algorithm}-{lost}",
                    algorithm,
                    accuracy={
                        "mean": accuracy,
                        "min": accuracy,
                        "max": accuracy,
                        "per_agent": [accuracy] * 4,
                    },
                    **fields,
                )
            )
    summaries.append(summary_for("central", "centralized", agents=1, messages=0, bytes=0))
    return [make_run(root, summary, sgd_records(4)) for summary in summaries]


def test_accuracy_vs_lost_messages_has_one_point_per_run(tmp_path, monkeypatch):
    figures = drawn_figures(monkeypatch)
    runs = [read_run(run_dir) for run_dir in drop_sweep(tmp_path / "runs")]
    points = plots.lost_points(runs)
    # centralized SGD sent nothing to lose; every other run is its own point
    assert [point.label for point in points] == [
        "dsgd-None",
        "dsgd-20",
        "dsgd-60",
        "detsgrad-None",
        "detsgrad-20",
        "detsgrad-60",
    ]
    assert [point.lost[0] for point in points[:3]] == [0.0, 10.0, 30.0]
    assert [point.accuracy[0] for point in points[:3]] == pytest.approx([94.0, 90.0, 86.0])
    assert plots.plot_accuracy_vs_lost(runs, tmp_path / "lost.png")
    assert is_png(tmp_path / "lost.png")
    (axes,) = figures[0].axes
    labels = [text.get_text() for text in axes.get_legend().get_texts()]
    assert labels == [point.label for point in points]


def test_accuracy_vs_lost_keeps_runs_of_one_algorithm_apart(tmp_path, monkeypatch):
    """Two CHOCO-SGD runs, top-k at 91.8 % and qsgd at 81.4 %, are two points, not one
    at their mean."""
    figures = drawn_figures(monkeypatch)
    runs = [
        fake_run([], **summary_for(name, "choco-sgd", accuracy=accuracy(value, 4), **lost))
        for name, value, lost in (
            ("choco-topk", 0.918, {"dropped_messages": 20}),
            ("choco-qsgd", 0.814, {"dropped_messages": 60}),
            ("dsgd", 0.90, {}),
        )
    ]
    assert plots.plot_accuracy_vs_lost(runs, tmp_path / "lost.png")
    (axes,) = figures[0].axes
    points = {bar.get_label(): list(bar.lines[0].get_ydata()) for bar in axes.containers}
    assert points == {
        "choco-topk": [pytest.approx(91.8)],
        "choco-qsgd": [pytest.approx(81.4)],
        "dsgd": [pytest.approx(90.0)],
    }


def test_report_links_the_lost_plot_and_shows_the_lost_share(tmp_path):
    out = tmp_path / "report"
    report = write_report(drop_sweep(tmp_path / "runs"), out).read_text()
    assert is_png(out / "accuracy_vs_lost.png")
    assert "](accuracy_vs_lost.png)" in report
    header = next(line for line in report.splitlines() if line.startswith("| name"))
    column = [cell.strip() for cell in header.split("|")].index("lost msgs %")
    cells = {
        row.split("|")[1].strip(): row.split("|")[column].strip()
        for row in report.splitlines()
        if row.startswith("| ") and not row.startswith("| name")
    }
    assert cells["dsgd-60"] == "30.00"
    assert cells["dsgd-None"] == "0.00"
    assert cells["central"] == "-"


def test_runs_without_faults_draw_no_lost_plot(tmp_path):
    runs = [read_run(run_dir) for run_dir in sweep(tmp_path / "runs")]
    assert not plots.plot_accuracy_vs_lost(runs, tmp_path / "lost.png")
    assert not (tmp_path / "lost.png").exists()


# Seed groups, the new curves, formats and the legend.


def seed_records(seed: int, steps: int = 4, clock: float = 1.0) -> list[dict]:
    """Evaluations every 10 iterations: accuracy 50 + 10 step + seed %, virtual time
    ``clock`` per step, a training loss and a consensus distance."""
    return [
        {
            "iteration": 10 * step,
            "test_accuracy": [0.5 + 0.1 * step + 0.01 * seed] * 2,
            "accuracy_mean": 0.5 + 0.1 * step + 0.01 * seed,
            "accuracy_min": 0.45 + 0.1 * step,
            "accuracy_max": 0.55 + 0.1 * step,
            "messages": 20 * step,
            "bytes": 8000 * step,
            "events_per_agent": [5 * step + seed, 5 * step],
            "virtual_seconds": clock * step,
            "wall_seconds": 0.5 * step,
            "train_loss": 2.0 / (1 + step) if step else None,
            "consensus_distance": 0.1 / (1 + step) if step else 0.0,
        }
        for step in range(steps)
    ]


def seed_run(root: Path, name: str, seed: int, records: list[dict], **fields) -> Path:
    """A run folder root/name/seed-N whose config differs from its siblings' only in seed."""
    fields.setdefault("events_per_agent", records[-1]["events_per_agent"])
    summary = summary_for(name, fields.pop("algorithm", "dsgd"), agents=2, seed=seed, **fields)
    run_dir = root / name / f"seed-{seed}"
    run_dir.mkdir(parents=True)
    (run_dir / "config.toml").write_text(f'[run]\nname = "{name}"\nseed = {seed}\n')
    (run_dir / "summary.json").write_text(json.dumps(summary))
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run_dir


def seed_comparison(root: Path) -> list[Run]:
    """Three seeds of "event" (their clocks run at 1.0, 1.5 and 2.0 s per step) and one
    run of "base"."""
    dirs = [seed_run(root, "event", s, seed_records(s, clock=1 + s / 2)) for s in range(3)]
    dirs.append(seed_run(root, "base", 0, seed_records(0)))
    return [read_run(run_dir) for run_dir in dirs]


def test_a_seed_group_is_one_line_with_a_band_and_one_legend_entry(tmp_path, monkeypatch):
    figures = drawn_figures(monkeypatch)
    plots.plot_accuracy(seed_comparison(tmp_path), tmp_path / "accuracy.png")
    (axes,) = figures[0].axes
    lines = [line for line in axes.get_lines() if not line.get_label().startswith("_")]
    assert [line.get_label() for line in lines] == ["event (3 seeds)", "base"]
    assert list(lines[0].get_xdata()) == [0, 10, 20, 30]
    assert list(lines[0].get_ydata()) == pytest.approx([51.0, 61.0, 71.0, 81.0])  # the mean
    # One band, the seeds' 95 % interval: the single run beside it has no agent band.
    assert len(axes.collections) == 1
    seeds_band = axes.collections[0].get_paths()[0].vertices[:, 1]
    first = spread([seed_records(s)[0]["accuracy_mean"] * 100 for s in range(3)])
    assert seeds_band.min() == pytest.approx(first.low)
    legend = [text.get_text() for text in axes.get_legend().get_texts()]
    assert legend == ["event (3 seeds)", "base"]
    assert "95 % interval of the mean" in axes.get_title() and "best agent" not in axes.get_title()


def test_seeds_on_different_clocks_are_averaged_on_a_common_grid(tmp_path, monkeypatch):
    figures = drawn_figures(monkeypatch)
    assert plots.plot_accuracy_vs_virtual_time(seed_comparison(tmp_path), tmp_path / "t.png")
    (axes,) = figures[0].axes
    event = next(line for line in axes.get_lines() if line.get_label() == "event (3 seeds)")
    # every seed's times up to 3.0 s, where the fastest clock ends
    assert list(event.get_xdata()) == [0, 1, 1.5, 2, 3]
    # at 1.5 s: seed 0 halfway from 60 to 70 %, seed 1 at 61 %, seed 2 3/4 from 52 to 62 %
    assert event.get_ydata()[2] == pytest.approx((65.0 + 61.0 + 59.5) / 3)
    assert event.get_marker() == "None"  # interpolated: no point is a measurement
    assert len(axes.collections) == 1  # one band: the single run has none here


def test_seed_curve_interpolates_within_the_common_range_and_keeps_shared_points():
    curve = seed_curve([([0, 2, 4], [0, 2, 4]), ([0, 1, 3], [0, 3, 3])])
    assert list(curve.x) == [0, 1, 2, 3]  # seed 2's x range ends at 3
    assert list(curve.y) == pytest.approx([0, 2, 2.5, 3])
    # the 95 % interval of the mean of two: mean +- t(0.975, 1) sd / sqrt(2)
    halves = [spread(pair).high - spread(pair).mean for pair in ([0, 0], [1, 3], [2, 3], [3, 3])]
    assert list(curve.low) == pytest.approx([y - h for y, h in zip(curve.y, halves, strict=True)])
    assert list(curve.high) == pytest.approx([y + h for y, h in zip(curve.y, halves, strict=True)])
    assert curve.seeds == 2 and not curve.measured
    shared = seed_curve([([0, 1, 1], [1, 2, 5]), ([1, 0], [7, 3]), ([], [])])
    assert list(shared.x) == [0, 1] and shared.measured and shared.seeds == 2
    assert list(shared.y) == pytest.approx([2, 6])  # of points at one x the last counts
    assert seed_curve([([0, 1], [1, 1]), ([2, 3], [1, 1])]) is None  # no common range
    assert seed_curve([([], [])]) is None


def test_runs_without_a_seed_or_config_are_groups_of_their_own():
    runs = [fake_run([], name="a"), fake_run([], name="a", seed=0), fake_run([], name="b")]
    assert [len(group.runs) for group in plot_groups(runs)] == [1, 1, 1]


def test_events_of_a_seed_group_are_mean_bars_with_min_to_max_error_bars(tmp_path, monkeypatch):
    figures = drawn_figures(monkeypatch)
    plots.plot_events_per_agent(seed_comparison(tmp_path), tmp_path / "events.png")
    (axes,) = figures[0].axes
    bars = {bar.get_label(): bar for bar in axes.containers if isinstance(bar, BarContainer)}
    assert list(bars) == ["event (3 seeds)", "base"]
    assert [patch.get_height() for patch in bars["event (3 seeds)"]] == pytest.approx([16, 15])
    assert bars["event (3 seeds)"].errorbar is not None and bars["base"].errorbar is None


def test_train_loss_and_consensus_distance_are_drawn_on_log_axes(tmp_path, monkeypatch):
    figures = drawn_figures(monkeypatch)
    runs = seed_comparison(tmp_path)
    assert plots.plot_train_loss(runs, tmp_path / "loss.png")
    assert plots.plot_consensus_distance(runs, tmp_path / "consensus.png")
    for figure in figures:
        (axes,) = figure.axes
        assert axes.get_yscale() == "log"
        base = next(line for line in axes.get_lines() if line.get_label() == "base")
        assert list(base.get_xdata()) == [10, 20, 30]  # no loss yet, and consensus 0, at 0


def test_curves_the_runs_lack_are_not_written(tmp_path):
    runs = [read_run(run_dir) for run_dir in sweep(tmp_path / "runs")]  # layer-wise and SGD
    for file in ("loss.png", "consensus.png", "time.png"):
        (tmp_path / file).write_bytes(PNG_MAGIC)  # stale copies go
    assert not plots.plot_train_loss(runs, tmp_path / "loss.png")
    single = [read_run(make_run(tmp_path / "one", summary_for("c", "centralized", agents=1), []))]
    assert not plots.plot_consensus_distance(single, tmp_path / "consensus.png")
    distributed = [fake_run(sgd_records(4), name="d", algorithm="dsgd")]  # no virtual clock
    assert not plots.plot_accuracy_vs_virtual_time(distributed, tmp_path / "time.png")
    assert not any((tmp_path / file).exists() for file in ("loss.png", "consensus.png", "time.png"))


def test_a_time_axis_spanning_a_factor_of_10_is_logarithmic(tmp_path, monkeypatch):
    figures = drawn_figures(monkeypatch)
    slow = fake_run(seed_records(0, clock=50.0), name="sync")
    fast = fake_run(seed_records(0, clock=1.0), name="async")
    assert plots.plot_accuracy_vs_virtual_time([slow, fast], tmp_path / "t.png")
    plots.plot_accuracy_vs_wall_time([slow, fast], tmp_path / "wall.png")
    time, wall = (figure.axes[0] for figure in figures)
    assert time.get_xscale() == "log" and "log scale" in time.get_xlabel()
    assert list(time.get_lines()[0].get_xdata()) == [50, 100, 150]  # 0 s cannot be shown
    assert wall.get_xscale() == "linear"  # both runs' wall clocks end at 1.5 s


def test_the_legend_stands_outside_the_axes(tmp_path, monkeypatch):
    figures = drawn_figures(monkeypatch)
    runs = [fake_run(seed_records(0), name=f"run-with-a-long-name-{n}") for n in range(8)]
    plots.plot_accuracy(runs, tmp_path / "accuracy.png")
    (axes,) = figures[0].axes
    renderer = figures[0].canvas.get_renderer()
    legend = axes.get_legend().get_window_extent(renderer)
    assert legend.x0 >= axes.get_window_extent(renderer).x1
    assert len(axes.get_legend().get_texts()) == 8
    assert not axes.collections  # 8 lines: no agent bands, they would smear into one


@pytest.mark.parametrize(
    ("fmt", "magic"), [("png", PNG_MAGIC), ("pdf", b"%PDF"), ("svg", b"<?xml")]
)
def test_the_report_writes_every_plot_in_the_format_asked(tmp_path, fmt, magic):
    runs = [seed_run(tmp_path / "runs", "event", s, seed_records(s)) for s in range(2)]
    out = tmp_path / "report"
    report = write_report(runs, out, fmt=fmt).read_text()
    files = sorted(path.name for path in out.iterdir() if path.suffix != ".md")
    assert files == sorted(
        f"{stem}.{fmt}"
        for stem in (
            "accuracy",
            "messages",
            "events_per_agent",
            "accuracy_vs_bytes",
            "accuracy_vs_messages",
            "accuracy_vs_wall_time",
            "accuracy_vs_virtual_time",
            "train_loss",
            "consensus_distance",
        )
    )
    for file in files:
        assert (out / file).read_bytes().startswith(magic), file
        image = "" if fmt == "pdf" else "!"
        assert f"{image}[" in report and f"]({file})" in report
    if fmt == "pdf":
        assert "![" not in report  # markdown viewers do not show a PDF: a link
    if fmt == "png":  # written again, the report replaces its plots and adds none
        write_report(runs, out, fmt=fmt)
        assert files == sorted(path.name for path in out.iterdir() if path.suffix != ".md")


def test_dpi_sets_the_size_of_a_png(tmp_path):
    run = [fake_run(seed_records(0), name="a")]
    plots.plot_accuracy(run, tmp_path / "low.png", dpi=100)
    plots.plot_accuracy(run, tmp_path / "high.png", dpi=300)
    low, high = png_size(tmp_path / "low.png"), png_size(tmp_path / "high.png")
    assert high[0] == pytest.approx(3 * low[0], rel=0.03)
    assert high[1] == pytest.approx(3 * low[1], rel=0.03)


@pytest.mark.parametrize(
    ("fields", "message"),
    [({"fmt": "gif"}, "unknown plot format 'gif'"), ({"dpi": 0}, "dpi must be a positive")],
)
def test_a_bad_format_or_dpi_is_a_usage_error_before_anything_is_written(tmp_path, fields, message):
    run = seed_run(tmp_path / "runs", "a", 0, seed_records(0))
    with pytest.raises(UsageError, match=message):
        write_report([run], tmp_path / "report", **fields)
    assert not (tmp_path / "report").exists()


@pytest.mark.parametrize("option", [["--format", "gif"], ["--dpi", "-3"], ["--dpi", "x"]])
def test_murmur_report_refuses_a_bad_format_or_dpi_in_one_line(tmp_path, capsys, option):
    run = seed_run(tmp_path / "runs", "a", 0, seed_records(0))
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(run), *option])
    _, err = capsys.readouterr()
    assert exit_info.value.code == 2
    assert len(err.splitlines()) == 1 and err.startswith("murmur report: error:"), err
    assert not (run / "report.md").exists()


def test_murmur_report_format_and_dpi(tmp_path, capsys):
    run = seed_run(tmp_path / "runs", "a", 0, seed_records(0))
    assert main(["report", str(run), "--format", "svg", "--out", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "accuracy.svg").read_bytes().startswith(b"<?xml")
    assert main(["report", str(run), "--dpi", "60", "--out", str(tmp_path / "p")]) == 0
    assert png_size(tmp_path / "p" / "accuracy.png")[1] < 300  # 4.2 inches at 60 dpi
    assert cli.PLOT_FORMATS == plots.FORMATS
