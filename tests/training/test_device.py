"""``run.device``: cuda needs a GPU and a simulator mini-batch run; the CUDA path gives
the CPU's run where a GPU exists."""

from __future__ import annotations

import pytest
import torch

from murmur.cli import main
from murmur.config import load_experiment
from murmur.errors import UsageError
from murmur.experiment import run
from murmur.training.plan import plan

NO_GPU = not torch.cuda.is_available()
SMALL = ["data.dataset=blobs", "topology.agents=4", "run.iterations=20", "run.eval_every=10"]


def _config(preset: str, settings: list[str]):
    ((_, config),) = load_experiment(preset, settings).runs
    return config


def test_the_cpu_is_the_default_and_needs_no_check():
    assert _config("dsgd", SMALL).run.device == "cpu"
    assert plan(_config("dsgd", SMALL), "distributed").device == "cpu"


@pytest.mark.skipif(not NO_GPU, reason="this machine has a CUDA GPU")
def test_cuda_without_a_gpu_is_one_line_and_exit_2(capsys, tmp_path):
    code = main(["run", "dsgd", *(f"--set={s}" for s in [*SMALL, "run.device=cuda"]), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.splitlines()) == 1 and "finds no CUDA GPU" in err and "run.device = cpu" in err
    with pytest.raises(UsageError, match="finds no CUDA GPU"):
        run(_config("dsgd", [*SMALL, "run.device=cuda"]), tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("preset", "runtime"),
    [("dsgd", "distributed"), ("hogwild", "simulator"), ("ssfn-vowel", "simulator")],
)
def test_cuda_is_refused_where_the_run_computes_on_the_cpu(preset, runtime):
    config = _config(preset, ["run.device=cuda"])
    with pytest.raises(UsageError, match="computes on the CPU: use run.device = cpu"):
        plan(config, runtime)


def test_launch_refuses_cuda_in_one_line(capsys):
    code = main(
        ["launch", "--nproc", "4", "dsgd", *(f"--set={s}" for s in SMALL), "--set=run.device=cuda"]
    )
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "the distributed runtime computes on the CPU" in err


@pytest.mark.skipif(NO_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("optimizer", ["sgd", "momentum"])
@pytest.mark.parametrize("preset", ["dsgd", "asysg-con"])
def test_a_cuda_run_is_the_cpu_run(preset, optimizer):
    settings = [
        f"algorithm.optimizer={optimizer}",
        "model.name=cnn",
        "data.dataset=digits",
        "data.batch_size=8",
        "run.iterations=10",
        "run.eval_every=5",
        *(["topology.agents=4"] if preset == "dsgd" else ["algorithm.workers=2"]),
    ]
    on_cpu = run(_config(preset, settings))
    on_gpu = run(_config(preset, [*settings, "run.device=cuda"]))
    assert on_gpu.parameters.device.type == "cpu"
    torch.testing.assert_close(on_gpu.parameters, on_cpu.parameters, atol=1e-4, rtol=1e-3)
    assert on_gpu.accuracy["per_agent"] == pytest.approx(on_cpu.accuracy["per_agent"], abs=0.02)
