"""scripts/results_tables.py's tables: the short table keeps the README's columns
in order, and the README form picks columns by name."""

from __future__ import annotations

import importlib.util
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


def test_the_readme_results_table_is_the_default_tables_short_form(results_tables):
    readme = (results_tables.ROOT / "README.md").read_text()
    start = readme.index("| name |")
    shown = readme[start:].split("\n\n")[0].strip()
    header = [cell.strip() for cell in shown.splitlines()[0].strip("|").split("|")]
    assert shown == results_tables.readme_table("default", header)
