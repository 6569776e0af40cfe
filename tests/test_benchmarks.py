"""The benchmark scripts run end to end (no timing is asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _quick_run(script: str, *argv: str) -> list[str]:
    """The output lines of ``benchmarks/SCRIPT --quick`` (or of ``ARGV`` instead of
    ``--quick``), which must succeed."""
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *(argv or ["--quick"])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout.splitlines()


def test_simulator_throughput_quick_run_prints_the_ratio_table():
    lines = _quick_run("simulator_throughput.py")
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["N", "method"])
    header = lines[start].split()
    assert header == [
        "N",
        "method",
        "samples/s",
        "ms/step",
        "/centralized",
        "/loop",
        "rest-ms",
        "sent",
        "noise",
    ]
    rows = {}
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        cells = line.split()
        if cells[0] == "rest-ms":
            assert "detsgrad" in cells and "dsgd" in cells
            continue
        rows[(cells[0], cells[1])] = cells
    methods = ["detsgrad", "dsgd", "gradient", "centralized", "loop", "state-pass"]
    assert set(rows) == {(n, m) for n in ("4", "8") for m in methods}
    for (_, method), cells in rows.items():
        if method == "state-pass":
            assert len(cells) == 3 and float(cells[2]) > 0
            continue
        simulated = method in ("detsgrad", "dsgd")
        assert len(cells) == len(header) - (0 if simulated else 2)
        ratios = [float(cell) for cell in cells[4:6]]
        assert all(ratio > 0 for ratio in ratios)
        if method == "dsgd":
            assert float(cells[7]) == 1.0  # DSGD sends every step


def test_hogwild_scaling_quick_run_prints_both_settings_and_the_ratio():
    lines = _quick_run("hogwild_scaling.py")
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["workers", "samples"])
    assert lines[start].split() == [
        "workers",
        "samples",
        "samples/s",
        "noise",
        "cpu_share",
        "accuracy",
        "test_loss",
    ]
    rows = [line.split() for line in lines[start + 1 : start + 3]]
    assert [row[0] for row in rows] == ["1", "2"]
    for row in rows:
        assert row[1] == str(400 * 32)
        assert float(row[2].replace(",", "")) > 0
        assert 0 < float(row[4]) <= 1.01
        assert 0 < float(row[5].rstrip("%")) <= 100
    for prefix in ("speedup 2 processes / 1:", "the machine: 2 independent processes"):
        line = next(line for line in lines if line.startswith(prefix))
        assert float(line.split(":")[-1].split()[0]) > 0


def test_distributed_transport_quick_run_prints_both_tables():
    lines = _quick_run("distributed_transport.py")
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["N", "ms/iter"])
    assert lines[start].split() == [
        "N",
        "ms/iter",
        "messages/iter",
        "headers/iter",
        "us/message",
        "us/(msg+hdr)",
        "noise",
    ]
    rows = [line.split() for line in lines[start + 1 : start + 3]]
    assert [row[0] for row in rows] == ["2", "4"]
    for row in rows:
        assert float(row[1]) > 0
        assert float(row[2]) + float(row[3]) > 0
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["method", "floats"])
    rows = [line.split() for line in lines[start + 1 : start + 9]]
    assert [row[0] for row in rows] == ["bare", "bare+header", "transport", "delta"] * 2
    assert [int(row[1]) for row in rows] == [79_510] * 4 + [1_000_000] * 4
    for row in rows:
        assert float(row[2]) > 0 and float(row[3]) > 0 and float(row[4]) > 0
    overhead = next(line for line in lines if line.startswith("transport overhead"))
    assert "at 79510" in overhead and "at 1000000" in overhead


def test_distributed_dssfn_quick_run_prints_four_rows_and_both_ratios():
    lines = _quick_run("distributed_dssfn.py")
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["algorithm", "delay_s"])
    assert lines[start].split() == [
        "algorithm",
        "delay_s",
        "train_s",
        "accuracy_%",
        "messages",
        "rank0_updates",
        "noise",
        "job_s",
    ]
    rows = [line.split() for line in lines[start + 1 : start + 5]]
    assert [(row[0], float(row[1])) for row in rows] == [
        ("sync", 0.0),
        ("async", 0.0),
        ("sync", 0.001),
        ("async", 0.001),
    ]
    for row in rows:
        assert float(row[2]) > 0
        assert 0 < float(row[3]) <= 100
        assert int(row[4]) > 0
    # 2 layers (layer 0 and 1 more) of 10 ADMM iterations, or of at least 10 updates.
    assert [int(row[5]) for row in rows[::2]] == [20, 20]
    assert all(int(row[5]) >= 20 for row in rows[1::2])
    # Synchronous ADMM sends the same messages whether or not a rank is slow.
    assert rows[0][4] == rows[2][4]
    ratios = [line for line in lines if line.startswith("sync/async train_s")]
    assert len(ratios) == 2
    assert all(float(line.split(":")[-1]) > 0 for line in ratios)


def test_distributed_server_quick_run_prints_six_rows_and_the_ratios():
    lines = _quick_run("distributed_server.py")
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["algorithm", "a"])
    assert lines[start].split() == [
        "algorithm",
        "a",
        "delay_s",
        "its_to_target",
        "s_to_target",
        "train_s",
        "accuracy_%",
        "max_stale",
        "pushes",
        "noise",
        "job_s",
    ]
    rows = [line.split() for line in lines[start + 1 : start + 7]]
    assert [(row[0], float(row[1]), float(row[2])) for row in rows] == [
        ("asysg-con", 0.05, 0.0),
        ("sync-ps", 0.05, 0.0),
        ("sync-ps", 0.15, 0.0),
        ("asysg-con", 0.05, 0.002),
        ("sync-ps", 0.05, 0.002),
        ("sync-ps", 0.15, 0.002),
    ]
    for row in rows:
        iterations, seconds = int(row[3]), float(row[4])  # every quick run reaches the target
        assert iterations > 0 and 0 < seconds <= float(row[5])
        assert 0 < float(row[6]) <= 100
        pushes = [int(count) for count in row[8].split("/")]
        assert len(pushes) == 3 and all(count > 0 for count in pushes)
        if row[0] == "sync-ps":
            # Lockstep: no stale gradient, and every worker pushes once per update.
            assert int(row[7]) == 0
            assert pushes == [iterations] * 3
        else:
            # One gradient per update (the last evaluation reached the target).
            assert sum(pushes) == iterations
    ratios = [line for line in lines if line.startswith("sync-ps a=")]
    assert len(ratios) == 4
    assert all(float(line.split(":")[-1]) > 0 for line in ratios)


def test_distributed_blocks_quick_run_equals_the_simulator_in_every_row():
    lines = _quick_run("distributed_blocks.py")
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["algorithm", "layout"])
    assert lines[start].split() == [
        "algorithm",
        "layout",
        "ms/iter",
        "x",
        "sim",
        "noise",
        "job_s",
        "same",
        "max",
        "|dx|",
    ]
    rows = [line.split() for line in lines[start + 1 : start + 5]]
    assert [(row[0], row[1]) for row in rows] == [
        ("dsgd", "sim"),
        ("dsgd", "2x4"),
        ("detsgrad", "sim"),
        ("detsgrad", "2x4"),
    ]
    for row in rows:
        assert float(row[2]) > 0 and float(row[3]) > 0
        assert (row[6], row[7]) == ("yes", "0")


def test_arock_update_quick_run_prints_both_shards_with_the_same_solution():
    """The range-only update keeps each shard's rank (its samples) and reaches the
    full-basis update's x."""
    lines = _quick_run("arock_update.py")
    assert lines[0].split()[:3] == ["shard", "rank", "width"]
    rows = {line.split()[0]: line.split() for line in lines[1:] if line.strip()}
    assert set(rows) == {"vowel", "satimage"}
    assert (rows["vowel"][1], rows["satimage"][1]) == ("26", "222")
    for cells in rows.values():
        assert float(cells[5]) > 0 and float(cells[6]) <= 1e-9


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_gpu_throughput_says_in_one_line_that_it_needs_a_gpu():
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / "gpu_throughput.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 2
    assert completed.stderr.count("\n") == 1 and "finds no CUDA GPU" in completed.stderr


def test_distributed_transport_breakdown_prints_every_step_of_one_send():
    lines = _quick_run("distributed_transport.py", "--breakdown", "--repeats", "20")
    start = next(i for i, line in enumerate(lines) if line.startswith("step of one send"))
    steps = {line[:40].strip(): float(line[40:]) for line in lines[start + 1 :]}
    assert list(steps)[0] == "bare dist.send, one way" and len(steps) == 7
    assert all(value > 0 for value in steps.values()), steps
    parts = [value for name, value in steps.items() if "one way" not in name]
    assert steps["transport, one way"] >= 0.5 * sum(parts), steps


def test_optimizers_quick_run_prints_a_row_per_algorithm_and_optimizer():
    lines = _quick_run("optimizers.py")
    start = lines.index("| algorithm | optimizer | accuracy | worst agent | messages | MB sent |")
    rows = [line.split("|")[1:-1] for line in lines[start + 2 :] if line.startswith("|")]
    assert [(cells[0].strip(), cells[1].split()[0]) for cells in rows] == [
        (algorithm, optimizer)
        for algorithm in ("dsgd", "detsgrad")
        for optimizer in ("sgd", "momentum", "adam")
    ]
    for cells in rows:
        assert 0 <= float(cells[2].split("±")[0]) <= 1
        assert float(cells[4].split("±")[0]) > 0


@pytest.mark.slow  # five child processes; tests/test_portable.py checks the same numbers
def test_portable_quick_run_prints_every_setting_and_that_the_portable_ones_agree():
    lines = _quick_run("portable.py")
    start = next(i for i, line in enumerate(lines) if line.startswith("setting "))
    rows = [line for line in lines[start + 1 :] if line.strip()][:-1]
    assert [row[:24].strip() for row in rows][:4] == ["default", "avx2", "avx2+cbwr", "portable"]
    for row in rows:
        if row.startswith("portable"):
            assert row[24:].split()[:2] == ["AVX2,", "COMPATIBLE"], row
            assert row[24:].split()[4] == "yes", row  # the portable row's numbers
    assert lines[-1].startswith("portable runs identical: yes")


@pytest.mark.slow  # eight short runs; tests/algorithms/test_beer.py checks the update itself
def test_beer_reference_quick_run_compares_every_split_and_compressor():
    lines = _quick_run("beer_reference.py")
    rows = [line.split("|")[1:-1] for line in lines[2:] if line.startswith("| ")]
    assert [(r[0].strip(), r[1].strip()) for r in rows] == [
        (split, compressor)
        for split in ("one digit per agent", "i.i.d.")
        for compressor in ("topk 1 %", "qsgd 16 levels")
    ]
    for cells in rows:
        ours, theirs = (float(cells[i].split("/")[0]) for i in (2, 3))
        assert 0 <= ours <= 100 and 0 <= theirs <= 100


@pytest.mark.slow  # eight short runs; tests/algorithms/test_motef.py checks the update itself
def test_motef_reference_quick_run_compares_every_split_and_compressor():
    lines = _quick_run("motef_reference.py")
    rows = [line.split("|")[1:-1] for line in lines[2:] if line.startswith("| ")]
    assert [(r[0].strip(), r[1].strip()) for r in rows] == [
        (split, compressor)
        for split in ("one digit per agent", "i.i.d.")
        for compressor in ("topk 1 %", "topk 5 %")
    ]
    for cells in rows:
        ours, theirs, same_start = (float(cells[i].split("/")[0]) for i in (2, 3, 5))
        assert 0 <= ours <= 100 and 0 <= theirs <= 100 and 0 <= same_start <= 100


def test_arock_simulator_quick_run_finds_the_batched_run_equal_and_says_by_how_much():
    lines = _quick_run("arock_simulator.py")
    assert lines[0].split()[:3] == ["dataset", "ssfn", "s"]
    cells = lines[1].split()
    assert cells[0] == "vowel" and len(cells) == 10
    assert float(cells[7]) > 1.0  # updates were made together
    assert 0 <= float(cells[8]) <= float(cells[3])  # the products: part of the batched run


def test_lossy_transport_quick_run_prints_each_run_against_the_ring():
    lines = _quick_run("lossy_transport.py")
    rows = [line.split() for line in lines[2:]]
    assert [row[:2] for row in rows] == [
        [algorithm, run]
        for algorithm in ("dsgd", "detsgrad")
        for run in ("ring", "drop", "matching")
    ]
    assert all(float(row[2]) > 0 for row in rows)
    assert [float(row[3]) for row in rows if row[1] == "ring"] == [1.0, 1.0]


def test_launch_startup_quick_run_reaches_the_first_iteration_before_the_end():
    lines = _quick_run("launch_startup.py")
    seconds = {line.rsplit(None, 2)[0]: float(line.split()[-2]) for line in lines[1:]}
    assert set(seconds) == {
        "import torch",
        "import murmur.cli",
        "first iteration",
        "train",
        "total",
    }
    assert 0 < seconds["first iteration"] < seconds["total"]
    assert seconds["train"] < seconds["total"]


def test_host_syncs_quick_run_finds_no_read_on_a_gpu_s_path_and_the_cpu_s_masks():
    def heads(lines: list[str]) -> dict[str, float]:
        return {line.split(":")[0]: float(line.split()[1]) for line in lines if line[0] != " "}

    gpu = heads(_quick_run("host_syncs.py"))
    # the loss and the clock are read at evaluations only; which agents send, never
    assert gpu == {"dsgd": 0.0, "detsgrad": 0.0}
    lines = _quick_run("host_syncs.py", "--quick", "--cpu-path")
    assert heads(lines)["detsgrad"] > 0.0  # the CPU reads copy_rows' masks
    assert any("murmur/sim/transport.py:" in line for line in lines)


def test_many_agents_quick_run_measures_each_size_with_its_memory_estimate():
    lines = _quick_run("many_agents.py")
    rows = [line.split() for line in lines[2:]]
    assert [row[0] for row in rows] == ["100", "1000"]
    assert rows[0][2] == "1.00"
    for row in rows:
        assert float(row[1]) > 0 and row[5].endswith("GB") and float(row[7]) > 0


def test_topk_selection_quick_run_prints_a_ratio_per_fraction():
    lines = _quick_run("topk_selection.py")
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == ["k"])
    rows = [line.split() for line in lines[start + 1 :]]
    assert [row[0] for row in rows] == ["20", "100", "400"]
    for row in rows:
        assert float(row[3]) == pytest.approx(float(row[2]) / float(row[1]), rel=0.1)
