"""murmur reproduce detsgrad --quick: the report's figures are the runs' own."""

from __future__ import annotations

from pathlib import Path

import pytest
from reproduced import PNG_MAGIC, claim_section, quick, run_summary

from murmur.reproduce import detsgrad
from murmur.reproduce.claims import percent
from murmur.reproduce.report import VERDICT_PREFIX


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    return quick(tmp_path_factory, "detsgrad")


def test_every_claim_has_a_verdict_line_and_every_plot_exists(out):
    report = (out / "report.md").read_text()
    verdicts = [line for line in report.splitlines() if line.startswith(VERDICT_PREFIX)]
    assert len(verdicts) == 4
    # a quick run decides every claim, on the reduced criterion its section states
    assert {line.removeprefix(VERDICT_PREFIX).strip() for line in verdicts} <= {
        "holds (quick)",
        "does not hold (quick)",
    }
    assert report.count("**Quick run:** ") == 4
    for plot in ("accuracy-iid.png", "accuracy-digit.png", "events.png"):
        assert (out / plot).read_bytes().startswith(PNG_MAGIC)
        assert f"]({plot})" in report
    assert {p.name for p in (out / "runs").iterdir()} == {r.label for r in detsgrad.plan(True)}


def test_the_accuracies_and_their_verdicts_are_the_runs(out):
    report = (out / "report.md").read_text()
    central = run_summary(out, "centralized")["accuracy"]["mean"]
    for number, split in enumerate(detsgrad.SPLITS, 1):
        section = claim_section(report, number)
        agents = run_summary(out, f"detsgrad-{split}")["accuracy"]["per_agent"]
        dsgd = run_summary(out, f"dsgd-{split}")["accuracy"]["per_agent"]
        for agent, (mine, theirs) in enumerate(zip(agents, dsgd, strict=True)):
            assert f"| {agent} | {percent(mine)} | {percent(theirs)} |" in section
        assert f"| centralized SGD | {percent(central)} |" in section
        behind = 100 * (min(dsgd) - min(agents))  # the quick run compares with DSGD
        assert f"{behind:.2f} points below DSGD's worst agent" in section
        holds = behind <= detsgrad.TOLERANCE_POINTS
        verdict = "holds (quick)" if holds else "does not hold (quick)"
        assert f"{VERDICT_PREFIX} {verdict}\n" in section


def test_the_messages_and_events_are_the_runs(out):
    report = (out / "report.md").read_text()
    section = claim_section(report, 3)
    for split in detsgrad.SPLITS:
        mine, theirs = run_summary(out, f"detsgrad-{split}"), run_summary(out, f"dsgd-{split}")
        ratio = mine["messages"] / theirs["messages"]
        assert f"| {mine['events']:,} | {mine['messages']:,} | {theirs['messages']:,} | " in section
        assert f"{100 * ratio:.1f} %" in section
    events_run = run_summary(out, detsgrad.events_label(True))
    assert events_run["iterations"] == detsgrad.QUICK_EVENTS_ITERATIONS
    events = events_run["events_per_agent"]
    section = claim_section(report, 4)
    for agent, total in enumerate(events):
        assert f"| {agent} | " in section and f" | {total} |" in section
    assert f"fired {min(events):,} to {max(events):,} events" in section
