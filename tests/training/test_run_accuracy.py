"""What a run's accuracy means: the records' average model (model_accuracy, what model.pt
scores), and the summary's accuracy over the last k evaluations and at the best one."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from small_runs import SMALL_SGD

import murmur
from murmur import load_model
from murmur.config import load_experiment
from murmur.data import from_arrays, load_dataset
from murmur.experiment import run
from murmur.metrics.evaluation import accuracy_over_run
from murmur.reporting.run_schema import check_record, check_summary


def _config(preset: str, *settings: str):
    return load_experiment(preset, [*SMALL_SGD, *settings]).runs[0][1]


def _record(iteration: int, mean: float | None, low: float | None, high: float | None) -> dict:
    scores = {"accuracy_mean": mean, "accuracy_min": low, "accuracy_max": high}
    return {"iteration": iteration, **scores}


RECORDS = [
    _record(0, 0.25, 0.25, 0.25),
    _record(10, 0.5, 0.25, 0.75),
    _record(20, 0.75, 0.5, 1.0),
    _record(30, 0.75, 0.75, 0.75),  # as good as 20: the first of them is the best
    _record(40, 0.625, 0.5, 0.75),
]


def test_last_k_is_the_mean_of_the_last_k_evaluations_and_best_the_first_highest():
    summary = accuracy_over_run(RECORDS, 2)
    assert summary["accuracy_last_k"] == {"k": 2, "mean": 0.6875, "min": 0.625, "max": 0.75}
    assert summary["accuracy_best"] == {"iteration": 20, "mean": 0.75, "min": 0.5, "max": 1.0}
    three = accuracy_over_run(RECORDS, 3)["accuracy_last_k"]
    assert three == {  # (0.75 + 0.75 + 0.625) / 3, ...
        "k": 3,
        "mean": pytest.approx(17 / 24),
        "min": pytest.approx(7 / 12),
        "max": pytest.approx(5 / 6),
    }


def test_fewer_evaluations_than_k_average_all_of_them_and_regression_has_none():
    summary = accuracy_over_run(RECORDS[:2], 5)
    assert summary["accuracy_last_k"] == {"k": 2, "mean": 0.375, "min": 0.25, "max": 0.5}
    assert summary["accuracy_best"]["iteration"] == 10
    assert accuracy_over_run([_record(0, None, None, None)], 5) == {}
    assert accuracy_over_run([], 5) == {}


def test_a_runs_summary_holds_last_k_and_best_of_its_records(tmp_path):
    run(_config("dsgd", "run.last_k=2"), tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [r["iteration"] for r in records] == [0, 20, 40, 60]
    check_summary("summary.json", summary)
    last = records[-2:]
    assert summary["accuracy_last_k"] == {
        "k": 2,
        "mean": (last[0]["accuracy_mean"] + last[1]["accuracy_mean"]) / 2,
        "min": (last[0]["accuracy_min"] + last[1]["accuracy_min"]) / 2,
        "max": (last[0]["accuracy_max"] + last[1]["accuracy_max"]) / 2,
    }
    best = max(records, key=lambda r: r["accuracy_mean"])
    assert summary["accuracy_best"] == {
        "iteration": best["iteration"],
        "mean": best["accuracy_mean"],
        "min": best["accuracy_min"],
        "max": best["accuracy_max"],
    }
    assert summary["accuracy"]["mean"] == records[-1]["accuracy_mean"]  # the final one


def test_the_records_average_model_is_what_model_pt_scores_at_the_end(tmp_path):
    result = run(_config("detsgrad"), tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    blobs = load_dataset("blobs")
    model = load_model(tmp_path / "run")
    with torch.no_grad():
        outputs = model(blobs.x_test)
    accuracy = float((outputs.argmax(dim=-1) == blobs.y_test).double().mean())
    loss = float(torch.nn.functional.cross_entropy(outputs, blobs.y_test))
    final = result.records[-1]
    assert final["model_accuracy"] == accuracy == summary["model"]["test_accuracy"]
    assert final["model_loss"] == pytest.approx(loss, rel=1e-5)
    for number, record in enumerate(result.records):
        check_record(f"metrics.jsonl:{number + 1}", dict(record))
        assert 0.0 <= record["model_accuracy"] <= 1.0
    # the agents start equal: their average is any one of them
    assert result.records[0]["model_accuracy"] == result.records[0]["accuracy_mean"]


def test_a_server_runs_one_model_is_its_average_model(tmp_path):
    result = run(_config("sync-ps"))
    for record in result.records:
        assert record["model_accuracy"] == record["accuracy_mean"]
        assert record["model_loss"] == record["test_loss"][0]


def test_a_regression_run_has_the_average_models_loss_and_no_accuracy():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 4)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5, 0.0]) + 0.1).astype(np.float32)
    data = from_arrays(x[:96], y[:96], x[96:], y[96:], task="regression")
    settings = ["data.partition=iid", "topology.agents=3", "model.name=linear"]
    config = load_experiment("dsgd", [*SMALL_SGD, *settings]).runs[0][1]
    result = murmur.run(config, data=data)
    final = result.records[-1]
    assert final["model_accuracy"] is None and final["accuracy_mean"] is None
    assert final["model_loss"] == pytest.approx(result.extra["model"]["test_loss"], rel=1e-5)
    assert "accuracy_last_k" not in result.extra and "accuracy_best" not in result.extra
