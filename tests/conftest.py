"""Shared pytest hooks."""

from __future__ import annotations

import sys

import pytest


def pytest_terminal_summary(terminalreporter):
    """How many generated inputs the property tests ran (tests/input_harness.py)."""
    harness = sys.modules.get("input_harness")
    if harness is not None and harness.CASES:
        terminalreporter.write_sep("-", "input properties")
        for line in harness.summary_line().splitlines():
            terminalreporter.write_line(line)


@pytest.fixture
def periodic_checkpoints(monkeypatch):
    """Checkpoints every ``run.checkpoint_every`` steps but not after the last one: the
    folder of a finished run then holds what a run killed after its last periodic
    checkpoint would have left (in this process; ranks started apart save as usual)."""
    from murmur.training.checkpoint import Checkpoints

    def due(self, done: int, total: int) -> bool:
        return (
            self.every > 0
            and self.path is not None
            and 0 < done < total
            and (done % self.every == 0)
        )

    monkeypatch.setattr(Checkpoints, "due", due)
