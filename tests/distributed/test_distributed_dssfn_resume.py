"""Checkpoints of synchronous dSSFN in the distributed runtime: every k layers each rank
saves its part; a run whose rank was killed mid-layer, resumed (by hand or by ``murmur
launch --resume``) or restarted by torchrun, gives the uninterrupted run's records and
summary."""

from __future__ import annotations

import json
import shutil
import signal

from ranks import Fault, run_ranks
from test_distributed_resume import comparable, launch_resume

from murmur.distributed.checkpoints import FOLDER, saved_iterations

DSSFN = [
    "--set=topology.agents=4",
    "--set=algorithm.layers=4",
    "--set=algorithm.nodes=20",
    "--set=algorithm.admm_iterations=5",
    "--set=algorithm.gossip_rounds=2",
    "--set=algorithm.tolerance=0",
    "--set=run.checkpoint_every=1",
]


def test_a_dssfn_run_killed_mid_layer_resumed_gives_the_uninterrupted_run(tmp_path):
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    argv = ["run", "dssfn-vowel", *DSSFN, "--runtime", "distributed"]
    report, stderr = run_ranks(tmp_path / "a", [*argv, "--out", str(whole)], limit=90.0)
    assert report["codes"] == {"0": 0, "1": 0, "2": 0, "3": 0}, stderr
    # rank 2 kills itself as it starts layer 3, having saved layers 1 and 2
    kill = Fault(
        ranks=(2,), target="murmur.training.layer_loop:random_weights", after=2, fail=signal.SIGKILL
    )
    report, stderr = run_ranks(
        tmp_path / "b", [*argv, "--out", str(stopped)], limit=90.0, faults=(kill,)
    )
    assert report["codes"]["2"] == -signal.SIGKILL, stderr
    assert json.loads((stopped / "summary.json").read_text())["status"] == "failed"
    assert [saved_iterations(stopped / FOLDER, rank) for rank in range(4)] == [[1, 2]] * 4
    # rank 0 wrote each layer as it ended: the killed run keeps layers 0 to 2
    assert comparable(stopped)[1] == comparable(whole)[1][:3]

    copy = tmp_path / "copy"
    shutil.copytree(stopped, copy)
    done = launch_resume(copy)
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith(f"resuming {copy} from layer 2\n")
    assert comparable(copy) == comparable(whole)

    resume = ["run", "--resume", str(stopped), "--runtime", "distributed"]
    report, stderr = run_ranks(tmp_path / "c", resume, limit=90.0)
    assert report["codes"] == {"0": 0, "1": 0, "2": 0, "3": 0}, stderr
    got, want = comparable(stopped), comparable(whole)
    assert [r["layer"] for r in got[1]] == [0, 1, 2, 3, 4]
    assert got[0]["messages"] > 0
    assert got == want
    # the newest three: the last layer is saved too
    assert [saved_iterations(stopped / FOLDER, rank) for rank in range(4)] == [[2, 3, 4]] * 4
