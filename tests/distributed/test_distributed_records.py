"""A distributed SGD run's records are written by rank 0 as the run goes: a run whose
rank is killed midway keeps its curve (metrics.jsonl and metrics.csv) up to its last
evaluation, and its average model is the one model.pt holds."""

from __future__ import annotations

import csv
import json
import signal

import pytest
import torch
from ranks import Kill, assert_failed_naming, drive, read_records
from test_distributed import DSGD, write_config

from murmur import load_model
from murmur.data import load_dataset
from murmur.reporting.run_schema import check_record

CSV = ["--set", 'run.log=["jsonl", "csv"]']


def test_a_run_killed_midway_keeps_every_record_it_made(tmp_path):
    path = write_config(tmp_path, DSGD, iterations=100_000)
    out = tmp_path / "run"
    argv = ["run", str(path), "--runtime", "distributed", "--out", str(out), *CSV]
    report, stderr = drive(
        tmp_path,
        [*argv, "--quiet", "--timeout", "5"],
        world=4,
        kill=Kill(rank=2, when=str(out / "config.toml"), delay=3.0, signal=signal.SIGKILL),
        limit=40.0,
    )
    assert report["codes"]["2"] == -signal.SIGKILL, stderr
    assert_failed_naming(out, "rank 2")
    records = read_records(out)
    assert len(records) >= 3, "the ranks made some evaluations in 3 s"
    assert [r["iteration"] for r in records] == [25 * e for e in range(len(records))]
    for number, record in enumerate(records):
        check_record(f"metrics.jsonl:{number + 1}", record)
        assert len(record["test_accuracy"]) == 4 and record["model_accuracy"] is not None
    summary = json.loads((out / "summary.json").read_text())
    assert summary["evaluations"] == len(records)
    with (out / "metrics.csv").open(newline="") as file:
        rows = list(csv.DictReader(file))
    assert [int(row["iteration"]) for row in rows] == [r["iteration"] for r in records]


def test_the_last_records_average_model_is_the_one_model_pt_holds(tmp_path):
    path = write_config(tmp_path, DSGD, iterations=50)
    out = tmp_path / "run"
    argv = ["run", str(path), "--runtime", "distributed", "--out", str(out), "--quiet"]
    report, stderr = drive(tmp_path, argv, world=4)
    assert report["codes"] == {"0": 0, "1": 0, "2": 0, "3": 0}, stderr
    records = read_records(out)
    assert [r["iteration"] for r in records] == [0, 25, 50]
    summary = json.loads((out / "summary.json").read_text())
    blobs = load_dataset("blobs")
    with torch.no_grad():
        outputs = load_model(out)(blobs.x_test)
    accuracy = float((outputs.argmax(dim=-1) == blobs.y_test).double().mean())
    assert records[-1]["model_accuracy"] == pytest.approx(accuracy, abs=1e-9)
    assert summary["model"]["test_accuracy"] == accuracy
    assert records[-1]["model_loss"] == pytest.approx(summary["model"]["test_loss"], rel=1e-4)
    assert summary["accuracy_best"]["mean"] == max(r["accuracy_mean"] for r in records)
