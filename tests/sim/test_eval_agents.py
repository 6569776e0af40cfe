"""run.eval_agents: a fixed seeded sample of agents measured, the same numbers as
measuring them all, and said so in the records and the summary."""

from __future__ import annotations

import json

import pytest
from small_runs import SMALL_SGD

from murmur.config import load_experiment
from murmur.errors import UsageError
from murmur.experiment import run
from murmur.metrics.evaluation import EVAL_AGENTS_AUTO, measured_agents
from murmur.reporting.run_schema import check_record, check_summary
from murmur.training.plan import plan

SETTINGS = [*SMALL_SGD, "topology.agents=12", "faults.crashes=3", "faults.crash_at=20"]


def _config(*settings: str):
    return load_experiment("dsgd", [*SETTINGS, *settings]).runs[0][1]


def test_a_sample_measures_the_same_numbers_as_measuring_every_agent(tmp_path):
    every = run(_config(), tmp_path / "every")
    sampled = run(_config("run.eval_agents=5"), tmp_path / "sampled")
    chosen = sampled.extra["measured_agents"]
    assert len(chosen) == 5 and chosen == sorted(set(chosen))
    assert "measured_agents" not in every.extra
    for full, part in zip(every.records, sampled.records, strict=True):
        assert part["measured_agents"] == chosen  # the same agents at every evaluation
        assert part["test_accuracy"] == [full["test_accuracy"][i] for i in chosen]
        assert part["test_loss"] == [full["test_loss"][i] for i in chosen]
        assert part["model_accuracy"] == full["model_accuracy"]  # of every agent's average
        assert part["events_per_agent"] == full["events_per_agent"]  # counters: everyone
    assert sampled.accuracy["per_agent"] == [every.accuracy["per_agent"][i] for i in chosen]
    summary = json.loads((tmp_path / "sampled" / "summary.json").read_text())
    check_summary("summary.json", summary)
    assert summary["measured_agents"] == chosen
    for number, line in enumerate((tmp_path / "sampled" / "metrics.jsonl").open()):
        check_record(f"metrics.jsonl:{number + 1}", json.loads(line))


def test_live_accuracy_is_over_the_sampled_agents_alive():
    sampled = run(_config("run.eval_agents=6"))
    last = sampled.records[-1]
    assert "live_accuracy_mean" in last and last["crashed_agents"] == 3


def test_the_sample_is_drawn_from_the_seed_and_all_agents_when_it_would_cover_them():
    assert measured_agents(0, EVAL_AGENTS_AUTO, seed=0) is None
    assert measured_agents(10, 10, seed=0) is None
    drawn = measured_agents(0, 10_000, seed=3)
    assert drawn is not None and drawn.numel() == EVAL_AGENTS_AUTO
    assert drawn.tolist() == measured_agents(0, 10_000, seed=3).tolist()
    assert drawn.tolist() != measured_agents(0, 10_000, seed=4).tolist()


def test_a_distributed_run_refuses_a_sample():
    with pytest.raises(UsageError, match="run.eval_agents = 5 samples agents in the simulator"):
        plan(_config("run.eval_agents=5", "faults.crashes=0"), runtime="distributed")


def test_a_negative_count_is_refused_in_one_line():
    with pytest.raises(UsageError, match="run.eval_agents must be >= 0"):
        _config("run.eval_agents=-1")


def test_the_report_says_which_agents_were_measured(tmp_path):
    from murmur.cli import main

    run(_config("run.eval_agents=4"), tmp_path / "runs" / "sampled")
    assert main(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "report")]) == 0
    text = (tmp_path / "report" / "report.md").read_text()
    chosen = json.loads((tmp_path / "runs" / "sampled" / "summary.json").read_text())
    agents = ", ".join(str(agent) for agent in chosen["measured_agents"])
    assert "accuracy over 4 of its 12 agents" in text and f"agents {agents};" in text
