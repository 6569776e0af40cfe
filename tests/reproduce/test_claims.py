"""Verdicts come from a criterion's outcome; the report has one verdict line per claim."""

from __future__ import annotations

import pytest

from murmur.reproduce.claims import Claim, Verdict, judge
from murmur.reproduce.report import PORTABLE, VERDICT_PREFIX, markdown_table, write_report
from murmur.reproduce.runs import PlannedRun, resolve


def test_a_passed_criterion_holds_and_a_failed_one_does_not_also_on_a_quick_run():
    assert str(judge(True, quick=False)) == "holds"
    assert str(judge(True, quick=True)) == "holds (quick)"
    assert str(judge(False, quick=False)) == "does not hold"
    assert str(judge(False, quick=True)) == "does not hold (quick)"


def test_a_not_comparable_verdict_needs_its_reason():
    assert str(Verdict("not comparable", "one core")) == "not comparable (one core)"
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
            reduced="200 iterations, not 3,000",
        ),
    ]
    text = write_report(tmp_path, "A paper", claims, quick=False, seconds=3.0).read_text()
    verdicts = [line for line in text.splitlines() if line.startswith(VERDICT_PREFIX)]
    assert verdicts == [f"{VERDICT_PREFIX} holds", f"{VERDICT_PREFIX} does not hold"]
    assert "| 2 | second | does not hold |" in text
    assert "| a | b |\n|---|---|\n| 1 | 2 |" in text
    assert "![second](plot.png)" in text and "Note: two cores" in text
    assert "**Quick run:** 200 iterations, not 3,000" in text.split("## 2. second")[1]
    assert "**Quick run:**" not in text.split("## 2. second")[0]


def test_a_portable_reproduction_marks_every_run_and_says_so_in_its_report(tmp_path):
    planned = PlannedRun("x", "dsgd", ("run.iterations=10",))
    assert resolve(planned, portable=True).run.portable is True
    assert resolve(planned).run.portable is False
    claims = [Claim("first", "the paper says", "we measured 1", "1 > 0", judge(True, quick=False))]
    portable = write_report(tmp_path, "A paper", claims, quick=False, seconds=3.0, portable=True)
    assert PORTABLE in portable.read_text().splitlines()[2]
    plain = write_report(tmp_path, "A paper", claims, quick=False, seconds=3.0)
    assert "portable" not in plain.read_text()
