"""scripts/results_tables.py's tables: the short table keeps the README's columns
in order, and the README form picks columns by name."""

from __future__ import annotations

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
