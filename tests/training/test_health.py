"""The rules that stop a run once it diverged or collapsed: each on records built to
trip it and on a real run, the status, rule and iteration it leaves, a summary with
every field of a finished run, and silence on the default experiment."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import statistics

import pytest
from small_runs import SMALL_SGD

from murmur.algorithms.protocols import Wrapped
from murmur.cli import main
from murmur.config import load_experiment
from murmur.experiment import run
from murmur.reporting.run_schema import check_summary
from murmur.sections import CollapseConfig
from murmur.training.health import (
    ChanceLevels,
    HealthWatch,
    RunShape,
    consensus_medians,
    grew,
    health_watch,
)
from murmur.training.plan import plan
from murmur.training.setup import prepare

DEFAULTS = CollapseConfig()
SHAPE = RunShape(span=1000, consensus=True, chance=ChanceLevels(test=0.1))


def _watch(shape: RunShape = SHAPE, **settings: float) -> HealthWatch:
    return HealthWatch(dataclasses.replace(DEFAULTS, **settings), shape)


def _record(iteration: int, **fields) -> dict:
    record = {"iteration": iteration, "test_loss": [2.3, 2.3], "accuracy_mean": 0.9}
    return {**record, **fields}


def _verdicts(watch: HealthWatch, records: list[dict]) -> list:
    return [watch.observe(record) for record in records]


def _config(preset: str, *settings: str):
    ((_, config),) = load_experiment(preset, list(settings)).runs
    return config


# ---- each rule on records built to trip it --------------------------------------------------


@pytest.mark.parametrize(
    "fields, reason",
    [
        ({"test_loss": [0.5, math.nan]}, "the test loss is no longer finite"),
        ({"train_loss": math.inf}, "the training loss is no longer finite"),
    ],
)
def test_a_loss_that_is_no_longer_a_number_stops_the_run_as_diverged(fields, reason):
    watch = _watch()
    first = _verdicts(watch, [_record(0), _record(100, train_loss=0.4)])
    stop = watch.observe(_record(200, **fields))
    assert first == [None, None]
    assert (stop.rule, stop.iteration, stop.status, stop.reason) == (
        "non-finite",
        200,
        "diverged",
        reason,
    )
    assert watch.observe(_record(300)) is stop  # the first verdict stands


def test_loss_blowup_holds_the_training_loss_to_the_first_evaluations_loss():
    """A mini-batch run's first record has no training loss yet: its test loss (2.3,
    the initial model's) is the reference, which later training losses are held to."""
    watch = _watch()
    records = [
        _record(0, train_loss=None),
        _record(100, train_loss=22.9),  # 9.96 times: not yet
        _record(200, train_loss=23.1, test_loss=[1e9, 1e9]),  # the test loss is not read
    ]
    verdicts = _verdicts(watch, records)
    assert verdicts[:2] == [None, None]
    assert (verdicts[2].rule, verdicts[2].iteration, verdicts[2].status) == (
        "loss-blowup",
        200,
        "diverged",
    )
    assert (
        verdicts[2].reason == "the loss is 23.1, more than 10 times its 2.3 at the first evaluation"
    )


def test_records_without_a_training_loss_are_held_to_their_test_loss():
    """Layer-wise records have no training loss: their test loss, mean over agents."""
    watch = _watch(loss_factor=4.0)
    verdicts = _verdicts(
        watch, [_record(0, test_loss=[1.0, 3.0]), _record(1, test_loss=[8.0, 9.0])]
    )
    assert verdicts[0] is None and verdicts[1].rule == "loss-blowup"


def test_chance_counts_consecutive_evaluations_after_the_warmup_and_collapses():
    watch = _watch(patience=3, chance_margin=0.02, warmup=0.2)  # judged from iteration 200
    accuracies = [0.1, 0.1, 0.1, 0.12, 0.5, 0.1, 0.11, 0.1]  # at 0, 100, ..., 700
    verdicts = _verdicts(
        watch, [_record(100 * i, accuracy_mean=a) for i, a in enumerate(accuracies)]
    )
    # 200 and 300 at chance, 400 above it: the count starts again at 500 and ends at 700
    assert verdicts[:7] == [None] * 7
    stop = verdicts[7]
    assert (stop.rule, stop.iteration, stop.status) == ("chance", 700, "collapsed")
    assert stop.reason == "test accuracy 10.0 % at chance (10.0 %) for 3 evaluations"


def test_chance_reads_the_validation_split_where_records_hold_it():
    shape = dataclasses.replace(SHAPE, chance=ChanceLevels(test=0.1, validation=0.3))
    watch = _watch(shape, patience=1, warmup=0.0)
    # the test accuracy is at chance, the validation accuracy 0.4 > 0.3 + 0.02 is not
    assert watch.observe(_record(0, accuracy_mean=0.1, validation_accuracy=[0.4, 0.4])) is None
    stop = watch.observe(_record(100, accuracy_mean=0.9, validation_accuracy=[0.31, 0.29]))
    assert stop.rule == "chance" and stop.reason.startswith("validation accuracy 30.0 %")


def test_regression_runs_have_no_chance_rule():
    shape = dataclasses.replace(SHAPE, chance=None)
    watch = _watch(shape, patience=1, warmup=0.0)
    assert _verdicts(watch, [_record(i, accuracy_mean=None) for i in range(5)]) == [None] * 5


def _curve(distances: list[float], every: int = 100) -> list[dict]:
    return [_record(every * i, consensus_distance=distance) for i, distance in enumerate(distances)]


def test_a_consensus_distance_that_keeps_growing_stops_the_run_as_diverged():
    growing = [0.1 * 1.3**i for i in range(20)]
    verdicts = _verdicts(_watch(), _curve(growing))
    stopped = [verdict for verdict in verdicts if verdict is not None]
    first = verdicts.index(stopped[0])
    assert (stopped[0].rule, stopped[0].status) == ("consensus-growing", "diverged")
    # at evaluation k the last five's median (at k - 2) over the middle five's (at k / 2)
    # is 1.3 ** (k / 2 - 2): more than 3 times from k = 13 on, and above 0.5 from then on
    assert first == 13 and stopped[0].iteration == 1300
    assert stopped[0].reason == (
        "the consensus distance grew from 0.483 around iteration 650 to 1.79 over the last 5 "
        "evaluations"
    )


@pytest.mark.parametrize(
    "distances, shape",
    [
        ([2.0] * 10 + [1.0] * 10 + [0.2] * 10, SHAPE),  # settles
        ([0.3] * 29 + [30.0], SHAPE),  # one evaluation after a swing
        ([0.01 * 1.3**i for i in range(16)], SHAPE),  # grows, but stays below the floor
        ([0.1 * 1.3**i for i in range(20)], dataclasses.replace(SHAPE, consensus=False)),
    ],
    ids=["settles", "swing", "below-floor", "not-decentralized"],
)
def test_consensus_that_settles_swings_once_or_stays_small_is_not_growth(distances, shape):
    assert _verdicts(_watch(shape), _curve(distances)) == [None] * len(distances)


def test_the_consensus_rule_waits_for_the_warmup_and_twice_its_window():
    growing = [0.1 * 2.0**i for i in range(12)]
    early = _verdicts(_watch(consensus_evaluations=3), _curve(growing))
    assert [v.iteration for v in early if v is not None][0] == 500  # 6 evaluations: 0..500
    late = _verdicts(_watch(consensus_evaluations=3, warmup=0.9), _curve(growing))
    assert [v.iteration for v in late if v is not None][0] == 900


def test_consensus_medians_are_those_of_the_whole_curve_sorted_by_distance_to_the_middle():
    """The medians over a window around the middle equal those of the script's sort of
    the whole curve (ties: the earlier evaluation), on curves of uneven spacing."""
    stream = random.Random(0)
    for _ in range(200):
        size = stream.randint(1, 40)
        iterations = sorted(stream.sample(range(1000), size))
        distances = [stream.random() for _ in range(size)]
        window = stream.randint(1, 7)
        curve = list(zip(iterations, distances, strict=True))
        nearest = sorted(curve, key=lambda point: abs(point[0] - iterations[-1] / 2))[:window]
        expected = (
            statistics.median(value for _, value in nearest),
            statistics.median(distances[-window:]),
        )
        assert consensus_medians(iterations, distances, window) == expected
    assert grew(0.2, 0.61, 3.0, 0.5) and not grew(0.2, 0.59, 3.0, 0.5)
    assert not grew(0.1, 0.45, 3.0, 0.5)  # below the floor


# ---- which runs the rules judge --------------------------------------------------------------


def test_which_rules_a_run_is_held_to():
    sgd = prepare(plan(_config("dsgd", *SMALL_SGD)))
    watch = health_watch(sgd)
    assert watch is not None and watch.shape.consensus and watch.shape.span == 60
    assert watch.shape.chance == ChanceLevels(test=pytest.approx(0.258))  # blobs' test split
    off = prepare(plan(_config("dsgd", *SMALL_SGD, "collapse.enabled=false")))
    assert health_watch(off) is None
    distributed = dataclasses.replace(
        sgd, plan=dataclasses.replace(sgd.plan, runtime="distributed")
    )
    assert health_watch(distributed) is not None  # rank 0 judges, every rank stops
    arock = prepare(plan(_config("dssfn-async-vowel", "algorithm.layers=2")))
    assert health_watch(arock) is not None
    arock_ranks = dataclasses.replace(
        arock, plan=dataclasses.replace(arock.plan, runtime="distributed")
    )
    assert health_watch(arock_ranks) is None  # no shared evaluation: the non-finite check
    faults = prepare(plan(_config("dsgd", *SMALL_SGD, "faults.drop=0.1")))
    assert not health_watch(faults).shape.consensus  # cut-off agents drift apart by design
    centralized = prepare(plan(_config("centralized", *SMALL_SGD)))
    assert not health_watch(centralized).shape.consensus
    layers = prepare(plan(_config("ssfn-vowel", "algorithm.layers=4")))
    layer_watch = health_watch(layers)
    assert layer_watch.shape.span == 4 and not layer_watch.shape.consensus


# ---- real runs ------------------------------------------------------------------------------

AT_CHANCE = ["run.iterations=100", "run.eval_every=10", "algorithm.b=1e-6"]
"""DSGD on the default experiment's split (one digit per agent) without mixing: each
agent learns to answer its own digit, 10 % of the test set."""


def test_a_run_at_chance_is_stopped_as_collapsed_with_a_complete_summary(tmp_path):
    result = run(_config("dsgd", *AT_CHANCE), tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "collapsed" and result.status == "collapsed"
    assert summary["stopped"] == {
        "rule": "chance",
        "iteration": 40,  # evaluations 20, 30 and 40 after the warm-up of 20
        "reason": "test accuracy 10.0 % at chance (10.0 %) for 3 evaluations",
    }
    check_summary("summary.json", summary)  # every field of a finished run
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [record["iteration"] for record in records] == [0, 10, 20, 30, 40]
    assert summary["iterations"] == 40 and summary["samples"] == 40 * 10 * 32
    assert summary["messages"] == 40 * 20 and summary["full_exchange"]["messages"] == 40 * 20
    assert summary["accuracy"]["mean"] == pytest.approx(records[-1]["accuracy_mean"])
    assert (tmp_path / "run" / "model.pt").is_file()

    finished = run(_config("dsgd", *AT_CHANCE, "collapse.enabled=false"), tmp_path / "off")
    assert finished.status == "finished" and finished.stopped is None
    assert finished.iterations == 100 and len(finished.records) == 11


def test_with_a_validation_split_the_chance_rule_reads_its_accuracy(tmp_path):
    result = run(_config("dsgd", *AT_CHANCE, "data.validation=0.1"), tmp_path / "run")
    assert result.status == "collapsed" and result.stopped["iteration"] == 40
    assert result.stopped["reason"] == (
        "validation accuracy 10.0 % at chance (10.0 %) for 3 evaluations"
    )


@pytest.mark.parametrize(
    "preset, settings, rule, iteration",
    [
        ("dsgd", ["algorithm.a=5"], "loss-blowup", 10),  # 2.4e2 against 1.46 at the start
        ("detsgrad", ["algorithm.a=1e30"], "non-finite", 10),
        ("asysg-con", ["algorithm.a=1e30"], "non-finite", 10),  # a parameter server
    ],
)
def test_a_step_too_large_is_stopped_as_diverged(tmp_path, preset, settings, rule, iteration):
    fast = ["data.dataset=blobs", "model.hidden=[8]", "topology.agents=4"]
    config = _config(preset, *fast, "run.iterations=60", "run.eval_every=10", *settings)
    result = run(config, tmp_path / "run")
    assert (result.status, result.stopped["rule"]) == ("diverged", rule)
    assert result.stopped["iteration"] == iteration == result.iterations
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    check_summary("summary.json", summary)


class Repelling(Wrapped):
    """DSGD without mixing whose agents are pushed apart after every step: each one's
    distance to the average grows by ``push`` per step."""

    def __init__(self, algorithm, push: float) -> None:
        super().__init__(algorithm)
        self.push = push

    def step(self, state, grads, iteration, transport):
        state = self.algorithm.step(state, grads, iteration, transport)
        params = self.algorithm.params(state)
        average = params.mean(dim=0, keepdim=True)
        params.sub_(average).mul_(1 + self.push).add_(average)
        return state


def test_agents_pushed_apart_are_stopped_as_diverged_by_their_consensus_distance(tmp_path):
    settings = ["data.partition=iid", "algorithm.a=0.05", "algorithm.b=1e-6"]
    config = _config("dsgd", *SMALL_SGD, "run.iterations=400", "run.eval_every=10", *settings)
    setup = prepare(plan(config))
    setup = dataclasses.replace(setup, algorithm=Repelling(setup.algorithm, 0.01))
    result = run(setup.plan, tmp_path / "run", setup=setup)
    assert (result.status, result.stopped["rule"]) == ("diverged", "consensus-growing")
    assert result.stopped["iteration"] == result.iterations == 200
    assert result.accuracy["mean"] == 1.0  # the loss and accuracy said nothing yet


@pytest.mark.parametrize(
    "seed", [0, *(pytest.param(seed, marks=pytest.mark.slow) for seed in range(1, 5))]
)
def test_the_default_experiment_is_never_stopped(tmp_path, seed):
    """DSGD, DETSGRAD, DETSGRAD-GT and centralized SGD on mnist5k (one digit per agent),
    seeds 0-4 (one test each, so that they run side by side; seeds 1-4 with -m slow),
    400 iterations: none at chance after the warm-up (the lowest, 23 %, at 80), no loss
    above half its first, no consensus distance that grew."""
    out = tmp_path / "out"
    argv = ["run", "--set", "run.iterations=400", "--set", "run.eval_every=40"]
    assert main([*argv, "--seeds", str(seed), "--quiet", "--out", str(out)]) == 0
    summaries = [json.loads(path.read_text()) for path in out.glob("*/seed-*/summary.json")]
    assert len(summaries) == 4
    assert {summary["status"] for summary in summaries} == {"finished"}
    assert not any("stopped" in summary for summary in summaries)


def test_a_stopped_run_is_not_resumed(tmp_path, capsys):
    folder = tmp_path / "run"
    run(_config("dsgd", *AT_CHANCE, "run.checkpoint_every=10"), folder)
    assert main(["run", "--resume", str(folder), "--quiet"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        f"murmur: error: {folder} holds a run that a rule stopped (collapsed); there is "
        "nothing to resume (run it again with collapse.enabled = false to train it to its end)"
    )
