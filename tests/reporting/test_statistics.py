"""Spreads across seeds on known numbers, and runs grouped by everything but seed."""

from __future__ import annotations

import math

import pytest
from small_runs import SMALL_SGD

from murmur.config import load_experiment
from murmur.experiment import run
from murmur.reporting.report import read_run
from murmur.reporting.seed_groups import group_runs
from murmur.reporting.statistics import spread


def test_spread_of_known_numbers():
    result = spread([93.58, 94.45, 92.82, 90.27, 93.04])
    assert result.n == 5
    assert result.mean == pytest.approx(92.832)
    assert result.sd == pytest.approx(1.56402, abs=1e-5)
    # t(0.975, 4) = 2.7764: the interval is mean +- 2.7764 sd / sqrt(5)
    half = 2.776445 * result.sd / math.sqrt(5)
    assert (result.low, result.high) == pytest.approx((92.832 - half, 92.832 + half))
    assert result.text(digits=1) == "92.8 +- 1.6"


def test_one_value_has_no_spread():
    assert spread([0.5]).sd is None and spread([0.5]).text() == "0.50"
    with pytest.raises(ValueError):
        spread([])


def test_runs_that_differ_only_in_seed_form_one_group(tmp_path):
    folders = []
    for preset, seed in (("dsgd", 1), ("detsgrad", 0), ("dsgd", 0), ("dsgd", 2)):
        config = load_experiment(preset, [*SMALL_SGD, "run.iterations=20", f"run.seed={seed}"])
        folder = tmp_path / f"{preset}-{seed}"
        run(config.runs[0][1], folder)
        folders.append(folder)
    other = load_experiment("dsgd", [*SMALL_SGD, "run.iterations=20", "algorithm.a=0.05"])
    run(other.runs[0][1], tmp_path / "other")
    groups = group_runs([read_run(folder) for folder in [*folders, tmp_path / "other"]])
    assert [(group.label, group.seeds) for group in groups] == [
        ("dsgd", [0, 1, 2]),
        ("detsgrad", [0]),
        ("dsgd", [0]),
    ]
