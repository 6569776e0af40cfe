"""The murmur command: bad input is one line and exit 2; good input writes run folders."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from importlib import resources
from pathlib import Path

import pytest
from small_runs import RUN_FILES

from murmur.cli import main
from murmur.config import load_experiment, preset_names
from murmur.data import DATASETS

FAST_OVERRIDES = [
    "data.dataset=blobs",
    "run.iterations=20",
    "run.eval_every=10",
    "model.hidden=[8]",
    "topology.agents=4",
]
FAST = [*(arg for item in FAST_OVERRIDES for arg in ("--set", item)), "--quiet"]
AGENTS = 4
ITERATIONS = 20
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SUMMARY_FIELDS = {
    "algorithm",
    "dataset",
    "agents",
    "topology",
    "iterations",
    "accuracy",
    "events",
    "messages",
    "bytes",
    "communication_saving",
    "consensus_distance",
    "wall_seconds",
    "samples_per_second",
    "seed",
}


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    """Run every command from a scratch folder, so nothing lands in the checkout."""
    monkeypatch.chdir(tmp_path)


def assert_one_line_error(capsys, code: int, prefix: str = "murmur: error:") -> str:
    out, err = capsys.readouterr()
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(prefix), err
    assert "Traceback" not in out + err
    return lines[0]


def run_ok(capsys, *argv: str) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def read_summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


def read_records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


# ---- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "preset, overrides, message",
    [
        ("detsgard", [], "unknown preset 'detsgard'"),
        ("detsgrad", ["run.sed=3"], "unknown key run.sed; valid keys: seed"),
        ("detsgrad", ["run.seed=abc"], "run.seed must be an integer"),
        ("detsgrad", ["topology.agents=0"], "topology.agents must be at least 1"),
        ("detsgrad", ["runseed"], "must look like section.key=value"),
        (
            "detsgrad",
            ["data.partition=iid", "topology.agents=2001"],
            "topology.agents=2001 exceeds the 2000 training samples",
        ),
        (
            "detsgrad",
            ["data.partition=labels", "data.labels_per_agent=5"],
            "data.labels_per_agent=5 must be between 1 and the 4 classes",
        ),
        ("detsgrad", ["data.dataset=mnist5"], "data.dataset='mnist5' is not a dataset"),
        ("choco-sgd", ["algorithm.compress=zip"], "algorithm.compress must be one of none, topk"),
        ("choco-sgd", ["algorithm.fraction=0"], "algorithm.fraction must be in (0, 1], not 0"),
        ("choco-sgd", ["algorithm.fraction=1.5"], "algorithm.fraction must be in (0, 1], not 1.5"),
        ("choco-sgd", ["algorithm.levels=0"], "algorithm.levels must be at least 1, not 0"),
        ("choco-sgd", ["algorithm.gamma=1.5"], "algorithm.gamma must be in (0, 1] or 'auto'"),
        ("choco-sgd", ["algorithm.gamma=fast"], "algorithm.gamma must be a number or 'auto'"),
        ("sparq-sgd", ["algorithm.local_steps=0"], "algorithm.local_steps (H) must be at least 1"),
        ("sparq-sgd", ["algorithm.threshold=-1"], "algorithm.threshold must be >= 0, not -1"),
        ("detsgrad", ["algorithm.b=fast"], "algorithm.b must be a number or 'auto', not 'fast'"),
        ("detsgrad-gt", ["algorithm.momentum=1"], "algorithm.momentum must be in [0, 1), not 1"),
        ("detsgrad-gt", ["algorithm.vy=-1"], "algorithm.v0 and algorithm.vy must be >= 0"),
        ("detsgrad", ["algorithm.trigger=tensor"], "algorithm.trigger must be one of 'model'"),
        ("detsgrad", ["algorithm.b=1.5"], "algorithm.b=1.5 is too large for ring with 4 agents"),
        ("dsgd", ["model.hidden=[100000000000]"], "for the batches) but this machine has"),
        ("asysg-con", ["algorithm.workers=1000000000"], "TB for the batches) but this machine has"),
        ("dsgd", ["data.batch_size=1000000000"], "for the batches) but this machine has"),
        ("dssfn-vowel", ["algorithm.nodes=100000000"], "for the nodes' Gram matrices"),
        ("detsgrad", ["algorithm.a=1e39"], "algorithm.a must be a finite number within float32"),
        ("detsgrad", ["run.threads=9223372036854775807"], "run.threads must be from 1 to 1024"),
        ("asysg-con", ["timing.speeds=[1.0, 2.0]"], "timing.speeds has 2 values for 8 workers"),
        ("detsgrad", ["timing.stragglers=5"], "timing.stragglers is 5 but there are only 4"),
        ("detsgrad", ["timing.flops_per_second=1e-300"], "flops_per_second must be at least 1"),
        ("detsgrad", ["timing.bandwidth=1e-300"], "bandwidth must be at least 1 byte per"),
        ("detsgrad", ["timing.noise_sigma=100"], "timing.noise_sigma must be from 0 to 10"),
        ("dsgd", ["collapse.enabled=1"], "collapse.enabled must be true or false, not 1"),
        ("dsgd", ["collapse.warmup=1"], "collapse.warmup must be in [0, 1), not 1.0"),
        ("dsgd", ["collapse.patience=0"], "collapse.patience must be at least 1, not 0"),
        ("dsgd", ["collapse.chance_margin=-0.1"], "collapse.chance_margin must be in [0, 1)"),
        ("dsgd", ["collapse.loss_factor=0.5"], "collapse.loss_factor must be at least 1, not"),
        ("dsgd", ["collapse.consensus_evaluations=0"], "collapse.consensus_evaluations must"),
        ("dsgd", ["collapse.consensus_growth=0.9"], "collapse.consensus_growth must be at least"),
        ("dsgd", ["collapse.consensus_floor=-1"], "collapse.consensus_floor must be >= 0, not"),
        ("dsgd", ["collapse.patience=many"], "collapse.patience must be an integer, not 'many'"),
        ("dsgd", ["collapse.patiense=3"], "unknown key collapse.patiense; valid keys: enabled"),
    ],
)
def test_bad_run_input_is_one_line_and_creates_no_folder(
    capsys, tmp_path, preset, overrides, message
):
    out = tmp_path / "out"
    argv = ["run", preset, *FAST, "--out", str(out)]
    argv += [arg for item in overrides for arg in ("--set", item)]
    line = assert_one_line_error(capsys, main(argv))
    assert message in line
    assert not out.exists()


def test_check_prints_each_run_and_writes_nothing(capsys, tmp_path):
    out = run_ok(capsys, "run", "default", *FAST, "--check", "--out", str(tmp_path / "out"))
    lines = out.splitlines()
    assert [line.split(":")[0] for line in lines[:-1]] == [
        "detsgrad",
        "dsgd",
        "detsgrad-gt",
        "centralized",
    ]
    assert "ring of 4 agents (4 edges), 20 iterations, about" in lines[0]
    assert lines[-1] == "checked: 4 runs; nothing was trained or written"
    assert not (tmp_path / "out").exists()


def test_a_bad_comparison_member_is_refused_before_any_member_runs(capsys, tmp_path):
    config = tmp_path / "pair.toml"
    config.write_text(
        'compare = ["dsgd", { preset = "dsgd", label = "steep", set = ["algorithm.b=1.5"] }]\n'
    )
    out = tmp_path / "out"
    line = assert_one_line_error(capsys, main(["run", str(config), *FAST, "--out", str(out)]))
    assert "algorithm.b=1.5 is too large" in line
    assert not out.exists()


def test_a_comparison_member_that_diverges_is_stopped_and_the_exit_status_stays_0(capsys, tmp_path):
    """A rule stops the steep member at its first evaluation: a result, not an error.
    Its folder says so, the members after it still run, stderr has one line for it."""
    config = tmp_path / "pair.toml"
    steep = '{ preset = "dsgd", label = "steep", set = ["algorithm.a=1e30"] }'
    config.write_text(f'compare = ["dsgd", {steep}, "detsgrad"]\n')
    out = tmp_path / "out"
    assert main(["run", str(config), *FAST, "--quiet", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        "murmur: steep diverged at iteration 10: the test loss is no longer finite"
    ]
    summary = json.loads((out / "steep" / "summary.json").read_text(), parse_constant=pytest.fail)
    assert summary["status"] == "diverged" and summary["stopped"]["rule"] == "non-finite"
    assert summary["iterations"] == 10 and summary["messages"] == 10 * 2 * AGENTS
    for label in ("dsgd", "detsgrad"):
        assert read_summary(out / label)["status"] == "finished"
        assert label in captured.out
    run_ok(capsys, "report", str(out), "--out", str(tmp_path / "report"))


def test_a_comparison_member_that_diverges_fails_alone_and_the_others_are_reported(
    capsys, tmp_path
):
    """With the rules off, a loss that is no longer a number fails the run: the steep
    member's folder says why it stopped, the members after it still run, the table and
    comparison.md show them and name the failed one, and the exit is 2."""
    config = tmp_path / "pair.toml"
    steep = '{ preset = "dsgd", label = "steep", set = ["algorithm.a=1e30"] }'
    config.write_text(f'compare = ["dsgd", {steep}, "detsgrad"]\n')
    out = tmp_path / "out"
    off = ["--set", "collapse.enabled=false"]
    assert main(["run", str(config), *FAST, *off, "--quiet", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert lines[0].startswith("murmur: error: steep failed: training diverged by iteration")
    assert lines[-1] == "murmur: error: 1 of 3 runs failed; the others finished"
    assert json.loads((out / "steep" / "summary.json").read_text())["status"] == "failed"
    for label in ("dsgd", "detsgrad"):
        assert json.loads((out / label / "summary.json").read_text())["accuracy"]["mean"] > 0
        assert label in captured.out
    comparison = (out / "comparison.md").read_text()
    assert "| detsgrad |" in comparison and "| steep |" not in comparison
    assert comparison.split("Failed:\n\n")[1].startswith("- steep failed: training diverged")


@pytest.mark.parametrize("preset", ["detsgrad", "asysg-con"])
def test_a_diverging_run_keeps_its_folder_with_a_failed_summary(capsys, tmp_path, preset):
    """With the rules off (``collapse.enabled = false``), as in the distributed runtime."""
    out = tmp_path / "out"
    argv = ["run", preset, *FAST, "--set", "algorithm.a=1e30", "--out", str(out)]
    argv += ["--set", "collapse.enabled=false"]
    line = assert_one_line_error(capsys, main(argv))
    assert "training diverged by iteration 10" in line
    summary = json.loads(
        (out / "summary.json").read_text(),
        parse_constant=pytest.fail,  # strict JSON
    )
    assert summary["status"] == "failed"
    assert line.endswith(summary["error"])
    assert summary["algorithm"] == preset
    assert (out / "config.toml").is_file()
    assert [record["iteration"] for record in read_records(out)] == [0]
    report = run_ok(capsys, "report", str(out), "--out", str(tmp_path / "report"))
    assert f"failed: {preset} ({out}): {summary['error']}" in report


def test_disconnected_graph_is_refused(capsys, tmp_path):
    edges = tmp_path / "edges.txt"
    edges.write_text("0 1\n2 3\n")
    out = tmp_path / "out"
    code = main(
        [
            "run",
            "detsgrad",
            *FAST,
            "--set",
            "topology.graph=edges",
            "--set",
            f"topology.edges_file={edges}",
            "--out",
            str(out),
        ]
    )
    line = assert_one_line_error(capsys, code)
    assert "disconnected (2 components" in line
    assert "topology.edges_file" in line
    assert not out.exists()


def test_missing_data_directory_is_refused(capsys, tmp_path):
    missing = tmp_path / "no-such-folder"
    code = main(
        ["run", "detsgrad", *FAST, "--set", "data.dataset=mnist", "--set", f"data.root={missing}"]
    )
    line = assert_one_line_error(capsys, code)
    assert f"directory {missing} does not exist" in line


def test_data_directory_without_the_files_is_refused(capsys, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    code = main(
        ["run", "detsgrad", *FAST, "--set", "data.dataset=mnist", "--set", f"data.root={empty}"]
    )
    line = assert_one_line_error(capsys, code)
    assert f"{empty} lacks train-images-idx3-ubyte" in line


def test_mnist_without_a_data_root_is_refused(capsys):
    line = assert_one_line_error(
        capsys, main(["run", "detsgrad", *FAST, "--set", "data.dataset=mnist"])
    )
    assert "data.root is not set" in line


def test_broken_config_file_is_refused(capsys, tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("[run\n")
    line = assert_one_line_error(capsys, main(["run", str(path)]))
    assert f"{path} is not valid TOML" in line


@pytest.mark.parametrize(
    "argv, message",
    [
        (["bogus"], "invalid choice: 'bogus'"),
        (["run", "detsgrad", "--bogus"], "unrecognized arguments: --bogus"),
        ([], "the following arguments are required: command"),
    ],
)
def test_bad_arguments_are_one_line(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    line = assert_one_line_error(capsys, exit_info.value.code)
    assert message in line


def test_bad_subcommand_arguments_are_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "detsgrad", "--set"])
    line = assert_one_line_error(capsys, exit_info.value.code, prefix="murmur run: error:")
    assert "--set: expected one argument" in line


def test_out_folder_that_is_not_empty_is_refused_and_left_alone(capsys, tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "notes.txt").write_text("keep me\n")
    line = assert_one_line_error(capsys, main(["run", "detsgrad", *FAST, "--out", str(out)]))
    assert f"{out} already exists and is not empty" in line
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    assert (out / "notes.txt").read_text() == "keep me\n"


def test_out_path_that_is_a_file_is_named_as_one_and_left_alone(capsys, tmp_path):
    out = tmp_path / "notes.txt"
    out.write_text("keep me\n")
    line = assert_one_line_error(capsys, main(["run", "detsgrad", *FAST, "--out", str(out)]))
    assert f"{out} is a file, not a folder" in line
    assert out.read_text() == "keep me\n"


def test_module_entry_point_reports_one_line(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "murmur", "run", "no-such-preset"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 2
    lines = completed.stderr.splitlines()
    assert len(lines) == 1, completed.stderr
    assert lines[0].startswith("murmur: error: unknown preset 'no-such-preset'")
    assert "Traceback" not in completed.stderr
    assert completed.stdout == ""


# ---- a single run -------------------------------------------------------------------------


@pytest.mark.kernels
def test_single_run_writes_its_folder(capsys, tmp_path):
    out = tmp_path / "one"
    printed = run_ok(capsys, "run", "detsgrad", *FAST, "--out", str(out))
    assert sorted(p.name for p in out.iterdir()) == RUN_FILES
    shown = (
        str(out.resolve().relative_to(Path.cwd().resolve()))
        if out.resolve().is_relative_to(Path.cwd().resolve())
        else str(out.resolve())
    )
    assert shown in printed  # relative to the current directory where it lies under it
    assert max(len(line) for line in printed.split("\n\n")[0].splitlines()) <= 120

    saved = load_experiment(str(out / "config.toml")).runs[0][1]
    assert saved == load_experiment("detsgrad", FAST_OVERRIDES).runs[0][1]

    records = read_records(out)
    assert [record["iteration"] for record in records] == [0, 10, ITERATIONS]
    assert all(len(record["test_accuracy"]) == AGENTS for record in records)

    summary = read_summary(out)
    assert SUMMARY_FIELDS <= set(summary)
    assert summary["algorithm"] == "detsgrad"
    assert summary["dataset"] == "blobs"
    assert summary["agents"] == AGENTS
    assert summary["topology"] == "ring"
    assert summary["iterations"] == ITERATIONS
    assert summary["seed"] == 0

    accuracy = summary["accuracy"]
    per_agent = accuracy["per_agent"]
    assert len(per_agent) == AGENTS
    assert per_agent == records[-1]["test_accuracy"]
    assert accuracy["mean"] == pytest.approx(sum(per_agent) / AGENTS)
    assert accuracy["min"] == min(per_agent)
    assert accuracy["max"] == max(per_agent)
    assert accuracy["mean"] > 0.5  # four well separated clusters: better than chance

    assert 0 < summary["events"] <= AGENTS * ITERATIONS
    assert summary["events"] == records[-1]["events"]
    assert summary["messages"] == 2 * summary["events"]  # ring: each event reaches 2 neighbours
    assert summary["bytes"] > 0
    assert summary["communication_saving"] == pytest.approx(
        1 - summary["events"] / (AGENTS * ITERATIONS)
    )
    assert summary["consensus_distance"] >= 0
    assert summary["wall_seconds"] > 0
    assert summary["samples_per_second"] > 0


def test_saved_config_reproduces_the_run(capsys, tmp_path):
    first, again = tmp_path / "first", tmp_path / "again"
    run_ok(capsys, "run", "detsgrad", *FAST, "--out", str(first))
    run_ok(capsys, "run", str(first / "config.toml"), "--quiet", "--out", str(again))
    assert read_summary(again)["accuracy"] == read_summary(first)["accuracy"]
    assert read_summary(again)["events"] == read_summary(first)["events"]


def test_same_seed_same_numbers_other_seed_other_numbers(capsys, tmp_path):
    def outcome(name: str, seed: int) -> tuple[list[float], int, list[int]]:
        out = tmp_path / name
        run_ok(capsys, "run", "detsgrad", *FAST, "--set", f"run.seed={seed}", "--out", str(out))
        summary = read_summary(out)
        return summary["accuracy"]["per_agent"], summary["events"], summary["events_per_agent"]

    first, repeat, other = outcome("a", 3), outcome("b", 3), outcome("c", 4)
    assert first == repeat
    assert other[0] != first[0]


# ---- the default comparison and its report ------------------------------------------------


def test_default_comparison_and_report(capsys, tmp_path):
    out = tmp_path / "compare"
    labels = ["detsgrad", "dsgd", "detsgrad-gt", "centralized"]
    printed = run_ok(
        capsys, "run", "default", *FAST, "--set", "data.partition=iid", "--out", str(out)
    )
    assert sorted(p.name for p in out.iterdir()) == sorted([*labels, "comparison.md"])
    for label in labels:
        summary = read_summary(out / label)
        assert summary["algorithm"] == label
        assert summary["preset"] == "default"
        assert summary["iterations"] == ITERATIONS
    assert f"runs in {out}; every column in its comparison.md" in printed
    assert max(len(line) for line in printed.split("\n\n")[0].splitlines()) <= 120
    assert read_summary(out / "centralized")["messages"] == 0
    assert read_summary(out / "dsgd")["events"] == AGENTS * ITERATIONS

    text = (out / "comparison.md").read_text()
    table = [line for line in text.splitlines() if line.startswith("|")]
    assert len(table) == 2 + len(labels)
    assert "- **messages vs DSGD %**: messages over those of the DSGD run" in text
    assert [row.split("|")[1].strip() for row in table[2:]] == labels

    printed = run_ok(capsys, "report", str(out))
    shown = [line.split()[0] for line in printed.split("\n\n")[0].splitlines()[2:]]
    assert shown == labels  # the comparison's order, as murmur run printed it
    report = (out / "report.md").read_text()
    for label in labels:
        assert f"**{label}**" in report
    lines = report.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("| name |"))) + 2
    assert [row.split("|")[1].strip() for row in lines[start : start + len(labels)]] == labels
    for png in ("accuracy.png", "messages.png", "events_per_agent.png"):
        assert (out / png).read_bytes().startswith(PNG_MAGIC)
        assert f"({png})" in report


def test_report_of_a_folder_without_runs_is_refused(capsys, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    line = assert_one_line_error(capsys, main(["report", str(empty)]))
    assert "holds no run" in line
    assert list(empty.iterdir()) == []


def test_report_lists_failed_runs_below_the_table(capsys, tmp_path):
    runs = tmp_path / "runs"
    run_ok(capsys, "run", "dsgd", *FAST, "--out", str(runs / "dsgd"))
    lost = runs / "lost"
    lost.mkdir()
    failed = {"status": "failed", "error": "lost peer 2", "name": "lost"}
    (lost / "summary.json").write_text(json.dumps(failed))
    printed = run_ok(capsys, "report", str(runs), "--out", str(tmp_path / "report")).splitlines()
    assert printed[2].startswith("dsgd ") and printed[3] == f"failed: lost ({lost}): lost peer 2"
    printed = run_ok(capsys, "report", str(lost), "--out", str(tmp_path / "lost")).splitlines()
    assert printed[:2] == ["no run finished", f"failed: lost ({lost}): lost peer 2"]


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        (b"{}", " has no field 'name'"),
        (
            b'{"status": "failed", "error": 3}',
            ": field 'error' must be a string of valid Unicode, not 3",
        ),
        (b'{"name": "caf\xe9"}', " is not UTF-8 text (byte 13)"),
    ],
)
def test_report_of_a_damaged_summary_names_the_file(capsys, tmp_path, payload, problem):
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_bytes(payload)
    line = assert_one_line_error(capsys, main(["report", str(run)]))
    assert line.startswith(f"murmur: error: {run / 'summary.json'}{problem}")
    assert line.endswith("; the file is damaged, remake the run")
    assert sorted(run.iterdir()) == [run / "summary.json"]


# ---- listings -----------------------------------------------------------------------------


def test_presets_lists_each_preset_with_its_description(capsys):
    printed = run_ok(capsys, "presets").splitlines()
    names = preset_names()
    assert len(printed) == len(names)
    folder = resources.files("murmur") / "presets"
    for name, line in zip(names, printed, strict=True):
        description = tomllib.loads((folder / f"{name}.toml").read_text())["description"]
        assert line.split()[0] == name
        assert line.rstrip().endswith(description)


def test_datasets_lists_every_dataset_with_its_sizes(capsys):
    lines = {line.split()[0]: line for line in run_ok(capsys, "datasets").splitlines()}
    assert set(lines) == set(DATASETS) | {"file"}
    assert "4000/1000 x 784, 10 classes" in lines["mnist5k"]
    assert "data.dataset=file" in lines["file"] and "--file PATH" in lines["file"]
    assert "2000/500 x 8, 4 classes" in lines["blobs"]
    assert "50000/10000 x 3072, 100 classes" in lines["cifar100"]
    assert "~724737/80526 x 784, 62 classes" in lines["femnist"]  # the whole set's sizes


def test_an_automatic_consensus_step_runs_on_a_graph_a_fixed_one_would_not(capsys, tmp_path):
    """detsgrad's preset has b = "auto": 20 agents of an Erdos-Renyi graph need no tuning,
    where the fixed b = 0.45 of a ring is refused (b * lambda_max(L) >= 2)."""
    graph = ["topology.graph=erdos_renyi", "topology.agents=20", "topology.probability=0.3"]
    argv = ["run", "detsgrad", *FAST, *(arg for item in graph for arg in ("--set", item))]
    run_ok(capsys, *argv, "--out", str(tmp_path / "auto"))
    assert read_summary(tmp_path / "auto")["agents"] == 20
    fixed = main([*argv, "--set", "algorithm.b=0.45", "--out", str(tmp_path / "fixed")])
    line = assert_one_line_error(capsys, fixed)
    assert "algorithm.b=0.45 is too large for erdos_renyi(0.3) with 20 agents" in line
    assert line.endswith('or b = "auto"')


def test_an_error_that_quotes_a_line_break_stays_one_line(capsys):
    line = assert_one_line_error(capsys, main(["run", "dsgd", "--set", "run.se\ned=1", "--check"]))
    assert "run.se\\ned" in line


def test_set_on_a_section_that_is_not_a_table_is_refused(capsys, tmp_path):
    config = tmp_path / "value.toml"
    config.write_text('run = 5\n[algorithm]\nname = "dsgd"\n')
    argv = ["run", str(config), "--set", "run.seed=1", "--check"]
    assert "[run] must be a table" in assert_one_line_error(capsys, main(argv))


@pytest.mark.parametrize("where", ["out", "data.root", "topology.edges_file"])
def test_a_path_too_long_for_the_system_is_one_line(capsys, tmp_path, where):
    long = str(tmp_path / ("x" * 300))
    argv = ["run", "dsgd", *FAST, "--check"]
    if where == "out":
        argv += ["--out", long]
    elif where == "data.root":
        argv += ["--set", "data.dataset=mnist", "--set", f"data.root={long}"]
    else:
        argv += ["--set", "topology.graph=edges", "--set", f"topology.edges_file={long}"]
    line = assert_one_line_error(capsys, main(argv))
    assert "too long" in line


def test_a_report_folder_that_cannot_be_made_is_one_line(capsys, tmp_path):
    run_ok(capsys, "run", "dsgd", *FAST, "--out", str(tmp_path / "run"))
    (tmp_path / "file").write_text("x")
    argv = ["report", str(tmp_path / "run"), "--out", str(tmp_path / "file" / "report")]
    line = assert_one_line_error(capsys, main(argv))
    assert line.startswith(f"murmur: error: cannot create report folder {tmp_path / 'file'}")


def test_an_empty_preset_name_is_refused_not_the_default(capsys):
    line = assert_one_line_error(capsys, main(["run", "", *FAST]))
    assert "unknown preset ''" in line


@pytest.mark.parametrize("where", ["under a file", "in /proc", "a dangling link"])
def test_a_run_folder_that_cannot_be_made_is_the_only_line(capsys, tmp_path, where):
    """The folder is made before the first progress line, so only the error is printed."""
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    out = {
        "under a file": tmp_path / "file" / "run",
        "in /proc": Path("/proc/murmur-run"),
        "a dangling link": tmp_path / "link",
    }[where]
    argv = ["run", "dsgd", *(arg for item in FAST_OVERRIDES for arg in ("--set", item))]
    line = assert_one_line_error(capsys, main([*argv, "--out", str(out)]))
    assert "run folder" in line or "not a folder" in line, line


def test_memory_that_cannot_be_had_while_training_is_one_line_and_a_failed_summary(
    capsys, tmp_path, monkeypatch
):
    def no_memory(*args, **kwargs):
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate "
            "memory: you tried to allocate 1271520000 bytes. Error code 12"
        )

    monkeypatch.setattr("murmur.experiment.run_sgd", no_memory)
    code = main(["run", "dsgd", *FAST, "--out", str(tmp_path / "run")])
    _, err = capsys.readouterr()
    assert code == 1 and len(err.splitlines()) == 1, err
    assert "ran out of memory" in err and "can't allocate memory" in err
    summary = read_summary(tmp_path / "run")
    assert summary["status"] == "failed" and "can't allocate memory" in summary["error"]


def test_another_runtime_error_keeps_its_traceback(monkeypatch):
    """Only lost peers and memory that cannot be had are failures of the run: any other
    error is a bug, and its traceback says where."""

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr("murmur.experiment.run_sgd", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["run", "dsgd", *FAST])


def test_report_refuses_a_metrics_file_that_is_a_folder(capsys, tmp_path):
    run_ok(capsys, "run", "dsgd", *FAST, "--out", str(tmp_path / "run"))
    (tmp_path / "run" / "metrics.jsonl").unlink()
    (tmp_path / "run" / "metrics.jsonl").mkdir()
    line = assert_one_line_error(capsys, main(["report", str(tmp_path / "run")]))
    assert "metrics.jsonl is not a file of records" in line


def test_a_plan_file_is_for_distributed_ranks_only(capsys, tmp_path):
    line = assert_one_line_error(capsys, main(["run", "--plan", str(tmp_path / "p.json")]))
    assert "--plan is for the ranks of --runtime distributed" in line
