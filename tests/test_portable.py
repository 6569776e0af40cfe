"""Portable numbers (``run.portable``, ``--portable``, ``MURMUR_PORTABLE=1``): the
kernels are pinned before torch computes, whatever the environment asks for, every
rank of a launch inherits them, summary.json says what computed, and a process that
computed with other kernels is refused.

Pinning changes the process for good, so every pinned run is a child process; the
tests in this process check only what is refused before anything is pinned."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from distributed.ranks import launch
from small_runs import SMALL_SGD

from murmur import portable
from murmur.cli import main
from murmur.config import load_experiment
from murmur.errors import UsageError
from murmur.training.plan import plan

SETS = [arg for item in SMALL_SGD for arg in ("--set", item)]
OTHER_KERNELS = {"ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "AUTO", "OMP_NUM_THREADS": "2"}
"""An environment that asks for other kernels than the pinned ones."""


def kernels_asked(environment: dict[str, str]) -> dict[str, str]:
    """This process's environment less its kernel settings, ``environment`` on top."""
    base = {k: v for k, v in os.environ.items() if k not in portable.ENVIRONMENT}
    return base | environment


def murmur(argv: list[str], environment: dict[str, str], limit: float = 90) -> str:
    """``python -m murmur ARGV`` in a child with ``environment`` on top of this one's
    (less its kernel settings); its stdout. It must succeed."""
    done = subprocess.run(
        [sys.executable, "-m", "murmur", *argv],
        env=kernels_asked(environment),
        capture_output=True,
        text=True,
        timeout=limit,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def numbers(folder: Path) -> tuple[dict, list[dict]]:
    """What a run computed: its summary but for times and machine, its records but for
    their wall time."""
    summary = json.loads((folder / "summary.json").read_text())
    timed = ("wall_seconds", "train_seconds", "samples_per_second", "run_dir", "machine")
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    kept = [{k: v for k, v in r.items() if k != "wall_seconds"} for r in records]
    return {k: v for k, v in summary.items() if k not in timed}, kept


def assert_pinned(folder: Path) -> None:
    machine = json.loads((folder / "summary.json").read_text())["machine"]
    assert machine["portable"] is True, machine
    assert (machine["cpu_capability"], machine["mkl_cbwr"], machine["threads"]) == (
        "AVX2",
        "COMPATIBLE",
        1,
    )
    assert machine["onednn"] is False
    assert machine["environment"]["ATEN_CPU_CAPABILITY"] == "avx2"
    assert machine["environment"]["MURMUR_PORTABLE"] == "1"
    assert machine["blas"] == "mkl" and machine["torch"]


def test_flag_and_switch_pin_over_other_kernels_and_give_the_same_numbers(tmp_path):
    """``--portable`` under an environment that asks for AVX-512 kernels and MKL's own
    path, and ``MURMUR_PORTABLE=1`` under one that asks for the default kernels, both
    compute with the pinned kernels: the same numbers, bit for bit."""
    flag, switch = tmp_path / "flag", tmp_path / "switch"
    murmur(["run", "dsgd", *SETS, "--portable", "--quiet", "--out", str(flag)], OTHER_KERNELS)
    asked = {"ATEN_CPU_CAPABILITY": "default", portable.SWITCH: "1"}
    murmur(["run", "dsgd", *SETS, "--quiet", "--out", str(switch)], asked)
    for folder in (flag, switch):
        assert_pinned(folder)
        assert tomllib.loads((folder / "config.toml").read_text())["run"]["portable"] is True
    assert numbers(flag) == numbers(switch)


def test_a_run_without_portable_says_what_it_computed_with(tmp_path):
    folder = tmp_path / "run"
    murmur(["run", "dsgd", *SETS, "--quiet", "--out", str(folder)], {"MKL_CBWR": "AUTO"})
    machine = json.loads((folder / "summary.json").read_text())["machine"]
    assert machine["portable"] is False
    assert machine["mkl_cbwr"] == "AUTO" and machine["environment"]["MKL_CBWR"] == "AUTO"


def test_a_config_of_run_portable_pins_and_check_says_so(tmp_path):
    out = murmur(
        ["run", "dsgd", *SETS, "--set", "run.portable=true", "--check", "--out", str(tmp_path)],
        OTHER_KERNELS,
    )
    assert "checked: 1 run" in out and not any(tmp_path.iterdir())


def test_launch_hands_every_rank_the_pinned_environment(tmp_path):
    out = tmp_path / "run"
    argv = ["launch", "--nproc", "2", "dsgd", *SETS, "--portable"]
    argv += ["--set", "topology.agents=2", "--set", "data.partition=iid"]
    argv += ["--out", str(out), "--quiet", "--timeout", "20"]
    done = launch(argv, timeout=120, env=kernels_asked(OTHER_KERNELS))
    assert done.returncode == 0, done.stderr
    assert_pinned(out)
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["runtime"], summary["world_size"]) == ("distributed", 2)


def test_rank_environment_carries_the_pins_of_a_portable_plan(monkeypatch):
    from murmur.distributed import launch

    for name in [*portable.ENVIRONMENT, "GLOO_SOCKET_IFNAME"]:
        monkeypatch.setenv(name, "")  # what it was comes back after the test
        monkeypatch.delenv(name)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx512")
    ((_, config),) = load_experiment(
        "dsgd", [*SMALL_SGD, "topology.agents=2", "data.partition=iid"]
    ).runs
    checked = plan(config, "distributed", world=2)
    launch.rank_environment(checked)
    assert portable.SWITCH not in os.environ and os.environ["ATEN_CPU_CAPABILITY"] == "avx512"
    launch.rank_environment(dataclasses.replace(checked, config=config.replace(**PORTABLE)))
    assert {name: os.environ[name] for name in portable.ENVIRONMENT} == portable.ENVIRONMENT


PORTABLE = {"run.portable": "true"}


def test_python_that_computed_with_other_kernels_is_refused_with_how_to_start(tmp_path):
    script = """
import torch
torch.ones(8, 8) @ torch.ones(8, 8)  # the kernels are chosen here, unpinned
import murmur
config = murmur.load_experiment("dsgd", SMALL + ["run.portable=true"]).runs[0][1]
try:
    murmur.run(config)
except murmur.UsageError as error:
    print(error)
import os
print("switch after the refusal:", os.environ.get("MURMUR_PORTABLE"))
plain = murmur.load_experiment("dsgd", SMALL).runs[0][1]
print("a plain run after it:", murmur.run(plain).extra["machine"]["portable"])
"""
    base = {k: v for k, v in os.environ.items() if k not in portable.ENVIRONMENT}
    done = subprocess.run(
        [sys.executable, "-c", f"SMALL = {SMALL_SGD!r}\n{script}"],
        env=base,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "portable numbers need" in done.stdout
    assert "murmur.portable.pin()" in done.stdout and "murmur run --portable" in done.stdout
    # the refused pin left the process as it was: the next run is an ordinary one
    assert "switch after the refusal: None" in done.stdout
    assert "a plain run after it: False" in done.stdout


def test_python_that_pins_first_runs_portable(tmp_path):
    script = "import murmur.portable\nmurmur.portable.pin()\nimport torch\n"
    script += "torch.ones(8, 8) @ torch.ones(8, 8)\nimport murmur\n"
    script += 'config = murmur.load_experiment("dsgd", SMALL + ["run.portable=true"]).runs[0][1]\n'
    script += "print(murmur.run(config).extra['machine']['portable'])\n"
    done = subprocess.run(
        [sys.executable, "-c", f"SMALL = {SMALL_SGD!r}\n{script}"],
        env={**os.environ, **OTHER_KERNELS},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True"]


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        ("run.threads=2", "one thread"),
        ("run.compile=true", "run.compile"),
        ("run.device=cuda", "run.device = cpu"),
    ],
)
def test_what_a_portable_run_cannot_have_is_refused_before_anything_is_pinned(setting, words):
    ((_, config),) = load_experiment("dsgd", [*SMALL_SGD, "run.portable=true", setting]).runs
    with pytest.raises(UsageError, match=words):
        plan(config)


def test_portable_with_resume_and_a_bad_switch_are_one_line_errors(capsys, tmp_path, monkeypatch):
    assert main(["run", "--resume", str(tmp_path), "--portable"]) == 2
    assert "drop --portable" in capsys.readouterr().err
    monkeypatch.setenv(portable.SWITCH, "yes")
    assert main(["run", "dsgd", "--check"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "MURMUR_PORTABLE must be 1" in err
