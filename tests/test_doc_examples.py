"""The manual's examples run as printed, at reduced size.

- Every ```python block of a page runs, the page's blocks in order in one fresh
  interpreter (they build on each other, and the portable-numbers page must pin
  before torch computes), with the data files and arrays the text assumes and every
  experiment cut to a few iterations.
- Every ```toml block loads: a whole experiment (a comparison too) as a file, a
  fragment as settings over a preset.
- Getting started and "Training on your own data" are followed as a newcomer would:
  every command of their sh blocks, in the order the page gives them, copied and run
  (the install line aside), at reduced size, and what the page says they leave is
  checked.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from murmur.cli import main
from murmur.config import load_experiment
from murmur.data.user_files import clear_cache

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SMALL = ["run.iterations=20", "run.eval_every=10"]
"""Appended to every experiment an example loads: the examples' own settings stay,
only their length is cut."""
PRELUDE = f"""
import numpy as np
import murmur, murmur.config

_load = murmur.config.load_experiment
def _small(source, overrides=()):
    return _load(source, [*overrides, *{SMALL!r}])
murmur.load_experiment = murmur.config.load_experiment = _small

_rng = np.random.default_rng(0)
_y = np.arange(1000) % 3
_x = (_rng.normal(size=(1000, 12)) + 2.0 * np.eye(3, 12)[_y]).astype("float32")
np.save("features.npy", _x)
np.save("labels.npy", _y)
x_train, y_train, x_test, y_test = _x[:800], _y[:800], _x[800:], _y[800:]
"""
"""What the pages' text assumes exists: `features.npy` and `labels.npy` (1,000 rows of
12 features in 3 classes), the same arrays as `x_train`, ..., `y_test`."""


def _blocks(page: Path, language: str) -> list[str]:
    """The page's blocks of ``language``, each snippet line (``--8<-- "PATH"``, a file of
    the repository the manual's build puts in its place) replaced by that file."""
    blocks = re.findall(rf"```{language}\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
    return [
        re.sub(r'^--8<-- "(.+)"$', lambda m: (ROOT / m[1]).read_text(), block, flags=re.M)
        for block in blocks
    ]


PAGES = sorted(DOCS.rglob("*.md"))
PYTHON_PAGES = [page for page in PAGES if _blocks(page, "python")]


def test_the_manual_has_python_examples_on_its_guides():
    names = {page.name for page in PYTHON_PAGES}
    assert names >= {"python.md", "your-data.md", "portable-numbers.md"}
    assert sum(len(_blocks(page, "python")) for page in PYTHON_PAGES) >= 7


@pytest.mark.parametrize("page", PYTHON_PAGES, ids=[page.name for page in PYTHON_PAGES])
def test_every_python_example_of_a_page_runs(page, tmp_path):
    script = PRELUDE + "\n".join(_blocks(page, "python"))
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, f"{page.name}:\n{done.stderr[-3000:]}"
    if page.name == "python.md":
        mean, messages, sent = (float(word) for word in done.stdout.split()[:3])
        assert 0.0 <= mean <= 1.0 and 0.0 < messages <= 1.0 and 0.0 < sent <= 1.0
        assert (tmp_path / "runs" / "detsgrad-16" / "model.pt").is_file()
    if page.name == "your-data.md":
        assert "'mean':" in done.stdout and (tmp_path / "runs" / "mine").is_dir()


def _named_toml(page: Path) -> dict[str, str]:
    """The page's toml blocks that name their file in a first-line comment."""
    named = {}
    for block in _blocks(page, "toml"):
        first = re.match(r"# ([\w.-]+\.toml)", block)
        if first:
            named[first.group(1)] = block
    return named


def _settings(table: dict, prefix: str = "") -> list[str]:
    """A TOML fragment as ``section.key=value`` settings."""
    found = []
    for key, value in table.items():
        if isinstance(value, dict):
            found += _settings(value, f"{prefix}{key}.")
        else:
            found.append(f"{prefix}{key}={json.dumps(value)}")
    return found


TOML_PAGES = [page for page in PAGES if _blocks(page, "toml")]


@pytest.mark.parametrize("page", TOML_PAGES, ids=[page.name for page in TOML_PAGES])
def test_every_toml_example_of_a_page_loads(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sensors.csv").write_text(_csv(30))
    for example in (ROOT / "examples").glob("*.py"):  # the plugins a page's files name
        (tmp_path / example.name).write_text(example.read_text())
    for name, block in _named_toml(page).items():
        (tmp_path / name).write_text(block)
    for block in _blocks(page, "toml"):
        parsed = tomllib.loads(block)
        first = re.match(r"# ([\w.-]+\.toml)", block)
        if first:
            experiment = load_experiment(str(tmp_path / first.group(1)))
            assert experiment.runs
        else:
            ((_, config),) = load_experiment("dsgd", _settings(parsed)).runs
            for setting in _settings(parsed):
                section, key = setting.split("=")[0].split(".")
                assert json.dumps(getattr(getattr(config, section), key)) == setting.split("=")[1]


def _csv(rows: int) -> str:
    """A CSV of the your-data page's form: three sensor columns and a label of 3 classes."""
    rng = np.random.default_rng(1)
    lines = ["temperature,pressure,vibration,label"]
    for row in range(rows):
        label = row % 3
        cells = rng.normal(size=3) + 2.0 * np.eye(3)[label]
        lines.append(",".join(f"{value:.4f}" for value in cells) + f",{label}")
    return "\n".join(lines) + "\n"


def _commands(page: Path) -> list[list[str]]:
    """Every ``murmur`` command of the page's sh blocks, in order, as argv after it."""
    found = []
    for block in _blocks(page, "sh"):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words and words[0].removeprefix(".venv/bin/") == "murmur":
                found.append(words[1:])
    return found


def _run_as_shown(argv: list[str]) -> int:
    """One command of a page, cut to a few iterations where it trains."""
    trains = argv[0] == "run" and "--check" not in argv
    small = [word for setting in SMALL for word in ("--set", setting)] if trains else []
    clear_cache()
    return main([*argv, *small, *(["--quiet"] if trains else [])])


def test_getting_started_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    commands = _commands(DOCS / "getting-started.md")
    assert [argv[0] for argv in commands] == ["run", "report"]
    for argv in commands:
        assert main([*argv, *(["--quiet"] if argv[0] == "run" else [])]) == 0, argv
    first = tmp_path / "runs" / "first"
    for name in ("config.toml", "metrics.jsonl", "summary.json", "model.pt", "agents.pt"):
        assert (first / name).is_file(), name
    summary = json.loads((first / "summary.json").read_text())
    assert summary["iterations"] == 200 and summary["agents"] == 10
    assert "test accuracy" in (first / "report.md").read_text().lower()


def test_a_newcomer_trains_on_a_csv_and_compares_detsgrad_with_dsgd_over_five_seeds(
    tmp_path, monkeypatch, capsys
):
    """docs/guides/your-data.md, followed in its order: the CSV, mine.toml and
    mine-compare.toml as printed, then every command of its sh blocks."""
    monkeypatch.chdir(tmp_path)
    page = DOCS / "guides" / "your-data.md"
    (tmp_path / "sensors.csv").write_text(_csv(300))
    files = _named_toml(page)
    assert set(files) == {"mine.toml", "mine-compare.toml"}
    for name, block in files.items():
        (tmp_path / name).write_text(block)
    commands = _commands(page)
    assert [argv[:2] for argv in commands] == [
        ["datasets", "--file"],
        ["run", "mine.toml"],
        ["run", "mine.toml"],
        ["run", "dsgd"],
        ["run", "mine-compare.toml"],
        ["run", "mine-compare.toml"],
        ["report", "runs/compare"],
    ]
    for argv in commands:
        assert _run_as_shown(argv) == 0, argv
    assert "sensors.csv: 240 training and 60 test samples" in capsys.readouterr().out
    compare = tmp_path / "runs" / "compare"
    for label in ("dsgd", "detsgrad"):
        seeds = sorted(path.name for path in (compare / label).iterdir() if path.is_dir())
        assert seeds == [f"seed-{seed}" for seed in range(5)]
    report = (compare / "report.md").read_text()
    header = next(line for line in report.splitlines() if line.startswith("| name"))
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    row = next(line for line in report.splitlines() if line.startswith("| detsgrad |"))
    shown = dict(zip(columns, (cell.strip() for cell in row.strip("|").split("|")), strict=True))
    assert shown["seeds"] == "5"
    assert 0.0 < float(shown["messages vs DSGD %"].split()[0]) <= 100.0
