"""scripts/results_tables.py's tables: the short table keeps the README's columns
in order, and the README form picks columns by name; a tuned table runs its tune, then
its tuned file, and its page says how the steps were chosen."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "results_tables.py"
FULL = "\n".join(
    [
        "| name | algorithm | seeds | final acc mean % | 95 % CI | final acc min % "
        "| messages | bytes vs DSGD % |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
        "| dsgd | dsgd | 5 | 93.97 ± 0.72 | [93.08, 94.87] | 92.44 ± 1.28 | 60000 ± 0 "
        "| 100.00 ± 0.00 |",
        "| beer | beer | 5 | 85.72 ± 0.44 | [85.17, 86.27] | 81.60 ± 1.47 | 120000 ± 0 "
        "| 4.00 ± 0.00 |",
        "",
        "Each seed:",
        "",
        "| name | seed |",
        "",
    ]
)


@pytest.fixture
def results_tables(monkeypatch):
    spec = importlib.util.spec_from_file_location("results_tables", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "results_tables", module)  # its dataclasses look it up
    spec.loader.exec_module(module)
    return module


def test_the_short_table_keeps_the_readme_columns_of_the_first_table(results_tables):
    lines = results_tables.short(FULL).splitlines()
    assert lines[0] == "| name | seeds | mean acc % | worst agent % | messages | bytes vs DSGD % |"
    assert lines[3] == "| beer | 5 | 85.72 ± 0.44 | 81.60 ± 1.47 | 120000 ± 0 | 4.00 ± 0.00 |"
    assert len(lines) == 4  # the per-seed table is not read


def test_the_short_table_keeps_the_stopped_column(results_tables):
    full = FULL.replace("| 95 % CI |", "| 95 % CI | stopped |", 1)
    full = full.replace("|---:|---:|---:|", "|---:|---:|---|---:|", 1)
    full = full.replace(
        " | [93.08, 94.87] |",
        " | [93.08, 94.87] | 2 of 5 seeds collapsed (chance, at 400 and 500) |",
    )
    full = full.replace(" | [85.17, 86.27] |", " | [85.17, 86.27] | - |")
    lines = results_tables.short(full).splitlines()
    assert lines[0].startswith("| name | seeds | mean acc % | stopped | worst agent % |")
    assert "| 2 of 5 seeds collapsed (chance, at 400 and 500) |" in lines[2]


def test_the_readme_form_picks_columns_by_name_and_refuses_unknown_ones(
    results_tables, tmp_path, monkeypatch
):
    monkeypatch.setattr(results_tables, "RESULTS", tmp_path)
    (tmp_path / "x.md").write_text(f"Title.\n\n{results_tables.short(FULL)}\nEvery figure:\n")
    table = results_tables.readme_table("x", ["name", "mean acc %"]).splitlines()
    assert table == [
        "| name | mean acc % |",
        "|---|---|",
        "| dsgd | 93.97 +- 0.72 |",
        "| beer | 85.72 +- 0.44 |",
    ]
    with pytest.raises(SystemExit, match="no column"):
        results_tables.readme_table("x", ["speed"])


def test_a_table_with_plots_draws_them_from_its_seeds_and_shows_them(
    results_tables, tmp_path, monkeypatch
):
    """The accuracy-against-bytes plot of a two-member, two-seed comparison is drawn
    into the results folder and linked under the short table."""
    from small_runs import SMALL_SGD

    from murmur.cli import main

    preset = tmp_path / "pair.toml"
    preset.write_text('description = "two"\ncompare = ["dsgd", "choco-sgd"]\n')
    settings = [*SMALL_SGD, "run.iterations=20", "run.eval_every=10"]
    table = results_tables.Table(
        "pair", str(preset), tuple(settings), "Two", ("accuracy_vs_bytes",)
    )
    argv = ["run", str(preset), *(f"--set={item}" for item in settings)]
    assert main([*argv, "--seeds", "0-1", "--quiet", "--out", str(tmp_path / "runs" / "pair")]) == 0
    monkeypatch.setattr(results_tables, "RESULTS", tmp_path / "results")
    written = results_tables.make(table, "0-1", tmp_path / "runs", run=False)
    plot = tmp_path / "results" / "pair-accuracy_vs_bytes.png"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = written.read_text()
    assert "![accuracy vs bytes](pair-accuracy_vs_bytes.png)" in text
    assert text.index("| choco-sgd |") < text.index("![accuracy") < text.index("Every figure")


def _marked(results_tables):
    """(page, names, the table shown) of every marked table of the README and manual."""
    found = []
    for page in results_tables.marked_pages():
        for match in results_tables.MARKED.finditer(page.read_text(encoding="utf-8")):
            found.append((page, match.group(1).split(), match.group(2).strip()))
    return found


def test_every_marked_table_of_the_readme_and_manual_is_the_scripts(results_tables):
    """What --embed writes is what the pages show: no figure typed by hand."""
    marked = _marked(results_tables)
    names = {name for _, found, _ in marked for name in found}
    assert len(marked) >= 15
    assert names >= {"default", "talk-less", "faults-drop", "asysg-speedup", "ssfn-vowel"}
    assert "README.md" in {page.name for page, _, _ in marked}
    for page, found, shown in marked:
        header = [cell.strip() for cell in shown.splitlines()[0].strip("|").split("|")]
        assert shown == results_tables.marked_table(found, header), page


def test_a_page_that_quotes_the_results_marks_each_table_of_figures(results_tables):
    """On a page that names the script, a table of mean +- sd cells follows a marker."""
    for page in results_tables.marked_pages():
        text = page.read_text(encoding="utf-8")
        if "results_tables.py" not in text or page.parent == results_tables.RESULTS:
            continue
        for block in re.split(r"\n\n", text):
            table = [line for line in block.splitlines() if line.startswith("|")]
            if any(re.search(r"\d \+- \d", line) for line in table):
                assert "<!-- results-table:" in block, f"{page.name}: {table[0]}"


def test_embedding_remakes_a_marked_table_with_its_own_columns(
    results_tables, tmp_path, monkeypatch
):
    monkeypatch.setattr(results_tables, "RESULTS", tmp_path)
    every = FULL.split("\n\nEach seed")[0]
    for name in ("x", "y"):
        (tmp_path / f"{name}.md").write_text(
            f"Title.\n\n{results_tables.short(FULL)}\nEvery figure:\n\n{every}\n"
        )
    page = (
        "Before.\n\n<!-- results-table: x y -->\n| name | 95 % CI |\n|---|---|\n| old |\n\nAfter.\n"
    )
    remade = results_tables.embedded(page)
    assert remade == (
        "Before.\n\n<!-- results-table: x y -->\n| name | 95 % CI |\n|---|---|\n"
        "| dsgd | [93.08, 94.87] |\n| beer | [85.17, 86.27] |\n"
        "| dsgd | [93.08, 94.87] |\n| beer | [85.17, 86.27] |\n\nAfter.\n"
    )
    assert results_tables.embedded(remade) == remade


TUNED_PAGES = {
    "cnn",
    "talk-less",
    "talk-less-bytes",
    "talk-less-bytes-iid",
    "talk-less-bytes-letter",
    "talk-less-digits",
    "talk-less-iid",
    "talk-less-letter",
}


@pytest.fixture
def tuned_pair(results_tables, tmp_path, monkeypatch):
    """A tuned table of DSGD and centralized SGD on blobs (2 trials of 40 iterations per
    member), its results going to tmp_path/results, and the list of murmur commands the
    script runs (each one is run)."""
    from small_runs import SMALL_SGD

    preset = tmp_path / "pair.toml"
    preset.write_text('description = "two"\ncompare = ["dsgd", "centralized"]\n')
    settings = (*SMALL_SGD, "run.iterations=40", "run.eval_every=10")
    tuning = results_tables.Tuning(trials=2, minutes_per_run=0.1, seeds="0")
    table = results_tables.Table("pair", str(preset), settings, "Two", tuning=tuning)
    monkeypatch.setattr(results_tables, "RESULTS", tmp_path / "results")
    calls = []
    run_murmur = results_tables.murmur

    def recorded(argv):
        calls.append(argv)
        return run_murmur(argv)

    monkeypatch.setattr(results_tables, "murmur", recorded)
    return table, calls


def test_a_tuned_table_tunes_then_runs_the_tuned_file_and_says_how(
    results_tables, tuned_pair, tmp_path
):
    from murmur.config import load_experiment

    table, calls = tuned_pair
    out = tmp_path / "runs"
    written = results_tables.make(table, "0-1", out)
    tuned = out / "pair-tune" / "tuned.toml"
    assert [argv[:3] for argv in calls] == [
        ["murmur", "tune", table.preset],
        ["murmur", "run", str(tuned)],
    ]
    tune = " ".join(calls[0])
    assert "--seeds 0 --trials 2 --sampler tpe" in tune
    assert "--set run.portable=true" in tune and "--set run.iterations=40" in tune
    assert "--portable" in calls[1] and calls[1][calls[1].index("--seeds") + 1] == "0-1"
    assert all(config.run.portable for _, config in load_experiment(str(tuned)).runs)

    text = written.read_text()
    note = text.split("\n\n")[1]
    assert note.startswith("Steps tuned on held-out data")
    for words in ("data.validation = 0.1", "sampler tpe", "2 trials per member"):
        assert words in note
    assert "40 iterations per seed (0)" in note
    for member in ("dsgd", "centralized"):
        assert re.search(rf"\n- {member}: a = [\d.]+ \(validation [\d.]+ %\)", text), member
    assert "[pair-tuning.md](pair-tuning.md)" in text
    report = (tmp_path / "results" / "pair-tuning.md").read_text()
    assert "| dsgd |" in report and "![" not in report
    assert results_tables.readme_table("pair", ["name"]).splitlines()[2:] == [
        "| dsgd |",
        "| centralized |",
    ]
    assert "Made by `murmur tune " in text and ", then `murmur run runs/results/pair-tune/" in text


def test_a_finished_tune_is_not_run_again_but_a_larger_budget_resumes_it(
    results_tables, tuned_pair, tmp_path, monkeypatch
):
    table, calls = tuned_pair
    out = tmp_path / "runs"
    results_tables.make(table, "0-1", out)
    page = results_tables.RESULTS / "pair.md"
    written = page.read_text()
    calls.clear()
    page.write_text("kept")
    with pytest.raises(SystemExit, match="--fill trains only its missing runs"):
        results_tables.make(table, "0-1", out)  # the run's folder is there: murmur refuses
    assert [argv[1] for argv in calls] == ["run"]  # the finished tune is not run again
    assert page.read_text() == "kept"  # a failed run leaves the page as it was
    page.write_text(written)

    calls.clear()
    monkeypatch.setattr(results_tables, "TABLES", (table,))
    monkeypatch.setattr(results_tables, "embed", list)
    argv = ["--only", "pair", "--fill", "--seeds", "0-1", "--out", str(out)]
    assert results_tables.main(argv) == 0
    assert calls == []  # the tune finished and every run is there

    more = dataclasses.replace(table, tuning=dataclasses.replace(table.tuning, trials=3))
    monkeypatch.setattr(results_tables, "murmur", lambda argv: calls.append(argv) or 0)
    assert results_tables.tune(more, out)
    assert calls[0][calls[0].index("--trials") + 1] == "3"


def test_what_only_the_tune_sets_is_set_back_for_the_page(results_tables, tmp_path):
    tuning = results_tables.Tuning(
        trials=3,
        minutes_per_run=2.0,
        settings=("run.iterations=1500", "collapse.warmup=0.5", "model.name=cnn"),
    )
    table = results_tables.Table("x", "default", ("model.name=cnn",), "X", tuning=tuning)
    assert results_tables.page_settings(table) == (
        "model.name=cnn",
        "run.iterations=3000",
        "collapse.warmup=0.2",
    )
    tune = " ".join(results_tables.tune_command(table, tmp_path))
    assert "--set model.name=cnn --set run.iterations=1500 --set collapse.warmup=0.5" in tune
    # 4 members x 3 trials x 2 seeds at half the page's iterations, 4 x 5 runs of the page
    assert results_tables.estimate(table, "0-4") == (
        "about 1 h 4 min on one core: the tune at most 24 min (4 members x 3 trials x 2 "
        "seeds = 24 runs of 1500 iterations), the page 40 min (20 runs), at 2 min a run of "
        "3000 iterations"
    )


def test_the_pages_remade_with_tuned_steps_tune_at_their_own_length(results_tables, capsys):
    """Each tuned page's tune is one that murmur tune accepts, at the page's iterations;
    --list prints it, the page's run of its tuned file and the time both take."""
    from murmur.cli import build_parser
    from murmur.config import parse_seeds
    from murmur.tune import SearchSettings, plan_search

    tuned = [table for table in results_tables.TABLES if table.tuning is not None]
    assert {table.name for table in tuned} == TUNED_PAGES
    for table in tuned:
        assert not any(s.startswith("run.iterations") for s in table.tuning.settings)
        args = build_parser().parse_args(results_tables.tune_command(table, Path("r"))[1:])
        assert args.overrides[-1] == "run.portable=true"
        search = plan_search(
            args.target,
            args.overrides[:-1],  # this process computed before: it cannot pin its kernels
            seeds=parse_seeds(args.seeds),
            settings=SearchSettings(sampler=args.sampler, trials=args.trials),
        )
        assert {member.config.run.iterations for member in search.members} == {3000}
    assert results_tables.main(["--list", "--only", "cnn"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("cnn: murmur tune default --set model.name=cnn ")
    assert lines[1].startswith("cnn: murmur run runs/results/cnn-tune/tuned.toml ")
    assert lines[2].startswith("cnn: about ")


def test_the_budgets_the_results_overview_shows_are_the_scripts(results_tables):
    from murmur.config import load_experiment, parse_seeds

    text = (results_tables.RESULTS / "index.md").read_text(encoding="utf-8")
    shown = "| page | members |" + text.partition("| page | members |")[2].split("\n\n")[0]
    rows = {row[0]: row for row in results_tables._table(shown)[1]}
    assert set(rows) == TUNED_PAGES
    for table in results_tables.TABLES:
        if table.tuning is None:
            continue
        members = len(load_experiment(table.preset, list(table.settings)).runs)
        seeds = parse_seeds(table.tuning.seeds)
        hours = results_tables.estimate(table, "0-4").removeprefix("about ").split(" on one")[0]
        assert rows[table.name][:6] == [
            table.name,
            str(members),
            str(table.tuning.trials),
            ", ".join(map(str, seeds)),
            str(members * table.tuning.trials * len(seeds)),
            hours,
        ]
