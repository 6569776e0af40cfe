"""Progress bars are drawn only on a terminal: a captured or piped stderr gets no
carriage returns, whatever the run's family."""

from __future__ import annotations

import io
import sys

import pytest
from small_runs import SMALL_SGD

from murmur.cli import main
from murmur.training.progress import progress_bar

SMALL_SSFN = ["data.dataset=vowel", "algorithm.layers=2", "algorithm.admm_iterations=5"]


@pytest.mark.parametrize(
    ("preset", "settings"),
    [("detsgrad", SMALL_SGD), ("sync-ps", SMALL_SGD), ("ssfn-vowel", SMALL_SSFN)],
    ids=["rounds", "server", "layerwise"],
)
def test_a_run_whose_stderr_is_no_terminal_draws_no_bar(capsys, tmp_path, preset, settings):
    argv = ["run", preset, *(f"--set={s}" for s in settings), "--out", str(tmp_path / "run")]
    assert main(argv) == 0  # without --quiet: a bar is asked for
    err = capsys.readouterr().err
    assert "\r" not in err and "it/s" not in err, err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bar_is_drawn_on_a_terminal_and_never_when_not_asked(monkeypatch):
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    bar = progress_bar(True, 10)
    bar.update(5)
    bar.close()
    assert "\r" in terminal.getvalue()
    quiet = progress_bar(False, 10)
    assert quiet.disable
