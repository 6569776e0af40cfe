"""Verdicts come from a criterion's outcome; the report has one verdict line per claim."""

from __future__ import annotations

import pytest

from murmur.reproduce.claims import Claim, Verdict, judge
from murmur.reproduce.report import VERDICT_PREFIX, markdown_table, write_report


def test_a_passed_criterion_holds_and_a_failed_one_does_not_unless_the_run_is_quick():
    assert str(judge(True, quick=False)) == "holds"
    assert str(judge(True, quick=True)) == "holds"
    assert str(judge(False, quick=False)) == "does not hold"
    assert str(judge(False, quick=True)) == "not comparable (quick run)"


def test_only_a_not_comparable_verdict_has_a_reason():
    assert str(Verdict("not comparable", "one core")) == "not comparable (one core)"
    with pytest.raises(ValueError):
        Verdict("holds", "because")
    with pytest.raises(ValueError):
        Verdict("not comparable")


def test_the_report_lists_every_claim_with_its_own_verdict_line(tmp_path):
    claims = [
        Claim("first", "the paper says", "we measured 1", "1 > 0", judge(True, quick=False)),
        Claim(
            "second",
            "the paper says",
            "we measured 0",
            "0 > 0",
            judge(False, quick=False),
            table=markdown_table(("a", "b"), [(1, 2)]),
            plots=("plot.png",),
            note="two cores",
        ),
    ]
    text = write_report(tmp_path, "A paper", claims, quick=False, seconds=3.0).read_text()
    verdicts = [line for line in text.splitlines() if line.startswith(VERDICT_PREFIX)]
    assert verdicts == [f"{VERDICT_PREFIX} holds", f"{VERDICT_PREFIX} does not hold"]
    assert "| 2 | second | does not hold |" in text
    assert "| a | b |\n|---|---|\n| 1 | 2 |" in text
    assert "![second](plot.png)" in text and "Note: two cores" in text
