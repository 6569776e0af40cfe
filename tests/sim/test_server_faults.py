"""Workers of an asynchronous server that crash and come back (``faults.crashes``):
the others carry on, the crashed ones lose what they were doing and start again from
the server's model, replayed from the seed; sync-ps refuses crashes."""

from __future__ import annotations

import json

import pytest

from murmur.cli import main
from murmur.config import load_experiment
from murmur.errors import UsageError
from murmur.experiment import run
from murmur.reporting.run_schema import check_record, check_summary
from murmur.training.runs import check_run

SMALL = [
    "data.dataset=blobs",
    "model.hidden=[8]",
    "data.batch_size=8",
    "algorithm.workers=4",
    "run.iterations=200",
    "run.eval_every=20",
    "timing.compute_noise=exponential",
]
CRASH = ["faults.crashes=[1, 2]", "faults.crash_at=60", "faults.rejoin_at=120"]


def _config(algorithm: str, *settings: str):
    return load_experiment(algorithm, [*SMALL, *settings]).runs[0][1]


@pytest.mark.parametrize("algorithm", ["asysg-con", "asysg-incon"])
def test_a_crash_that_never_comes_changes_nothing(algorithm):
    plain = run(_config(algorithm))
    late = run(_config(algorithm, "faults.crashes=2", "faults.crash_at=1000"))
    assert late.accuracy == plain.accuracy
    assert late.events_per_agent == plain.events_per_agent
    assert late.extra["virtual_seconds"] == plain.extra["virtual_seconds"]
    assert late.extra["crashed_agents"] == late.extra["lost_gradients"] == 0


def test_crashed_workers_miss_their_share_and_come_back(tmp_path):
    plain = run(_config("asysg-con"))
    crashed = run(_config("asysg-con", *CRASH), tmp_path / "run")
    assert crashed.iterations == plain.iterations == 200  # the others carried on
    pushes = crashed.events_per_agent
    assert pushes[1] < min(pushes[0], pushes[3]) and pushes[2] < min(pushes[0], pushes[3])
    never = run(_config("asysg-con", *CRASH[:2])).events_per_agent
    assert pushes[1] > never[1] + 10 and pushes[2] > never[2] + 10  # they came back
    assert crashed.extra["crashed_agents"] == 0
    records = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    for number, record in enumerate(records):
        check_record(f"metrics.jsonl:{number + 1}", record)
    down = {record["iteration"]: record["crashed_agents"] for record in records}
    assert down[40] == 0 and down[60] == down[100] == 2 and down[120] == down[200] == 0
    check_summary("summary.json", json.loads((tmp_path / "run" / "summary.json").read_text()))


def test_workers_that_never_come_back_leave_the_updates_to_the_others():
    crashed = run(_config("asysg-con", "faults.crashes=3", "faults.crash_at=0"))
    alive = [worker for worker, pushes in enumerate(crashed.events_per_agent) if pushes > 0]
    assert len(alive) == 1 and crashed.events_per_agent[alive[0]] == 200
    assert crashed.extra["crashed_agents"] == 3


def test_crashes_are_replayed_from_the_seed():
    config = _config("asysg-con", "faults.crashes=2", "faults.crash_at=50")
    first, again = run(config), run(config)
    assert first.accuracy == again.accuracy and first.events_per_agent == again.events_per_agent
    assert first.extra["lost_gradients"] == again.extra["lost_gradients"]
    other = run(config.replace(**{"run.seed": "1"}))  # crashes workers 2 and 3, not 0 and 3
    assert other.events_per_agent != first.events_per_agent


def test_sync_ps_refuses_crashes_and_says_why():
    with pytest.raises(
        UsageError, match="^sync-ps cannot run with .*: its barrier waits for every worker"
    ):
        check_run(_config("sync-ps", "faults.crashes=1"))


def test_crashing_every_worker_is_one_line(capsys, tmp_path):
    code = main(
        [
            "run",
            "asysg-con",
            *(f"--set={s}" for s in SMALL),
            "--set=faults.crashes=4",
            "--out",
            str(tmp_path / "run"),
            "--quiet",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1
    assert "faults.crashes = 4 would crash all 4 workers" in err
    assert not (tmp_path / "run").exists()
