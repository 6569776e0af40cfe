"""A trial whose run a rule stopped, or whose run failed, scores nothing: it is pruned
or failed, and never the chosen point; trials that fall behind are pruned."""

from __future__ import annotations

import dataclasses

import pytest
from tune_problems import SMALL, least_squares

import murmur.tune.objective
from murmur.tune import SearchSettings, plan_search, tune
from murmur.tune.objective import Objective, Stopped, score_point
from murmur.tune.space import parse_range
from murmur.tune.study import state_of


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def test_a_collapsed_run_is_pruned_and_never_chosen_whatever_its_figures(tmp_path, monkeypatch):
    train = murmur.tune.objective.train
    collapsing = 0.2

    def collapsed_at_its_best(config, on_record):
        result = train(config, on_record)
        if config.algorithm.a != collapsing:
            return result
        best = {"k": 4, "mean": 1.0, "min": 1.0, "max": 1.0}  # better than any other
        return dataclasses.replace(
            result,
            status="collapsed",
            stopped={"rule": "chance", "iteration": 30, "reason": "at chance"},
            extra={**result.extra, "validation_last_k": best},
        )

    monkeypatch.setattr(murmur.tune.objective, "train", collapsed_at_its_best)
    search = plan_search(
        "dsgd",
        SMALL,
        ranges=[parse_range("algorithm.a=0.05:0.8")],
        settings=SearchSettings(sampler="grid", pruning=False),
    )
    (result,) = tune(search, tmp_path / "t", progress=False)
    by_step = {trial.params["a"]: trial for trial in result.trials}
    assert sorted(by_step) == [0.05, 0.1, 0.2, 0.4, 0.8]
    stopped = by_step[collapsing]
    assert state_of(stopped) == "pruned" and stopped.user_attrs["rule"] == "chance"
    assert "collapsed at iteration 30 (chance)" in stopped.user_attrs["stopped"]
    assert result.chosen is not None and result.chosen.params["a"] != collapsing
    assert result.count("complete") == 4
    tuned = (tmp_path / "t" / "tuned.toml").read_text()
    assert f'"algorithm.a={result.chosen.params["a"]}"' in tuned


@pytest.mark.parametrize(
    ("settings", "state"), [([], "pruned"), (["collapse.enabled=false"], "failed")]
)
def test_a_step_whose_loss_is_no_longer_a_number_scores_nothing(tmp_path, settings, state):
    # 0.5, 1.88e5, 7.07e10, 2.66e16, 1e20: the last step's loss overflows float32
    search = plan_search(
        "centralized",
        [*least_squares(tmp_path), *settings],
        ranges=[parse_range("algorithm.a=0.5:1e20")],
        settings=SearchSettings(sampler="grid", pruning=False),
    )
    (result,) = tune(search, tmp_path / "t", progress=False)
    largest = max(result.trials, key=lambda trial: trial.params["a"])
    assert state_of(largest) == state
    if state == "pruned":
        assert largest.user_attrs["rule"] == "non-finite"
    else:
        assert "no longer finite" in largest.user_attrs["failure"]
    assert result.count("complete") == 4
    assert result.chosen is not None and result.chosen.params["a"] == 0.5


def test_a_trial_that_falls_behind_stops_at_that_evaluation(tmp_path):
    seen = []

    def behind_from_iteration_20(step, value):
        seen.append(step)
        return step >= 20

    config = plan_search("dsgd", SMALL).members[0].config
    with pytest.raises(Stopped, match="seed 3 fell behind the other trials at iteration 20"):
        score_point(config, [3], Objective("classification"), behind_from_iteration_20)
    assert seen == [0, 10, 20]


def test_each_seed_reports_at_steps_of_its_own():
    config = plan_search("dsgd", SMALL).members[0].config
    steps = []

    def keep(step, value):
        steps.append((step, value))
        return False

    scores = score_point(config, [0, 1], Objective("classification"), keep)
    assert [step for step, _ in steps] == [0, 10, 20, 30, 40, 41, 51, 61, 71, 81]
    assert len(scores) == 2 and all(0 <= seed.score <= 1 for seed in scores)
    # DSGD sends every agent's model to each neighbour at every step: the full exchange.
    assert [seed.bytes_vs_dsgd for seed in scores] == [1.0, 1.0]
    assert all(0 <= value <= 1 for _, value in steps)
