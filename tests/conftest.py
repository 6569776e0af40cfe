"""Shared pytest hooks."""

from __future__ import annotations

import sys

import pytest

_COUNTS = ("CASES", "EXITS", "FINDINGS", "SECONDS")
"""The input harness's counters that a worker process hands the controller."""


def pytest_sessionfinish(session):
    """In a worker process (pytest-xdist), hand the input harness's counts over."""
    harness = sys.modules.get("input_harness")
    output = getattr(session.config, "workeroutput", None)
    if harness is not None and output is not None:
        output["input_harness"] = {
            name: [
                [list(key) if isinstance(key, tuple) else key, count]
                for key, count in getattr(harness, name).items()
            ]
            for name in _COUNTS
        } | {"FAILED_RUNS": list(harness.FAILED_RUNS)}


def pytest_testnodedown(node, error):
    """In the controller, add a worker's input harness counts to this process's."""
    counts = getattr(node, "workeroutput", {}).get("input_harness")
    if not counts:
        return
    import input_harness

    for name in _COUNTS:
        for key, count in counts[name]:
            getattr(input_harness, name)[tuple(key) if isinstance(key, list) else key] += count
    input_harness.FAILED_RUNS.extend(counts["FAILED_RUNS"])


def pytest_terminal_summary(terminalreporter):
    """How many generated inputs the property tests ran (tests/input_harness.py)."""
    harness = sys.modules.get("input_harness")
    if harness is not None and harness.CASES:
        terminalreporter.write_sep("-", "input properties")
        for line in harness.summary_line().splitlines():
            terminalreporter.write_line(line)


@pytest.fixture(autouse=True)
def no_plugins_after():
    """A test's plugins are forgotten after it, so that every other test sees murmur's
    own algorithms alone."""
    yield
    from murmur.plugins import forget_loaded

    forget_loaded()


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
