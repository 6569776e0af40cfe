"""murmur tune picks the known best step of a quadratic problem."""

from __future__ import annotations

import tomllib

import pytest
from tune_problems import least_squares, settings

from murmur.cli import main
from murmur.tune import SearchSettings, plan_search, tune
from murmur.tune.space import parse_range


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def test_a_grid_over_the_step_of_one_gradient_step_on_an_identity_hessian_chooses_one(
    tmp_path, capsys
):
    # One full-batch step on a loss whose Hessian is the identity lands on the minimum
    # at a = 1 exactly, and the validation loss is (1 - a)^2 times its start
    # (tune_problems.least_squares): 0.5625, 0.25, 0, 1 and 9 times it on this grid.
    argv = ["tune", "centralized", *settings(least_squares(tmp_path))]
    argv += ["--sampler", "grid", "--range", "algorithm.a=0.25:4", "--out", "t", "--quiet"]
    assert main(argv) == 0
    tuned = tomllib.loads((tmp_path / "t" / "tuned.toml").read_text())
    (entry,) = tuned["compare"]
    assert "algorithm.a=1.0" in entry["set"]
    assert "| centralized | a = 1 |" in capsys.readouterr().out


def test_the_grid_of_a_range_is_as_many_points_evenly_spaced_on_its_log_scale(tmp_path):
    search = plan_search(
        "centralized",
        least_squares(tmp_path),
        ranges=[parse_range("algorithm.a=0.25:4")],
        settings=SearchSettings(sampler="grid", pruning=False),
    )
    (member,) = search.members
    assert member.space[0].grid() == (0.25, 0.5, 1.0, 2.0, 4.0)
    assert search.trials_of(member) == 5
    (result,) = tune(search, tmp_path / "t", progress=False)
    losses = {trial.params["a"]: trial.value for trial in result.trials}
    assert sorted(losses) == [0.25, 0.5, 1.0, 2.0, 4.0]
    start = losses[2.0]  # (1 - 2)^2 = 1 times the loss at the start
    for step, loss in losses.items():
        assert loss == pytest.approx((1 - step) ** 2 * start, rel=1e-4, abs=1e-6)
    assert result.chosen is not None and result.chosen.params == {"a": 1.0}
