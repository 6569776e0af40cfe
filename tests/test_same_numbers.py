"""scripts/same_numbers.py: two folders of the same runs match but for the clock; a
changed number, a missing file or a missing folder is named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from script_modules import load_script


@pytest.fixture
def same():
    return load_script("same_numbers")


def _run(folder: Path, accuracy: float, wall: float) -> None:
    folder.mkdir(parents=True)
    summary = {
        "accuracy": accuracy,
        "wall_seconds": wall,
        "virtual_seconds": 3.0,
        "run_dir": str(folder),
        "steps": {"b": 0.5},
    }
    (folder / "summary.json").write_text(json.dumps(summary))
    lines = [
        {"iteration": i, "accuracy_mean": accuracy, "wall_seconds": wall * i} for i in range(3)
    ]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def test_the_clock_differs_and_the_numbers_do_not(same, tmp_path, capsys):
    _run(tmp_path / "a" / "dsgd" / "seed-0", 0.9, wall=1.0)
    _run(tmp_path / "b" / "dsgd" / "seed-0", 0.9, wall=7.0)
    assert same.main([str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    assert capsys.readouterr().out == "same_numbers: 0 differences\n"


def test_a_changed_number_and_a_missing_run_are_named(same, tmp_path, capsys):
    _run(tmp_path / "a" / "dsgd" / "seed-0", 0.9, wall=1.0)
    _run(tmp_path / "a" / "dsgd" / "seed-1", 0.9, wall=1.0)
    _run(tmp_path / "b" / "dsgd" / "seed-0", 0.9000001, wall=1.0)
    assert same.main([str(tmp_path / "a"), str(tmp_path / "b")]) == 1
    out = capsys.readouterr().out
    assert "dsgd/seed-0/summary.json[0].accuracy: 0.9 != 0.9000001" in out
    assert "dsgd/seed-0/metrics.jsonl[2].accuracy_mean" in out
    assert "dsgd/seed-1/metrics.jsonl: only in" in out
    assert same.main([str(tmp_path / "a"), str(tmp_path / "nowhere")]) == 2
