"""--max-bytes-vs-dsgd: no tuned point sends more than the limit, and the own-steps
trial runs the member's own steps, "auto" resolved."""

from __future__ import annotations

import pytest
from tune_problems import SMALL, settings

from murmur.cli import main
from murmur.training.setup import prepare
from murmur.tune import SearchSettings, plan_search, tune
from murmur.tune.bytes_limit import BYTES, OWN_TRIAL, parse_bytes_limit
from murmur.tune.space import parse_range
from murmur.tune.study import own_bytes, within_limit


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def _complete(result):
    return [trial for trial in result.trials if trial.state.name == "COMPLETE"]


def test_a_limit_keeps_the_tune_off_the_more_accurate_points_that_send_more(tmp_path):
    # DETSGRAD on small blobs, a grid of a and v0: the points of a small v0 send at
    # most steps and score best; at 60 % of DSGD's bytes they are out.
    search = plan_search(
        "detsgrad",
        SMALL,
        seeds=(0,),
        ranges=[parse_range("algorithm.v0=0.5:50")],
        settings=SearchSettings(sampler="grid", max_bytes=parse_bytes_limit("60%")),
    )
    (result,) = tune(search, tmp_path / "t", progress=False)
    complete = _complete(result)
    assert result.chosen is not None and result.chosen.user_attrs[BYTES] <= 0.6
    over = [trial for trial in complete if trial.user_attrs[BYTES] > 0.6]
    assert over and not any(within_limit(trial) for trial in over)
    assert all(within_limit(trial) for trial in complete if trial not in over)
    best = max(complete, key=lambda trial: trial.value)
    assert best in over and best.value > result.chosen.value
    report = (tmp_path / "t" / "tuning.md").read_text()
    assert "at most 60 % of DSGD's bytes" in report
    assert "complete, over the bytes limit (60.00 % of DSGD's)" in report
    assert (
        "bytes limit: at most 60 % of DSGD's bytes" in (tmp_path / "t" / "tuned.toml").read_text()
    )


def test_own_holds_each_trial_to_what_the_members_own_steps_send(tmp_path):
    search = plan_search(
        "detsgrad", SMALL, seeds=(0,), settings=SearchSettings(trials=6, max_bytes="own")
    )
    (result,) = tune(search, tmp_path / "t", progress=False)
    first = result.trials[0]
    algorithm = search.members[0].config.algorithm
    assert first.user_attrs[OWN_TRIAL] and first.params == {"a": algorithm.a, "v0": algorithm.v0}
    own = own_bytes(list(result.trials))
    assert own == first.user_attrs[BYTES]
    for trial in _complete(result):
        assert within_limit(trial) == (trial.user_attrs[BYTES] <= own)
    assert result.chosen is not None and result.chosen.user_attrs[BYTES] <= own


def test_the_own_steps_trial_runs_the_step_auto_chooses(tmp_path):
    search = plan_search("choco-sgd", SMALL, seeds=(0,), settings=SearchSettings(trials=1))
    (member,) = search.members
    assert member.config.algorithm.gamma == "auto"
    (result,) = tune(search, tmp_path / "t", progress=False)
    gamma = prepare(member.config).steps["gamma"]
    assert 0 < gamma < 1 and result.trials[0].params == {
        "a": member.config.algorithm.a,
        "gamma": gamma,
    }


def test_a_tune_with_another_limit_in_the_same_folder_is_refused(tmp_path, capsys):
    argv = ["tune", "detsgrad", *settings(SMALL), "--seeds", "0", "--trials", "1", "--out", "t"]
    assert main([*argv, "--quiet"]) == 0
    capsys.readouterr()
    assert main([*argv, "--max-bytes-vs-dsgd", "own"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "other --max-bytes-vs-dsgd" in err
