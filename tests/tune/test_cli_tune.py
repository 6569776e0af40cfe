"""Bad input to murmur tune is one line on stderr and exit 2, with nothing written."""

from __future__ import annotations

import pytest
from tune_problems import SMALL, settings

from murmur.cli import main

SMALL_SETTINGS = settings(SMALL)


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["default", "--members", "dsgd,nope"], "unknown member 'nope' of default"),
        (["default", "--members", ","], "names no member"),
        (["dsgd", "--range", "algorithm.a=0.5:0.5"], "is empty"),
        (["dsgd", "--range", "algorithm.a=0.5:0.1"], "is empty"),
        (["dsgd", "--range", "algorithm.a=0.1"], "must look like algorithm.KEY=LOW:HIGH"),
        (["dsgd", "--range", "algorithm.a=0:0.5"], "its low end must be above 0"),
        (["dsgd", "--range", "data.batch_size=1:8"], "keys of [algorithm] only"),
        (["dsgd", "--range", "algorithm.v0=1:5"], "no member tunes algorithm.v0"),
        (["choco-sgd", "--range", "algorithm.gamma=0.1:2"], "algorithm.gamma = 2"),
        (["dsgd", "--trials", "0"], "argument --trials: must be a whole number from 1"),
        (["dsgd", "--timeout", "0"], "argument --timeout: must be a positive number of seconds"),
        (["no-such-preset"], "unknown preset 'no-such-preset'"),
        (["dsgd", "--seeds", "3-1"], "runs backwards"),
        (["dsgd", "--set", "run.seeds=[0, 1]"], "takes its seeds from --seeds"),
        (["ssfn-vowel"], "ssfn has nothing murmur tune searches"),
        (["dsgd", "--max-bytes-vs-dsgd", "0"], "a positive percentage of DSGD's bytes"),
        (["dsgd", "--max-bytes-vs-dsgd", "half"], "a positive percentage of DSGD's bytes"),
        (["dsgd", "--max-bytes-vs-dsgd", "own", "--sampler", "grid"], "which a grid does not"),
    ],
)
def test_bad_input_is_one_line_and_exit_2_with_nothing_written(tmp_path, capsys, argv, words):
    code = _exit_status(["tune", *argv, *SMALL_SETTINGS, "--out", "t"])
    out, err = capsys.readouterr()
    assert code == 2
    assert len(err.splitlines()) == 1 and words in err, err
    assert "Traceback" not in out + err
    assert not any(tmp_path.iterdir())


def _exit_status(argv: list[str]) -> int:
    """What ``murmur ARGV`` exits with (argparse exits by itself on bad flags)."""
    try:
        return main(argv)
    except SystemExit as stop:
        return int(stop.code or 0)


def test_a_folder_that_holds_something_else_is_refused(tmp_path, capsys):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "notes.txt").write_text("mine")
    assert main(["tune", "dsgd", *SMALL_SETTINGS, "--out", "t"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "holds no tune" in err
    assert [path.name for path in (tmp_path / "t").iterdir()] == ["notes.txt"]


def test_the_help_names_every_option(capsys):
    assert _exit_status(["tune", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--set", "--members", "--seeds", "--trials", "--timeout", "--sampler"):
        assert option in out
    for option in ("--range", "--max-bytes-vs-dsgd", "--no-pruning", "--out", "--quiet"):
        assert option in out


def test_a_tune_writes_its_folder_and_says_so(tmp_path, capsys):
    argv = ["tune", "dsgd", *SMALL_SETTINGS, "--trials", "2", "--out", "t"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert sorted(path.name for path in (tmp_path / "t").iterdir()) == [
        "dsgd-a.png",
        "tune.db",
        "tuned.toml",
        "tuning.md",
    ]
    lines = err.splitlines()
    assert lines[0].startswith("murmur: tuning holds out data.validation = 0.1")
    assert lines[1].startswith("dsgd: algorithm.a log-uniform in [0.01, 1]; tpe, 2 trials")
    assert [line.split(":")[0] for line in lines[2:]] == ["dsgd trial 1/2", "dsgd trial 2/2"]
    assert "test figures: murmur run t/tuned.toml --seeds 0-4" in out
    assert main([*argv, "--quiet"]) == 0
    assert capsys.readouterr().err.splitlines() == lines[:1]
