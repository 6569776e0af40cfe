"""Runs with a validation split (``data.validation``): held out before the agents' split,
the same rows for every run seed, measured at every evaluation beside the test set and
summed up in the summary; without one a run is what it was."""

from __future__ import annotations

import json

import pytest
import torch
from small_runs import SMALL_SGD

import murmur
from murmur.cli import main
from murmur.config import load_experiment
from murmur.data import DATASETS, from_arrays, partition
from murmur.experiment import run
from murmur.metrics.evaluation import validation_over_run
from murmur.reporting.run_schema import check_record, check_summary
from murmur.seeding import derive_seed
from murmur.training.plan import plan
from murmur.training.setup import RoundsSetup, prepare

VALIDATION_FIELDS = {"validation_accuracy", "validation_loss"}
SUMMARY_FIELDS = {"validation_accuracy", "validation_loss", "validation_last_k", "validation_best"}


def _config(preset: str, *settings: str):
    return load_experiment(preset, [*SMALL_SGD, *settings]).runs[0][1]


def _unique_rows():
    """A dataset whose every row, train and test, differs (the first feature numbers it)."""
    x = torch.arange(400, dtype=torch.float32).view(-1, 1).repeat(1, 4)
    y = torch.arange(400) % 4
    return from_arrays(x[:300], y[:300], x[300:], y[300:])


def _rows(x: torch.Tensor) -> set[float]:
    return set(x[:, 0].tolist())


def _setup(seed: int, data=None, *settings: str) -> RoundsSetup:
    """The prepared dsgd run of ``seed``, on ``data`` given from Python where given."""
    given = ["data.dataset=arrays"] if data is not None else []
    config = _config("dsgd", *given, f"run.seed={seed}", *settings)
    setup = prepare(plan(config, data=data), data=data)
    assert isinstance(setup, RoundsSetup)
    return setup


def test_the_validation_rows_are_no_agents_and_no_test_rows():
    data = _unique_rows()
    setup = _setup(0, data, "data.validation=0.2")
    dataset = setup.dataset
    assert dataset.x_validation is not None and dataset.x_validation.shape[0] == 60
    held = _rows(dataset.x_validation)
    agents = set().union(*(_rows(dataset.x_train[shard]) for shard in setup.shards))
    assert agents == _rows(dataset.x_train) and len(agents) == 240
    assert not held & agents and not held & _rows(data.x_test)
    assert held | agents == _rows(data.x_train)
    assert setup.problem.validation is not None
    assert torch.equal(setup.problem.validation[0], dataset.x_validation)


def test_every_run_seed_holds_out_the_same_rows_and_splits_the_rest_its_own_way():
    data = _unique_rows()
    first, other = (_setup(seed, data, "data.validation=0.2") for seed in (0, 3))
    assert torch.equal(first.dataset.x_validation, other.dataset.x_validation)
    assert torch.equal(first.dataset.y_validation, other.dataset.y_validation)
    assert torch.equal(first.dataset.x_train, other.dataset.x_train)
    assert any(not torch.equal(a, b) for a, b in zip(first.shards, other.shards, strict=True))
    drawn = _setup(0, data, "data.validation=0.2", "data.validation_seed=1")
    assert not torch.equal(drawn.dataset.x_validation, first.dataset.x_validation)


def test_no_validation_split_leaves_the_training_set_and_the_agents_split_as_they_were():
    setup = _setup(3)
    explicit = _setup(3, None, "data.validation=0")
    info = DATASETS["blobs"]
    for built in (setup, explicit):
        assert built.dataset.x_train.shape[0] == info.train
        assert built.dataset.validation is None and built.problem.validation is None
    data = setup.config.data
    expected = partition(
        setup.dataset.y_train,
        6,
        data.partition,
        labels_per_agent=data.labels_per_agent,
        alpha=data.dirichlet_alpha,
        num_classes=setup.dataset.num_classes,
        seed=derive_seed(3, "partition"),
    )
    for shards in (setup.shards, explicit.shards):
        assert all(torch.equal(a, b) for a, b in zip(shards, expected, strict=True))
    result = run(_config("dsgd"))
    assert all(not VALIDATION_FIELDS & set(record) for record in result.records)
    assert not SUMMARY_FIELDS & set(result.to_dict())


@pytest.mark.parametrize(
    ("preset", "settings"),
    [
        ("dsgd", []),
        ("detsgrad", ["run.eval_agents=3"]),
        ("centralized", []),
        ("asysg-con", ["algorithm.workers=2"]),
        ("sync-ps", ["algorithm.workers=2"]),
        ("asysg-incon", ["algorithm.workers=2"]),
    ],
)
def test_records_and_summary_carry_the_validation_split(tmp_path, preset, settings):
    run(_config(preset, "data.validation=0.2", *settings), tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    for number, record in enumerate(records):
        check_record(f"metrics.jsonl:{number + 1}", record)
        assert len(record["validation_accuracy"]) == len(record["test_accuracy"])
        assert len(record["validation_loss"]) == len(record["test_loss"])
    check_summary("summary.json", summary)
    assert SUMMARY_FIELDS <= set(summary)
    final = records[-1]["validation_accuracy"]
    assert summary["validation_accuracy"]["per_agent"] == final
    assert summary["validation_accuracy"]["mean"] == sum(final) / len(final)
    assert summary["validation_last_k"]["k"] == min(5, len(records))
    assert main(["report", str(tmp_path / "run"), "--out", str(tmp_path / "report")]) == 0
    k = min(5, len(records))
    assert f"last-{k} val acc %" in (tmp_path / "report" / "report.md").read_text()


def test_the_records_validation_accuracy_is_the_agents_on_the_held_out_rows():
    config = _config("dsgd", "data.validation=0.25")
    setup = prepare(plan(config))
    result = run(config, setup=setup)
    x, y = setup.problem.validation
    accuracy, loss = setup.problem.model.evaluate(result.parameters, x, y)
    assert result.records[-1]["validation_accuracy"] == accuracy.tolist()
    assert result.records[-1]["validation_loss"] == pytest.approx(loss.tolist(), rel=1e-6)
    assert x.shape[0] == round(0.25 * DATASETS["blobs"].train)


def test_a_hogwild_run_measures_its_shared_model_on_the_validation_split():
    config = load_experiment(
        "hogwild",
        [
            "data.dataset=blobs",
            "model.hidden=[8]",
            "run.iterations=40",
            "run.eval_every=40",
            "algorithm.workers=2",
            "algorithm.compare_single=false",
            "data.validation=0.2",
        ],
    ).runs[0][1]
    result = run(config)
    for record in result.records:
        assert len(record["validation_accuracy"]) == 1 and len(record["validation_loss"]) == 1
    assert SUMMARY_FIELDS <= set(result.to_dict())


def test_a_regression_run_has_a_validation_loss_and_no_validation_accuracy():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(120, 4, generator=generator)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 0.0]) + 0.1
    data = from_arrays(x[:96], y[:96], x[96:], y[96:], task="regression")
    settings = ["data.partition=iid", "topology.agents=3", "model.name=linear"]
    config = load_experiment("dsgd", [*SMALL_SGD, *settings, "data.validation=0.25"]).runs[0][1]
    result = murmur.run(config, data=data)
    final = result.records[-1]
    assert final["validation_accuracy"] is None and len(final["validation_loss"]) == 3
    extra = result.extra
    assert extra["validation_accuracy"]["mean"] is None
    assert extra["validation_loss"] == pytest.approx(sum(final["validation_loss"]) / 3)
    assert "validation_last_k" not in extra and "validation_best" not in extra


def _record(iteration: int, validation: list[float], test: float) -> dict:
    return {
        "iteration": iteration,
        "accuracy_mean": test,
        "validation_accuracy": validation,
        "validation_loss": [1.0] * len(validation),
    }


def test_the_summary_chooses_by_validation_and_reports_the_test_accuracy_there():
    records = [
        _record(0, [0.25, 0.25], 0.3),
        _record(10, [0.5, 1.0], 0.6),  # the best validation mean, 0.75
        _record(20, [0.75, 0.75], 0.9),  # as good: the first of them is the best
        _record(30, [0.5, 0.5], 0.95),
    ]
    summary = validation_over_run(records, 2)
    assert summary["validation_last_k"] == {"k": 2, "mean": 0.625, "min": 0.625, "max": 0.625}
    assert summary["validation_best"] == {
        "iteration": 10,
        "mean": 0.75,
        "min": 0.5,
        "max": 1.0,
        "test_mean": 0.6,
    }
    assert summary["validation_accuracy"]["per_agent"] == [0.5, 0.5]
    assert validation_over_run([{"iteration": 0, "accuracy_mean": 0.5}], 2) == {}


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("data.validation=1.5", "data.validation must be from 0"),
        ("data.validation=-0.5", "data.validation must be from 0"),
        ("data.validation=nan", "data.validation must be"),
        ("data.validation=0.9999", "data.validation = 0.9999 leaves"),
        ("data.validation_path=held.csv", "data.validation_path is for data.dataset"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, setting, message):
    out = str(tmp_path / "run")
    assert main(["run", "dsgd", "--set", setting, "--out", out]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "run").exists()


def test_layer_wise_runs_refuse_a_validation_split_naming_what_measures_one(capsys, tmp_path):
    out = str(tmp_path / "run")
    assert main(["run", "ssfn-vowel", "--set", "data.validation=0.1", "--out", out]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "ssfn measures no validation split (data.validation = 0.1)" in line
    assert "dsgd" in line and "asysg-con" in line and "hogwild" in line
