"""The README's examples run as printed, at reduced size: its Python example, its
TOML file (examples/my-experiment.toml) and the first two commands' test form."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

from murmur.cli import main

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def test_the_python_example_runs_and_prints_what_it_says(monkeypatch, tmp_path):
    (code,) = _blocks("python")
    assert '"run.iterations=1000"' in code
    small = code.replace('"run.iterations=1000"', '"run.iterations=40", "run.eval_every=20"')
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(small, "README.md", "exec"), {})
    lines = printed.getvalue().splitlines()
    assert re.fullmatch(r"DSGD {5}0\.\d{3} mean test accuracy, \d+ messages", lines[0])
    assert re.fullmatch(r"DETSGRAD 0\.\d{3}, \d+% of DSGD's messages", lines[1])


def test_the_toml_example_is_the_file_shipped_and_runs(tmp_path):
    shipped = (ROOT / "examples" / "my-experiment.toml").read_text(encoding="utf-8").strip()
    assert shipped in [block.strip() for block in _blocks("toml")]
    out = tmp_path / "mine"
    argv = ["run", str(ROOT / "examples" / "my-experiment.toml"), "--out", str(out), "--quiet"]
    small = ["--set", "run.iterations=20", "--set", "run.eval_every=10"]
    assert main([*argv, *small]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["agents"] == 20


def test_the_readme_starts_with_the_two_commands_that_ci_runs():
    first = _blocks("sh")[0].strip().splitlines()
    assert first[0].endswith("&& .venv/bin/murmur run")
    assert first[1].endswith("&& .venv/bin/python -m pytest")
    assert README.startswith("# murmur\n\n```sh\n")
    ci = (ROOT / ".ci" / "run").read_text()
    assert ".venv/bin/python -m pytest" in ci
