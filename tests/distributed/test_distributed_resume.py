"""Checkpoints of the distributed runtime: a rank killed mid-run, the run resumed from
the newest iteration every rank saved (by hand, by ``murmur launch --resume``, or by
torchrun's restarts) gives the uninterrupted run's records; a folder that cannot be
resumed is refused in one line and left as it was."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from ranks import Fault, free_port, kill_rank, launch, read_records, run_ranks, start_launch
from test_distributed import DETSGRAD, DSGD, SPARQ, TRACKING, one_line_error, write_config

from murmur.cli import main
from murmur.distributed.checkpoints import (
    FOLDER,
    diameter,
    kept_checkpoints,
    rank_file,
    saved_iterations,
)
from murmur.topology.graphs import complete, ring, star

EVERY = ["--set", "run.checkpoint_every=20"]


def comparable(folder: Path) -> tuple[dict, list[dict]]:
    """The summary and records of a run, without what takes real time."""
    summary = json.loads((folder / "summary.json").read_text())
    # what takes real time, and the machine entry, which says how the ranks were started
    timed = ("wall_seconds", "train_seconds", "samples_per_second", "run_dir", "machine")
    records = [{k: v for k, v in r.items() if k != "wall_seconds"} for r in read_records(folder)]
    return {k: v for k, v in summary.items() if k not in timed}, records


def whole_and_stopped(
    tmp_path: Path, algorithm: str, settings: tuple[str, ...] = ()
) -> tuple[Path, Path]:
    """An uninterrupted 4-rank run saving every 20 iterations, and the same run whose
    rank 2 was killed during iteration 56 (with ``settings`` given by ``--set``)."""
    path = write_config(tmp_path, algorithm, iterations=100)
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    flags = [item for setting in settings for item in ("--set", setting)]
    argv = ["run", str(path), "--runtime", "distributed", *EVERY, *flags]
    report, stderr = run_ranks(tmp_path / "a", [*argv, "--out", str(whole)])
    assert report["codes"] == {"0": 0, "1": 0, "2": 0, "3": 0}, stderr
    kill = Fault(ranks=(2,), after=55, fail=signal.SIGKILL)
    report, stderr = run_ranks(tmp_path / "b", [*argv, "--out", str(stopped)], faults=(kill,))
    assert report["codes"]["2"] == -signal.SIGKILL
    assert json.loads((stopped / "summary.json").read_text())["status"] == "failed"
    assert [saved_iterations(stopped / FOLDER, rank) for rank in range(4)] == [[20, 40]] * 4
    return whole, stopped


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    return whole_and_stopped(tmp_path_factory.mktemp("dsgd"), DSGD)


def contents(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    "algorithm",
    [
        # the optimizers' case kills and resumes detsgrad (with momentum) in the default run
        pytest.param(DETSGRAD, marks=pytest.mark.slow),
        pytest.param(SPARQ, marks=pytest.mark.slow),
        pytest.param(TRACKING, marks=pytest.mark.slow),
    ],
    ids=["detsgrad", "sparq", "detsgrad-gt"],
)
def test_a_killed_run_resumed_by_hand_gives_the_uninterrupted_run(tmp_path, algorithm):
    whole, stopped = whole_and_stopped(tmp_path, algorithm)
    resume = ["run", "--resume", str(stopped), "--runtime", "distributed"]
    report, stderr = run_ranks(tmp_path / "c", resume)
    assert report["codes"] == {"0": 0, "1": 0, "2": 0, "3": 0}, stderr
    assert comparable(stopped) == comparable(whole)


def launch_resume(folder: Path) -> subprocess.CompletedProcess[str]:
    """``murmur launch --resume folder`` on a free port, to its end."""
    return launch(["launch", "--resume", str(folder), "--timeout", "10"], timeout=120)


def test_launch_resume_continues_a_killed_run_to_the_uninterrupted_runs_records(tmp_path, runs):
    whole, stopped = runs
    folder = tmp_path / "copy"
    shutil.copytree(stopped, folder)
    done = launch_resume(folder)
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith(f"resuming {folder} from iteration 40\n")
    assert comparable(folder) == comparable(whole)
    # the last iteration is saved too
    assert [saved_iterations(folder / FOLDER, rank) for rank in range(4)] == [[80, 100]] * 4


def damage_truncated(folder: Path) -> None:
    path = rank_file(folder / FOLDER, 3, 40)
    path.write_bytes(path.read_bytes()[:100])


def damage_corrupt(folder: Path) -> None:
    path = rank_file(folder / FOLDER, 1, 20)
    data = bytearray(path.read_bytes())
    data[-60:] = b"\xff" * 60  # the zip's directory
    path.write_bytes(bytes(data))


def damage_missing(folder: Path) -> None:
    for done in (20, 40):
        rank_file(folder / FOLDER, 2, done).unlink()


def damage_config(folder: Path) -> None:
    config = folder / "config.toml"
    config.write_text(config.read_text().replace("seed = 3", "seed = 4"))


def damage_apart(folder: Path) -> None:
    rank_file(folder / FOLDER, 0, 20).unlink()
    rank_file(folder / FOLDER, 0, 40).rename(rank_file(folder / FOLDER, 0, 60))


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (damage_truncated, "rank3-40.pt is damaged (truncated or not a checkpoint)"),
        (damage_corrupt, "rank1-20.pt is damaged"),
        (damage_missing, "has no checkpoint of rank 2 in checkpoints/"),
        (damage_config, "was saved by a run of another config than"),
        (damage_apart, "share no iteration"),
    ],
    ids=["truncated", "corrupt", "missing", "config", "apart"],
)
def test_launch_resume_refuses_a_folder_it_cannot_continue_and_leaves_it(
    tmp_path, runs, capsys, damage, says
):
    folder = tmp_path / "copy"
    shutil.copytree(runs[1], folder)
    damage(folder)
    before = contents(folder)
    argv = ["launch", "--resume", str(folder), "--quiet", "--port", str(free_port())]
    err = one_line_error(capsys, main(argv))
    assert err.startswith("murmur: error: ") and says in err, err
    assert contents(folder) == before


def test_ranks_resumed_by_hand_without_an_iteration_in_common_all_stop_in_one_line(tmp_path, runs):
    folder = tmp_path / "copy"
    shutil.copytree(runs[1], folder)
    damage_apart(folder)
    report, stderr = run_ranks(
        tmp_path / "c", ["run", "--resume", str(folder), "--runtime", "distributed"]
    )
    assert report["codes"] == {"0": 2, "1": 2, "2": 2, "3": 2}, stderr
    for rank, err in stderr.items():
        assert err.startswith(f"murmur: error: rank {rank}: the ranks hold no checkpoint"), err
        assert err.count("\n") == 1, err


def test_launch_resume_refuses_a_finished_run_another_process_count_and_a_preset(
    tmp_path, runs, capsys
):
    whole, stopped = runs
    err = one_line_error(capsys, main(["launch", "--resume", str(whole)]))
    assert "holds a finished run" in err
    err = one_line_error(capsys, main(["launch", "--resume", str(stopped), "--nproc", "3"]))
    assert "--nproc is 3 but topology.agents is 4" in err
    err = one_line_error(capsys, main(["launch", "--resume", str(stopped), "dsgd"]))
    assert "drop the preset" in err


def test_max_restarts_is_refused_for_what_cannot_continue(capsys):
    launch = ["launch", "--nproc", "4", "dssfn-async-vowel", "--set", "topology.agents=4"]
    err = one_line_error(capsys, main([*launch, "--max-restarts", "1"]))
    assert "--max-restarts restarts runs of synchronous SGD (detsgrad, dsgd" in err
    assert "synchronous dSSFN (dssfn) and the parameter server (asysg-con, sync-ps)" in err
    assert err.endswith("only, not dssfn-async; drop it\n")
    err = one_line_error(capsys, main([*launch, "--set", "run.checkpoint_every=5"]))
    assert "no checkpoints of dssfn-async" in err
    assert "only of synchronous SGD (detsgrad, dsgd" in err
    assert "synchronous dSSFN (dssfn) and the parameter server (asysg-con, sync-ps)" in err


def test_each_rank_keeps_enough_checkpoints_for_the_farthest_rank_to_have_one_in_common():
    assert [diameter(graph) for graph in (ring(4), ring(9), complete(5), star(6))] == [2, 4, 1, 2]
    assert kept_checkpoints(ring(9), 1) == 5  # ranks up to 4 iterations apart
    assert kept_checkpoints(ring(9), 4) == 2
    assert kept_checkpoints(ring(9), 50) == 2
    assert kept_checkpoints(complete(5), 0) == 2
    assert kept_checkpoints(ring(4), 2, span=4) == 5  # SPARQ-SGD: 4 steps between exchanges


# ---- restarts (--max-restarts) ------------------------------------------------------


def launch_run(config: Path, out: Path, *extra: str, nproc: int = 4) -> subprocess.Popen[str]:
    """``murmur launch --nproc NPROC CONFIG`` into ``out`` with ``extra``, left running."""
    argv = ["launch", "--nproc", str(nproc), str(config), "--out", str(out), "--quiet"]
    return start_launch([*argv, "--timeout", "10", *extra])


def digits_config(folder: Path) -> Path:
    """DSGD on the digits set, 1000 iterations: some seconds of training."""
    path = write_config(folder, DSGD, iterations=1000)
    text = path.read_text().replace('"blobs"', '"digits"').replace("[8]", "[16]")
    path.write_text(text)
    return path


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds ranks through /proc")
def test_a_rank_killed_mid_run_is_restarted_and_the_run_ends_as_if_uninterrupted(tmp_path):
    config = digits_config(tmp_path)
    whole, restarted = tmp_path / "whole", tmp_path / "restarted"
    every = ("--set", "run.checkpoint_every=50")
    started = time.monotonic()
    uninterrupted = launch_run(config, whole, *every)
    assert uninterrupted.wait(timeout=180) == 0, uninterrupted.communicate()[1]
    uninterrupted_seconds = time.monotonic() - started

    started = time.monotonic()
    killed = launch_run(config, restarted, *every, "--max-restarts", "1")
    folder = restarted / FOLDER
    err = kill_rank(killed, 2, lambda: all(saved_iterations(folder, r) for r in range(4)))
    restarted_seconds = time.monotonic() - started
    assert killed.returncode == 0, err  # rank 2 was running when it was killed
    got, want = comparable(restarted), comparable(whole)
    assert got[0]["accuracy"]["mean"] == pytest.approx(want[0]["accuracy"]["mean"], abs=1e-6)
    assert got == want
    print(  # the figures of the README
        f"\naccuracy {got[0]['accuracy']['mean']:.6f} (uninterrupted "
        f"{want[0]['accuracy']['mean']:.6f}); wall {restarted_seconds:.1f} s with the kill "
        f"and restart, {uninterrupted_seconds:.1f} s without"
    )


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds ranks through /proc")
def test_a_run_without_checkpoints_restarts_from_the_start_in_the_same_folder(tmp_path):
    config = write_config(tmp_path, DSGD, iterations=2000)
    whole, restarted = tmp_path / "whole", tmp_path / "restarted"
    assert launch_run(config, whole).wait(timeout=180) == 0
    killed = launch_run(config, restarted, "--max-restarts", "1")

    def training() -> bool:  # rank 0 wrote the first record: every rank is past the start
        records = restarted / "metrics.jsonl"
        return records.exists() and records.stat().st_size > 0

    err = kill_rank(killed, 1, training)
    assert killed.returncode == 0, err
    assert comparable(restarted) == comparable(whole)
    assert not (restarted / FOLDER).exists()
