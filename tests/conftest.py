"""Shared pytest hooks."""

from __future__ import annotations

import sys


def pytest_terminal_summary(terminalreporter):
    """How many generated inputs the property tests ran (tests/input_harness.py)."""
    harness = sys.modules.get("input_harness")
    if harness is not None and harness.CASES:
        terminalreporter.write_sep("-", "input properties")
        for line in harness.summary_line().splitlines():
            terminalreporter.write_line(line)
