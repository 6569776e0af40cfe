"""Seeds as an axis: `murmur run --seeds` runs each member once per seed into its own
folder, and the tables give the mean and spread across seeds."""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
import tomllib
from pathlib import Path

import pytest
from small_runs import SMALL_SGD
from test_cli_resume import kill_after_a_checkpoint

from murmur.cli import main
from murmur.config import load_experiment, parse_seeds
from murmur.reporting.report import format_table, read_run
from murmur.reporting.seed_table import format_results
from murmur.reporting.statistics import spread

SHORT = [*SMALL_SGD, "run.iterations=20", "run.eval_every=10"]
SETS = [part for setting in SHORT for part in ("--set", setting)]
MEMBERS = ["detsgrad", "dsgd", "detsgrad-gt", "centralized"]
WALL = {"wall_seconds", "train_seconds", "samples_per_second", "run_dir", "wall"}


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory) -> tuple[Path, str]:
    """The default comparison over seeds 0-2, and what `murmur run` printed."""
    out = tmp_path_factory.mktemp("seeds") / "default"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["run", "default", *SETS, "--seeds", "0-2", "--quiet", "--out", str(out)]) == 0
    return out, printed.getvalue()


def plain_rows(table: str) -> dict[str, dict[str, str]]:
    """The rows of a plain table by name: cells split at two or more spaces."""
    lines = table.strip().splitlines()
    headers = _cells(lines[0])
    return {row[0]: dict(zip(headers, row, strict=True)) for row in map(_cells, lines[2:])}


def _cells(line: str) -> list[str]:
    return [cell for cell in re.split(r" {2,}", line.strip()) if cell]


def summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


def test_each_member_runs_once_per_seed_in_its_own_folder(seeded):
    out, _ = seeded
    assert sorted(p.name for p in out.iterdir()) == sorted([*MEMBERS, "comparison.md"])
    for member in MEMBERS:
        assert sorted(p.name for p in (out / member).iterdir()) == ["seed-0", "seed-1", "seed-2"]
        for seed in range(3):
            folder = out / member / f"seed-{seed}"
            config = tomllib.loads((folder / "config.toml").read_text())
            assert (config["run"]["seed"], config["run"]["seeds"]) == (seed, [])
            assert (summary(folder)["seed"], summary(folder)["name"]) == (seed, member)


def test_the_table_gives_the_spread_of_the_seeds(seeded):
    """The terminal's compact table, then the full one that comparison.md holds."""
    out, printed = seeded
    shown = plain_rows(printed.split("\n\n")[0])
    assert list(shown) == MEMBERS
    groups = [[summary(out / member / f"seed-{seed}") for seed in range(3)] for member in MEMBERS]
    rows = plain_rows(format_results(groups))
    for member, summaries in zip(MEMBERS, groups, strict=True):
        accuracy = spread([s["accuracy"]["mean"] for s in summaries])
        messages = spread([s["messages"] for s in summaries])
        assert shown[member]["seeds"] == "3"
        assert shown[member]["acc %"] == accuracy.text(scale=100)
        worst = spread([s["accuracy"]["min"] for s in summaries])
        assert shown[member]["worst agent %"] == worst.text(scale=100)
        row = rows[member]
        assert row["final acc mean %"] == accuracy.text(scale=100)
        low, high = max(0.0, accuracy.low), min(1.0, accuracy.high)
        assert row["95 % CI"] == f"[{100 * low:.2f}, {100 * high:.2f}]"
        assert row["messages"] == f"{messages.mean:.0f} +- {messages.sd:.0f}"
    markdown = (out / "comparison.md").read_text()
    assert "| seeds | final acc mean % | 95 % CI |" in markdown
    assert "Each seed:" in markdown and markdown.count("| dsgd |") == 4  # a group, 3 seeds


def test_seeds_change_the_results_and_each_folder_repeats_its_own_run(seeded, tmp_path):
    out, _ = seeded
    losses = {summary(out / "detsgrad" / f"seed-{seed}")["test_loss"] for seed in range(3)}
    assert len(losses) == 3  # the same numbers would mean the seed was not applied
    messages = {summary(out / "detsgrad" / f"seed-{seed}")["messages"] for seed in range(3)}
    assert len(messages) > 1  # the event-triggered sends follow the seed too
    again = tmp_path / "again"
    config = out / "detsgrad" / "seed-1" / "config.toml"
    assert main(["run", str(config), "--quiet", "--out", str(again)]) == 0
    first, second = summary(out / "detsgrad" / "seed-1"), summary(again)
    assert second["preset"] == "config"  # the file's name
    assert {k: v for k, v in first.items() if k not in {*WALL, "preset"}} == {
        k: v for k, v in second.items() if k not in {*WALL, "preset"}
    }


def test_report_groups_the_seeds(seeded, capsys, tmp_path):
    out, _ = seeded
    assert main(["report", str(out), "--out", str(tmp_path / "report")]) == 0
    rows = plain_rows(capsys.readouterr().out.split("\n\n")[0])
    assert sorted(rows) == sorted(MEMBERS)
    assert {row["seeds"] for row in rows.values()} == {"3"}
    report = (tmp_path / "report" / "report.md").read_text()
    assert "form 4 groups" in report and "### Each seed" in report
    assert report.count("| dsgd |") == 4


def test_report_groups_runs_that_differ_only_in_seed_whatever_their_folders(capsys):
    for seed in (4, 1, 7):
        args = ["run", "dsgd", *SETS, "--set", f"run.seed={seed}", "--quiet", "--out"]
        assert main([*args, f"flat-{seed}"]) == 0
    assert main(["run", "dsgd", *SETS, "--set", "algorithm.b=0.1", "--quiet", "--out", "b"]) == 0
    capsys.readouterr()
    assert main(["report", "flat-4", "flat-1", "flat-7", "b", "--out", "report"]) == 0
    lines = capsys.readouterr().out.split("\n\n")[0].splitlines()
    assert [line.split()[0] for line in lines[2:]] == ["dsgd", "dsgd"]
    seeds_column = _cells(lines[0]).index("seeds")
    assert [_cells(line)[seeds_column] for line in lines[2:]] == ["3", "1"]


def test_one_preset_over_seeds(capsys):
    assert main(["run", "dsgd", *SETS, "--seeds", "0,3", "--quiet", "--out", "one"]) == 0
    assert sorted(p.name for p in Path("one").iterdir()) == ["comparison.md", "seed-0", "seed-3"]
    printed = capsys.readouterr().out
    row = plain_rows(printed.split("\n\n")[0])["dsgd"]
    assert row["seeds"] == "2" and row["run folder"] == "one"  # relative to here
    assert "runs in one; every column and each seed's row in its comparison.md" in printed


def test_check_lists_every_seed_and_writes_nothing(capsys):
    assert main(["run", "default", *SETS, "--seeds", "1-2", "--check", "--out", "c"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines[:-1]] == [
        f"{member} (seed {seed})" for member in MEMBERS for seed in (1, 2)
    ]
    assert lines[-1] == "checked: 8 runs; nothing was trained or written"
    assert not Path("c").exists()


def test_seeds_in_a_toml_file_and_by_set():
    Path("mine.toml").write_text('extends = "dsgd"\n[run]\nseeds = [5, 2]\n')
    experiment = load_experiment("mine.toml", SHORT)
    assert [config.run.seed for _, config in experiment.runs] == [5, 2]
    assert {config.run.seeds for _, config in experiment.runs} == {()}
    assert [experiment.folder(i) for i in range(2)] == ["seed-5", "seed-2"]
    comparison = load_experiment("default", [*SHORT, "run.seeds=[0, 1]"])
    assert comparison.folder(3) == "dsgd/seed-1" and comparison.seeded
    plain = load_experiment("default", SHORT)
    assert not plain.seeded and plain.folder(1) == "dsgd"
    assert load_experiment("dsgd", SHORT).folder(0) == ""


def test_parse_seeds():
    assert parse_seeds("0-4") == (0, 1, 2, 3, 4)
    assert parse_seeds("0,3,7") == (0, 3, 7)
    assert parse_seeds(" 2-3, 10 ") == (2, 3, 10)


@pytest.mark.parametrize("text", ["", "a", "-1", "4-2", "0,0", "1,,2", "0-2,1", "0-5000", "1.5"])
def test_bad_seeds_are_one_line(capsys, text):
    code = main(["run", "dsgd", "--seeds", text, "--check"])
    out, err = capsys.readouterr()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("murmur: error: --seeds "), err


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "dsgd", "--seeds", "1", "--set", "run.seeds=[2]", "--check"],
        ["run", "--resume", "somewhere", "--seeds", "1"],
        ["run", "dsgd", "--runtime", "distributed", "--seeds", "0-1"],
        ["launch", "dsgd", "--nproc", "2", "--set", "run.seeds=[0,1]"],
    ],
)
def test_seeds_that_cannot_be_run_are_one_line(capsys, argv):
    code = main(argv)
    _, err = capsys.readouterr()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("murmur: error: ") and "seeds" in err, err


def test_launch_refuses_several_seeds_with_what_to_do(capsys):
    assert main(["launch", "dsgd", "--nproc", "2", "--set", "run.seeds=[0,1]"]) == 2
    assert "run each seed as its own launch" in capsys.readouterr().err


def test_a_set_that_some_members_lack_says_so(capsys):
    assert main(["run", "default", *SETS, "--set", "algorithm.v0=2", "--check"]) == 0
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "murmur: --set algorithm.v0=2 applies to detsgrad, detsgrad-gt; "
        "dsgd, centralized have no such key"
    ]
    assert main(["run", "default", *SETS, "--set", "run.seed=3", "--check"]) == 0
    assert capsys.readouterr().err == ""


def test_one_seed_per_group_is_the_table_of_today(tmp_path):
    folders = []
    for name in ("dsgd", "detsgrad"):
        folder = tmp_path / name
        assert main(["run", name, *SETS, "--quiet", "--out", str(folder)]) == 0
        folders.append(read_run(folder).summary)
    for markdown in (False, True):
        grouped = format_results([[summary] for summary in folders], markdown)
        assert grouped == format_table(folders, markdown)
        assert "seeds" not in grouped.splitlines()[0]


def test_a_seed_folder_resumes(tmp_path):
    """A run over seeds killed in its first seed resumes there, as the run never killed."""
    settings = [*SMALL_SGD, "run.iterations=600", "run.eval_every=200"]
    settings.append("run.checkpoint_every=100")
    sets = [part for setting in settings for part in ("--set", setting)]
    out, folder = tmp_path / "killed", tmp_path / "killed" / "seed-1"
    argv = [sys.executable, "-m", "murmur", "run", "dsgd", *sets, "--seeds", "1-2"]
    kill_after_a_checkpoint([*argv, "--quiet", "--out", str(out)], folder)
    assert not (folder / "summary.json").exists()
    assert main(["run", "--resume", str(folder), "--quiet"]) == 0
    whole = tmp_path / "whole"
    sets += ["--set", "run.seed=1"]
    assert main(["run", "dsgd", *sets, "--quiet", "--out", str(whole)]) == 0
    resumed = {k: v for k, v in summary(folder).items() if k not in WALL}
    assert resumed == {k: v for k, v in summary(whole).items() if k not in WALL}
