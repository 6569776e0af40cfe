"""tuned.toml is a comparison that murmur run runs, each member at its chosen steps and
on the data split it was tuned on; tuning.md reports every trial."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from tune_problems import SMALL, settings

from murmur.cli import main
from murmur.config import load_experiment
from murmur.tune import SearchSettings, plan_search, tune, tuned_config
from murmur.tune.tuned_file import differences

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def test_murmur_run_runs_the_tuned_file_with_each_member_at_its_chosen_steps(tmp_path):
    search = plan_search("default", SMALL, settings=SearchSettings(trials=2))
    results = tune(search, tmp_path / "t", progress=False)
    assert [result.member.label for result in results] == [
        "detsgrad",
        "dsgd",
        "detsgrad-gt",
        "centralized",
    ]
    assert (
        main(["run", "t/tuned.toml", *settings(["run.iterations=4"]), "--out", "r", "--quiet"]) == 0
    )
    for result in results:
        assert result.chosen is not None
        saved = tomllib.loads((tmp_path / "r" / result.member.label / "config.toml").read_text())
        for key, value in result.chosen.params.items():
            assert saved["algorithm"][key] == value
        assert saved["data"]["validation"] == 0.1
        assert saved["run"]["iterations"] == 4
    tuned = load_experiment("t/tuned.toml").runs
    assert [config for _, config in tuned] == [tuned_config(result) for result in results]


def test_the_tuned_file_says_what_was_searched_and_what_chose_each_point(tmp_path):
    search = plan_search("detsgrad", SMALL, seeds=(0, 1), settings=SearchSettings(trials=3))
    (result,) = tune(search, tmp_path / "t", progress=False)
    text = (tmp_path / "t" / "tuned.toml").read_text()
    assert result.chosen is not None
    comments = [line for line in text.splitlines() if line.startswith("#")]
    shown = "\n".join(comments)
    assert "sampler: tpe (seed 0), pruning: median, seeds: 0, 1" in shown
    assert "algorithm.a log-uniform in [0.01, 1]; algorithm.v0 log-uniform in [0.5, 50]" in shown
    assert "validation split data.validation = 0.1" in shown
    assert f"(trial {result.chosen.number}), validation" in shown
    entry = tomllib.loads(text)["compare"][0]
    assert entry["preset"] == "detsgrad" and entry["label"] == "detsgrad"
    report = (tmp_path / "t" / "tuning.md").read_text()
    rows = [line for line in report.splitlines() if re.match(r"\| \d+ \| ", line)]
    assert len(rows) == 3
    assert "(chosen)" in report
    for key in ("a", "v0"):
        assert f"](detsgrad-{key}.png)" in report
        assert (tmp_path / "t" / f"detsgrad-{key}.png").read_bytes()[:8] == PNG_MAGIC


def test_a_file_target_is_named_by_its_absolute_path(tmp_path):
    (tmp_path / "mine.toml").write_text('extends = "dsgd"\n\n[run]\niterations = 40\n')
    search = plan_search("mine.toml", SMALL[:-2], settings=SearchSettings(trials=1))
    (result,) = tune(search, tmp_path / "t", progress=False)
    entry = tomllib.loads((tmp_path / "t" / "tuned.toml").read_text())["compare"][0]
    assert entry["preset"] == str(tmp_path / "mine.toml")
    assert load_experiment("t/tuned.toml").runs[0][1] == tuned_config(result)


def test_the_settings_are_the_keys_that_differ_from_the_preset():
    base = load_experiment("dsgd").runs[0][1]
    changed = load_experiment("dsgd", ["algorithm.a=0.05", "model.hidden=[8, 4]"]).runs[0][1]
    assert differences(base, changed) == ["model.hidden=[8, 4]", "algorithm.a=0.05"]
    assert differences(base, base) == []


def test_a_plugins_algorithm_is_tuned_and_its_tuned_file_runs_in_a_new_process(tmp_path):
    """The plugin is the tuned file's own top-level ``plugins``: a fresh ``murmur run``
    of it imports the plugin before it reads the member."""
    example = Path(__file__).resolve().parents[2] / "examples" / "periodic_gossip.py"
    argv = ["tune", "dsgd", *settings([*SMALL, "algorithm.name=periodic-gossip"])]
    assert main([*argv, "--plugin", str(example), "--trials", "2", "--out", "t", "--quiet"]) == 0
    tuned = tomllib.loads((tmp_path / "t" / "tuned.toml").read_text())
    assert tuned["plugins"] == [str(example)]
    assert not any("plugins" in setting for setting in tuned["compare"][0]["set"])
    command = [sys.executable, "-m", "murmur", "run", "t/tuned.toml", "--out", "r", "--quiet"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr
    (config,) = (tmp_path / "r").rglob("config.toml")
    assert tomllib.loads(config.read_text())["run"]["plugins"] == [str(example)]
