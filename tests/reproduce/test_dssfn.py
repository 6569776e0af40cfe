"""murmur reproduce dssfn --quick: the report's figures and verdicts are the runs' own."""

from __future__ import annotations

from pathlib import Path

import pytest
from reproduced import PNG_MAGIC, claim_section, claim_verdict, quick, run_summary

from murmur.reproduce import dssfn
from murmur.reproduce.claims import percent
from murmur.reproduce.report import VERDICT_PREFIX


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    return quick(tmp_path_factory, "dssfn")


def test_every_claim_has_a_verdict_and_every_plot_exists(out):
    report = (out / "report.md").read_text()
    verdicts = [line for line in report.splitlines() if line.startswith(VERDICT_PREFIX)]
    assert len(verdicts) == 5
    assert all(line.endswith(("holds (quick)", "does not hold (quick)")) for line in verdicts)
    assert report.count("**Quick run:** ") == 5
    for plot in ("accuracy.png", "time-nodes.png", "time-degree.png"):
        assert (out / plot).read_bytes().startswith(PNG_MAGIC)
    labels = {planned.label for planned in dssfn.plan(quick=True)}
    assert {p.name for p in (out / "runs").iterdir()} == labels


def test_the_accuracy_table_holds_the_runs_accuracies_and_virtual_times(out):
    section = claim_section((out / "report.md").read_text(), 1)
    central = run_summary(out, "ssfn-vowel")["accuracy"]["mean"]
    sync = run_summary(out, "dssfn-vowel")
    (row,) = [line for line in section.splitlines() if line.startswith("| vowel |")]
    assert f"| {percent(central)} |" in row
    assert percent(sync["accuracy"]["mean"]) in row and f"{sync['virtual_seconds']:.3g}" in row
    forms = ("dssfn", "dssfn-async")
    accuracies = [run_summary(out, f"{form}-vowel")["accuracy"] for form in forms]
    mean_gap = max(abs(a["mean"] - central) for a in accuracies)
    node_gap = max(abs(v - central) for a in accuracies for v in a["per_agent"])
    holds = 100 * mean_gap <= dssfn.MEAN_POINTS and 100 * node_gap <= dssfn.NODE_POINTS
    assert claim_verdict(section) == ("holds (quick)" if holds else "does not hold (quick)")


def test_the_time_claims_follow_from_the_runs_virtual_seconds(out):
    report = (out / "report.md").read_text()
    sync = run_summary(out, "dssfn-vowel")["virtual_seconds"]
    asynchronous = run_summary(out, "dssfn-async-vowel")["virtual_seconds"]
    verdict = claim_verdict(claim_section(report, 3))
    assert verdict == ("holds (quick)" if asynchronous < sync else "does not hold (quick)")
    ratios = [
        run_summary(out, f"dssfn-ring-{n}")["virtual_seconds"]
        / run_summary(out, f"dssfn-async-ring-{n}")["virtual_seconds"]
        for n in dssfn.QUICK.ring_nodes
    ]
    assert " → ".join(f"{r:.2f}" for r in ratios) in claim_section(report, 4)


def test_every_layer_of_the_table_runs_converged(out):
    """The presets' caps leave room: no layer stops at its cap."""
    for form in dssfn.FORMS:
        assert run_summary(out, f"{form}-vowel")["unconverged_layers"] == []
