"""No reference in the code, docs or reports to a file that does not exist: every
``docs/...``, ``scripts/...`` and ``benchmarks/...`` path written in src/, tests/,
docs/, scripts/, benchmarks/ and the README, and every relative markdown link in the
docs, names a file of the repository; and `murmur reproduce --help` names every paper
it runs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("src", "tests", "docs", "scripts", "benchmarks")
PATH = re.compile(r"(?<![\w./-])((?:docs|scripts|benchmarks)/[\w./-]+\.(?:md|png|py|sh|toml))")
PLACEHOLDERS = ("NAME", "PLOT", "DATASET", "PRESET")
"""Words that stand for a name in a pattern (``docs/results/NAME.md``), not a file."""
LINK = re.compile(r"\]\(([^)#\s]+)\)")
"""A markdown link's target, without an anchor."""


def _texts() -> list[Path]:
    files = [ROOT / "README.md"]
    for folder in SOURCES:
        files += [
            path
            for path in (ROOT / folder).rglob("*")
            if path.suffix in {".py", ".md", ".toml", ".sh"} and "egg-info" not in str(path)
        ]
    return [path for path in files if path != Path(__file__).resolve()]


def test_every_path_named_in_the_code_and_docs_exists():
    missing = []
    for path in _texts():
        for name in PATH.findall(path.read_text(encoding="utf-8")):
            if any(word in name for word in PLACEHOLDERS):
                continue
            if not (ROOT / name.rstrip(".")).exists():
                missing.append(f"{path.relative_to(ROOT)}: {name}")
    assert not missing, missing


def test_every_relative_markdown_link_in_the_docs_exists():
    missing = []
    for path in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]:
        for target in LINK.findall(path.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (path.parent / target).exists():
                missing.append(f"{path.relative_to(ROOT)}: {target}")
    assert not missing, missing


def test_the_check_sees_a_missing_file(tmp_path):
    text = "see docs/ALGORITHMS.md and docs/methods/detsgrad.md"
    assert [name for name in PATH.findall(text) if not (ROOT / name).exists()] == [
        "docs/ALGORITHMS.md"
    ]


def test_reproduce_help_names_every_paper(capsys):
    import pytest

    from murmur.cli import REPRODUCIBLE, main
    from murmur.reproduce import PAPERS

    assert tuple(PAPERS) == REPRODUCIBLE
    with pytest.raises(SystemExit):
        main(["reproduce", "--help"])
    assert "detsgrad, asysg, dssfn" in capsys.readouterr().out
