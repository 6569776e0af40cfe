"""An interrupted tune resumes: finished trials are kept, only the budget left runs,
and a trial cut short runs again at its point."""

from __future__ import annotations

import optuna
import pytest
from tune_problems import SMALL, settings

import murmur.tune.objective
from murmur.cli import main
from murmur.tune import DATABASE
from murmur.tune.study import open_storage, state_of

TUNE = ["tune", "dsgd", *settings(SMALL), "--seeds", "0", "--out", "t", "--quiet"]


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def runs(monkeypatch):
    """The configs of the runs trials make, in order; ``runs.interrupt_at`` (a count)
    makes that run end as a Ctrl-C would."""
    made = []
    train = murmur.tune.objective.train

    def counting(config, on_record):
        made.append(config)
        if len(made) == getattr(counting, "interrupt_at", None):
            raise KeyboardInterrupt
        return train(config, on_record)

    monkeypatch.setattr(murmur.tune.objective, "train", counting)
    counting.made = made
    return counting


def _trials(tmp_path):
    study = optuna.load_study(study_name="dsgd", storage=open_storage(tmp_path / "t"))
    return study.get_trials()


def test_a_larger_budget_on_the_same_folder_runs_only_the_trials_left(tmp_path, runs):
    assert main([*TUNE, "--trials", "2"]) == 0
    first = _trials(tmp_path)
    assert len(first) == 2 and len(runs.made) == 2
    assert main([*TUNE, "--trials", "4"]) == 0
    trials = _trials(tmp_path)
    assert len(trials) == 4 and len(runs.made) == 4
    for before, after in zip(first, trials[:2], strict=True):
        assert (after.params, after.value, after.state) == (
            before.params,
            before.value,
            before.state,
        )
    new_points = {trial.params["a"] for trial in trials[2:]}
    assert not new_points & {trial.params["a"] for trial in first}
    assert main([*TUNE, "--trials", "4"]) == 0  # the budget is spent: nothing runs
    assert len(runs.made) == 4 and len(_trials(tmp_path)) == 4


def test_a_trial_an_interrupt_cut_short_runs_again_at_its_point_and_uses_no_budget(
    tmp_path, runs, capsys
):
    runs.interrupt_at = 2
    assert main([*TUNE, "--trials", "3"]) == 130
    assert "the same command resumes the tune in t" in capsys.readouterr().err
    cut = _trials(tmp_path)
    assert [state_of(trial) for trial in cut] == ["complete", "interrupted"]
    runs.interrupt_at = None
    assert main([*TUNE, "--trials", "3"]) == 0
    trials = _trials(tmp_path)
    states = [state_of(trial) for trial in trials]
    assert states == ["complete", "interrupted", "complete", "complete"]
    assert trials[2].params == cut[1].params
    assert len(runs.made) == 2 + 2


def test_a_trial_a_kill_left_running_is_failed_and_run_again(tmp_path, runs):
    assert main([*TUNE, "--trials", "1"]) == 0
    study = optuna.load_study(study_name="dsgd", storage=open_storage(tmp_path / "t"))
    killed = study.ask({"a": optuna.distributions.FloatDistribution(0.01, 1.0, log=True)})
    assert main([*TUNE, "--trials", "2"]) == 0
    trials = _trials(tmp_path)
    assert [state_of(trial) for trial in trials] == ["complete", "interrupted", "complete"]
    assert trials[2].params == {"a": killed.params["a"]}


def test_other_settings_in_the_same_folder_are_refused_and_change_nothing(tmp_path, capsys):
    assert main([*TUNE, "--trials", "1"]) == 0
    capsys.readouterr()
    stamp = (tmp_path / "t" / DATABASE).stat().st_mtime_ns
    for other in (["--seeds", "0-1"], ["--set", "algorithm.b=0.3"], ["--sampler", "grid"]):
        assert main([*TUNE, "--trials", "2", *other]) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and "holds a tune of dsgd with other" in err[0], err
    assert (tmp_path / "t" / DATABASE).stat().st_mtime_ns == stamp
    assert len(_trials(tmp_path)) == 1


def test_a_new_tpe_study_starts_at_the_members_own_steps(tmp_path, runs):
    assert main([*TUNE, "--set", "algorithm.a=0.07", "--trials", "2"]) == 0
    first, second = _trials(tmp_path)
    assert first.params == {"a": 0.07}  # the preset's step, as set, is tried first
    assert second.params["a"] != 0.07
    assert runs.made[0].algorithm.a == 0.07
