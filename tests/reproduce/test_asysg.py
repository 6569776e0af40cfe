"""murmur reproduce asysg --quick: the report's figures are the runs' own."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from reproduced import PNG_MAGIC, claim_section, claim_verdict, quick, run_summary

from murmur.reporting.report import read_run, speedups
from murmur.reproduce import asysg
from murmur.reproduce.report import VERDICT_PREFIX


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    return quick(tmp_path_factory, "asysg")


def test_every_claim_has_a_verdict_line_and_every_plot_exists(out):
    report = (out / "report.md").read_text()
    verdicts = [line for line in report.splitlines() if line.startswith(VERDICT_PREFIX)]
    assert len(verdicts) == 6
    for plot in ("speedup-con.png", "speedup-incon.png", "ergodic-rate.png"):
        assert (out / plot).read_bytes().startswith(PNG_MAGIC)
        assert f"]({plot})" in report


@pytest.mark.parametrize(("first", "key"), [(1, "con"), (3, "incon")])
def test_the_speedups_and_their_verdicts_are_the_runs(out, first, key):
    report = (out / "report.md").read_text()
    workers = asysg.QUICK.con_workers if key == "con" else asysg.QUICK.incon_workers
    summaries = [run_summary(out, f"{key}-{w}") for w in workers]
    pairs = speedups(summaries)
    limit = math.sqrt(summaries[0]["iterations_to_target"])
    for index in range(2):
        section = claim_section(report, first + index)
        for w, summary, pair in zip(workers, summaries, pairs, strict=True):
            assert f"| {w} | {summary['iterations_to_target']:,} |" in section
            assert f"W = {w}: {pair[index]:.2f}" in section
        passed = all(
            pair[index] is not None and pair[index] >= asysg.EFFICIENCY * w
            for w, pair in zip(workers, pairs, strict=True)
            if w <= limit
        )
        assert claim_verdict(section) == ("holds (quick)" if passed else "does not hold (quick)")
        assert "**Quick run:** training loss 0.5 as target" in section


def test_hogwild_is_real_processes_and_its_speedup_is_the_runs(out):
    section = claim_section((out / "report.md").read_text(), 5)
    summary = run_summary(out, "hogwild")
    assert summary["workers"] == asysg.cores()
    assert f"a speed-up of {summary['speedup']:.2f}" in section
    assert f"{asysg.cores()} cores" in section
    accuracy = summary["accuracy"]["mean"] - summary["single_process"]["accuracy"]
    passed = (
        summary["speedup"] >= asysg.EFFICIENCY * summary["workers"]
        and 100 * abs(accuracy) <= asysg.QUICK_ACCURACY_POINTS
    )
    assert claim_verdict(section) == ("holds (quick)" if passed else "does not hold (quick)")
    assert f"within {asysg.QUICK_ACCURACY_POINTS:g} points" in section


def test_the_ergodic_rate_is_fitted_to_the_recorded_gradient_norms(out):
    section = claim_section((out / "report.md").read_text(), 6)
    ks = asysg.QUICK.rate_iterations
    averages = [asysg.ergodic_average(read_run(out / "runs" / f"rate-{k}").records, k) for k in ks]
    slope = np.polyfit(np.log(ks), np.log(averages), 1)[0]
    for k, average in zip(ks, averages, strict=True):
        assert f"| {k:,} | " in section and f" | {average:.4g} |" in section
    assert f"fitted log-log slope {slope:.3f}" in section
    passed = slope <= -0.5 + asysg.SLOPE_TOLERANCE
    assert claim_verdict(section) == ("holds (quick)" if passed else "does not hold (quick)")


def test_the_ergodic_average_leaves_out_the_last_iterate_and_needs_a_record():
    records = [
        {"iteration": 0, "gradient_norm_squared": 4.0},
        {"iteration": 5, "gradient_norm_squared": 2.0},
    ]
    records.append({"iteration": 10, "gradient_norm_squared": 100.0})
    assert asysg.ergodic_average(records, 10) == 3.0
    with pytest.raises(ValueError):
        asysg.ergodic_average(records[2:], 10)
