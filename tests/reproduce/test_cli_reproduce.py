"""murmur reproduce: bad input is one line and exit status 2."""

from __future__ import annotations

import pytest

from murmur.cli import main
from murmur.reproduce import PAPERS


def _one_line_error(capsys, code: int) -> str:
    out, err = capsys.readouterr()
    assert code == 2
    assert len(err.splitlines()) == 1 and "Traceback" not in out + err, err
    return err


def test_an_unknown_paper_is_one_line_naming_the_valid_ones(capsys, tmp_path):
    line = _one_line_error(capsys, main(["reproduce", "nope", "--out", str(tmp_path / "r")]))
    assert line.startswith("murmur: error: unknown paper 'nope'")
    assert all(name in line for name in PAPERS)
    assert not (tmp_path / "r").exists()


def test_a_folder_that_is_not_empty_is_refused(capsys, tmp_path):
    (tmp_path / "kept.txt").write_text("mine")
    line = _one_line_error(capsys, main(["reproduce", "detsgrad", "--out", str(tmp_path)]))
    assert "not empty" in line
    assert [p.name for p in tmp_path.iterdir()] == ["kept.txt"]


def test_a_missing_paper_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["reproduce"])
    _, err = capsys.readouterr()
    assert exit_info.value.code == 2
    assert len(err.splitlines()) == 1 and "Traceback" not in err
