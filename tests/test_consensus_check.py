"""scripts/consensus_check.py: a run whose consensus distance keeps growing is
named, one that settles or swings once is not, and a missing folder is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from script_modules import load_script


@pytest.fixture
def check():
    return load_script("consensus_check")


def _run(folder: Path, distances: list[float]) -> None:
    folder.mkdir(parents=True)
    lines = [
        json.dumps({"iteration": 100 * (i + 1), "consensus_distance": d})
        for i, d in enumerate(distances)
    ]
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "summary.json").write_text('{"status": "finished"}')


def test_growth_is_named_and_a_single_swing_is_not(check, tmp_path, capsys):
    settled = [2.0] * 10 + [1.0] * 10 + [0.2] * 10
    swing = settled[:-1] + [6.0]  # one evaluation after a swing, at the very end
    growing = [0.5 * 1.1**i for i in range(30)]
    for seed in range(2):
        _run(tmp_path / "settled" / f"seed-{seed}", settled)
        _run(tmp_path / "swing" / f"seed-{seed}", swing)
        _run(tmp_path / "growing" / f"seed-{seed}", growing)
    assert check.main([str(tmp_path)]) == 1
    rows = {line.split("|")[1].strip(): line for line in capsys.readouterr().out.splitlines()}
    assert rows["settled"].endswith("| 0/2 |") and rows["swing"].endswith("| 0/2 |")
    assert rows["growing"].endswith("| 2/2 |")
    assert "| 6 |" in rows["swing"]  # the swing shows as the largest value
    assert check.main([str(tmp_path / "settled")]) == 0  # one member alone, label "."


def test_only_settled_runs_pass_and_a_missing_folder_is_refused(check, tmp_path):
    _run(tmp_path / "a" / "seed-0", [1.0] * 30)
    assert check.main([str(tmp_path)]) == 0
    assert check.main([str(tmp_path / "nowhere")]) == 2


def test_a_seed_stopped_by_a_rule_is_in_no_mean_and_is_counted(check, tmp_path, capsys):
    _run(tmp_path / "m" / "seed-0", [1.0] * 30)
    _run(tmp_path / "m" / "seed-1", [1e5] * 3)
    (tmp_path / "m" / "seed-1" / "summary.json").write_text('{"status": "diverged"}')
    assert check.main([str(tmp_path)]) == 0
    row = capsys.readouterr().out.splitlines()[-1]
    assert row == "| m | 2 | 1 | 1 | 1 | 0/1, 1 stopped by a rule |"
