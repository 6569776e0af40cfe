"""A validation split in the distributed runtime: every rank holds out the rows the
simulator holds out, and the records rank 0 writes carry the simulator's validation
accuracy and loss (ranks as real processes on loopback, forked by one driver)."""

from __future__ import annotations

import json

import pytest
from ranks import assert_records_match, drive, read_records
from test_distributed import DSGD, write_config

from murmur.config import load_experiment
from murmur.experiment import run
from murmur.reporting.run_schema import check_record, check_summary

VALIDATION = ["--set", "data.validation=0.2"]
SYNC_PS = """
[run]
seed = 3
iterations = 30
eval_every = 10
[data]
dataset = "blobs"
batch_size = 8
validation = 0.2
[model]
name = "mlp"
hidden = [8]
[algorithm]
name = "sync-ps"
a = 0.2
workers = 3
"""


def _simulated(path, out):
    ((_, config),) = load_experiment(str(path), ["data.validation=0.2"]).runs
    run(config, out)
    return read_records(out), json.loads((out / "summary.json").read_text())


def _assert_validation_match(records: list[dict], expected: list[dict]) -> None:
    assert len(records) == len(expected)
    for number, (got, want) in enumerate(zip(records, expected, strict=True)):
        check_record(f"metrics.jsonl:{number + 1}", got)
        for key in ("validation_accuracy", "validation_loss"):
            assert got[key] == pytest.approx(want[key], abs=1e-5), key


def test_the_ranks_records_carry_the_simulators_validation_accuracy(tmp_path):
    path = write_config(tmp_path, DSGD, iterations=50)
    out = tmp_path / "distributed"
    argv = ["run", str(path), "--runtime", "distributed", "--out", str(out), "--quiet"]
    report, stderr = drive(tmp_path, [*argv, *VALIDATION, "--timeout", "20"], world=4)
    assert report["codes"] == {"0": 0, "1": 0, "2": 0, "3": 0}, stderr

    expected, simulated = _simulated(path, tmp_path / "simulated")
    records = read_records(out)
    assert [r["iteration"] for r in records] == [0, 25, 50]
    assert_records_match(records, expected)
    _assert_validation_match(records, expected)
    summary = json.loads((out / "summary.json").read_text())
    check_summary("summary.json", summary)
    for key in ("validation_last_k", "validation_best"):
        assert summary[key] == pytest.approx(simulated[key], abs=1e-5), key


def test_a_parameter_servers_records_carry_the_simulators_validation_accuracy(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(SYNC_PS)
    out = tmp_path / "distributed"
    argv = ["run", str(path), "--runtime", "distributed", "--out", str(out), "--quiet"]
    report, stderr = drive(tmp_path, [*argv, "--timeout", "20"], world=4)
    assert report["codes"] == {"0": 0, "1": 0, "2": 0, "3": 0}, stderr

    expected, simulated = _simulated(path, tmp_path / "simulated")
    records = read_records(out)
    assert [r["iteration"] for r in records] == [0, 10, 20, 30]
    _assert_validation_match(records, expected)
    summary = json.loads((out / "summary.json").read_text())
    for key in ("validation_loss", "validation_last_k", "validation_best"):
        assert summary[key] == pytest.approx(simulated[key], abs=1e-5), key
