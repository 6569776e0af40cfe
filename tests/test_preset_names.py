"""What a preset name means: inside presets and files, ``extends`` and ``compare``
name packaged presets or files by a path-like name, read relative to the file that
names them; on the command line a packaged preset's name is that preset, and one
line says so where a file or folder of that name sits in the current directory."""

from __future__ import annotations

import pytest

from murmur.cli import main
from murmur.config import load_experiment, shadowed_path
from murmur.errors import UsageError


def test_presets_that_name_others_ignore_same_named_folders_here(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dsgd").mkdir()  # e.g. left by `murmur run dsgd --out dsgd`
    (tmp_path / "dssfn-vowel").mkdir()
    assert [label for label, _ in load_experiment("default").runs] == [
        "detsgrad",
        "dsgd",
        "detsgrad-gt",
        "centralized",
    ]
    assert load_experiment("dssfn-async-vowel").runs[0][1].data.dataset == "vowel"
    assert main(["run", "dsgd", "--check"]) == 0
    err = capsys.readouterr().err
    assert err == (
        "murmur: 'dsgd' is the packaged preset; the folder ./dsgd here is not read "
        "(write ./dsgd to use it)\n"
    )
    assert shadowed_path("default") is None and shadowed_path("./dsgd") is None


def test_names_inside_a_file_are_read_relative_to_it(tmp_path, monkeypatch):
    (tmp_path / "study" / "parts").mkdir(parents=True)
    (tmp_path / "study" / "parts" / "slow.toml").write_text(
        'extends = "dsgd"\n[algorithm]\na = 0.01\n'
    )
    (tmp_path / "study" / "plan.toml").write_text(
        'compare = ["parts/slow.toml", "detsgrad", { preset = "parts/slow.toml", '
        'label = "slower", set = ["algorithm.a=0.001"] }]\n'
    )
    monkeypatch.chdir(tmp_path)  # not the file's folder
    runs = dict(load_experiment("study/plan.toml").runs)
    assert list(runs) == ["slow", "detsgrad", "slower"]
    assert runs["slow"].algorithm.a == 0.01
    assert runs["slower"].algorithm.a == 0.001


def test_a_bare_name_inside_a_file_is_a_packaged_preset_never_a_file_here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").write_text('[algorithm]\nname = "dsgd"\n')
    (tmp_path / "run.toml").write_text('extends = "mine"\n')
    with pytest.raises(UsageError, match=r"unknown preset 'mine'.*write a file as ./name.toml"):
        load_experiment("run.toml")
    (tmp_path / "run.toml").write_text('extends = "./mine"\n')
    assert load_experiment("run.toml").runs[0][1].algorithm.name == "dsgd"
