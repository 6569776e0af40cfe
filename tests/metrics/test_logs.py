"""run.log: metrics.csv and TensorBoard event files beside metrics.jsonl, written as the
records come, readable back, consistent after a resume; tensorboard missing is refused
in one line before any folder is made."""

from __future__ import annotations

import csv
import importlib.util
import json
import shutil
from pathlib import Path

import pytest
from small_runs import SMALL_SGD
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from murmur.cli import main
from murmur.config import load_experiment
from murmur.errors import UsageError
from murmur.experiment import resume, run
from murmur.metrics.logs import CsvLog, TensorBoardLog, check_logs, csv_row, tensorboard_scalars

BOTH = 'run.log=["jsonl", "csv", "tensorboard"]'


def _config(*settings: str):
    return load_experiment("detsgrad", [*SMALL_SGD, *settings]).runs[0][1]


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as file:
        return list(csv.DictReader(file))


def _scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(str(folder))
    events.Reload()
    return {
        tag: [(event.step, event.value) for event in events.Scalars(tag)]
        for tag in events.Tags()["scalars"]
    }


def test_a_list_becomes_a_column_per_agent_and_null_an_empty_cell(tmp_path):
    record = {"iteration": 3, "test_accuracy": [0.5, 1.0], "train_loss": None, "converged": True}
    assert csv_row(record) == {
        "iteration": 3,
        "test_accuracy_0": 0.5,
        "test_accuracy_1": 1.0,
        "train_loss": None,
        "converged": True,
    }
    log = CsvLog(tmp_path / "metrics.csv")
    log.write(record)
    assert (tmp_path / "metrics.csv").read_text().splitlines() == [
        "iteration,test_accuracy_0,test_accuracy_1,train_loss,converged",
        "3,0.5,1.0,,true",
    ]
    log.close()


def test_a_key_that_appears_later_rewrites_the_table_with_a_wider_header(tmp_path):
    path = tmp_path / "metrics.csv"
    log = CsvLog(path)
    log.write({"iteration": 0, "messages": 0})
    log.write({"iteration": 5, "messages": 4, "dropped_messages": 1})
    log.write({"iteration": 10, "dropped_messages": 2})
    assert path.read_text().splitlines() == [  # each line is flushed: read while open
        "iteration,messages,dropped_messages",
        "0,0,",
        "5,4,1",
        "10,,2",
    ]
    log.close()
    assert not list(tmp_path.glob(".*"))  # the rewrite's temporary file is gone


def test_tensorboard_shows_each_measure_at_its_iteration(tmp_path):
    record = {
        "iteration": 20,
        "accuracy_mean": 0.75,
        "accuracy_min": 0.5,
        "accuracy_max": 1.0,
        "model_accuracy": 0.875,
        "test_loss": [0.25, 0.75],
        "model_loss": 0.375,
        "train_loss": None,
        "consensus_distance": 0.125,
        "messages": 12,
        "bytes": 96,
        "virtual_seconds": 2.5,
        "wall_seconds": 0.5,
    }
    assert tensorboard_scalars(record) == {
        "accuracy/mean": 0.75,
        "accuracy/min": 0.5,
        "accuracy/max": 1.0,
        "accuracy/model": 0.875,
        "loss/test": 0.5,  # the mean over agents
        "loss/model": 0.375,
        "consensus_distance": 0.125,
        "messages": 12.0,
        "bytes": 96.0,
        "time/virtual_seconds": 2.5,
        "time/wall_seconds": 0.5,
    }
    log = TensorBoardLog(tmp_path)
    log.write(record)
    assert _scalars(tmp_path)["accuracy/model"] == [(20, 0.875)]  # flushed: read while open
    log.close()


def test_tensorboard_shows_the_validation_means_where_the_record_has_them():
    record = {
        "iteration": 10,
        "validation_accuracy": [0.5, 1.0],
        "validation_loss": [0.25, 0.75],
    }
    assert tensorboard_scalars(record) == {"accuracy/validation": 0.75, "loss/validation": 0.5}
    regression = {"iteration": 10, "validation_accuracy": None, "validation_loss": [1.0]}
    assert tensorboard_scalars(regression) == {"loss/validation": 1.0}


def test_a_run_writes_csv_and_tensorboard_rows_matching_its_records(tmp_path):
    result = run(_config(BOTH), tmp_path / "run")
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert records == result.records and len(records) == 4
    rows = _csv(tmp_path / "run" / "metrics.csv")
    assert [int(row["iteration"]) for row in rows] == [0, 20, 40, 60]
    for row, record in zip(rows, records, strict=True):
        assert float(row["accuracy_mean"]) == record["accuracy_mean"]
        assert float(row["model_accuracy"]) == record["model_accuracy"]
        assert [float(row[f"test_accuracy_{i}"]) for i in range(6)] == record["test_accuracy"]
        assert int(row["events_per_agent_5"]) == record["events_per_agent"][5]
    assert rows[0]["train_loss"] == ""  # none before the first step
    scalars = _scalars(tmp_path / "run" / "tensorboard")
    assert scalars["accuracy/mean"] == [
        (r["iteration"], pytest.approx(r["accuracy_mean"])) for r in records
    ]
    assert [step for step, _ in scalars["loss/train"]] == [20, 40, 60]
    assert scalars["messages"][-1] == (60, records[-1]["messages"])


def test_a_run_without_the_logs_writes_only_metrics_jsonl(tmp_path):
    run(_config(), tmp_path / "run")
    assert not (tmp_path / "run" / "metrics.csv").exists()
    assert not (tmp_path / "run" / "tensorboard").exists()


def test_a_resumed_run_rewrites_the_csv_from_its_kept_records_and_hides_later_events(
    tmp_path, periodic_checkpoints
):
    config = _config(BOTH, "run.checkpoint_every=25")
    run(config, tmp_path / "finished")
    stopped = tmp_path / "stopped"
    shutil.copytree(tmp_path / "finished", stopped)
    (stopped / "summary.json").unlink()
    with (stopped / "metrics.csv").open("a") as file:
        file.write("60,cut sho")  # a row the kill cut short
    resume(stopped)
    timed = ("wall_seconds",)

    def untimed(folder: Path) -> list[dict[str, str]]:
        return [{k: v for k, v in row.items() if k not in timed} for row in _csv(folder)]

    assert untimed(stopped / "metrics.csv") == untimed(tmp_path / "finished" / "metrics.csv")
    assert len(list((stopped / "tensorboard").iterdir())) == 2  # a new event file
    steps = [step for step, _ in _scalars(stopped / "tensorboard")["accuracy/mean"]]
    assert steps == [0, 20, 40, 60]  # the stopped run's 60 is hidden, the resumed one's shown


def test_tensorboard_missing_is_refused_before_any_folder_is_made(tmp_path, monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name)
    )
    with pytest.raises(UsageError, match=r"pip install 'murmur\[tensorboard\]'"):
        check_logs(("jsonl", "tensorboard"))
    check_logs(("jsonl", "csv"))
    out = tmp_path / "run"
    argv = ["run", "detsgrad", *(f"--set={s}" for s in [*SMALL_SGD, BOTH]), "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'murmur[tensorboard]'" in err, err
    assert not out.exists()
