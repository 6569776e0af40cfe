"""Any torch.nn.Module as every agent's model, from Python: ``run(config, model=...)``;
its runs say ``model.name = "custom"`` and resume only when given the module again."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from murmur.cli import main
from murmur.config import load_experiment
from murmur.errors import UsageError
from murmur.experiment import resume, run
from murmur.training.setup import prepare

BLOBS = [
    "data.dataset=blobs",
    "topology.agents=4",
    "data.batch_size=8",
    "run.iterations=60",
    "run.eval_every=20",
]


def _config(preset: str = "dsgd", settings: tuple[str, ...] = ()):
    ((_, config),) = load_experiment(preset, [*BLOBS, *settings]).runs
    return config


def _tanh_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 6), nn.Tanh(), nn.LayerNorm(6), nn.Linear(6, 4))


@pytest.mark.kernels
def test_a_custom_module_is_what_the_agents_train(tmp_path):
    module = _tanh_net()
    before = [p.detach().clone() for p in module.parameters()]
    result = run(_config(), tmp_path / "run", model=module)
    assert result.parameters.shape == (4, sum(p.numel() for p in before))
    assert result.accuracy["min"] > 0.8  # four well separated blobs
    for param, old in zip(module.parameters(), before, strict=True):
        assert torch.equal(param, old)  # a copy was trained
    assert 'name = "custom"' in (tmp_path / "run" / "config.toml").read_text()


def test_the_agents_start_from_the_modules_parameters():
    module = _tanh_net()
    setup = prepare(_config(), module)
    flat = torch.cat([p.detach().reshape(-1) for p in module.parameters()])
    torch.testing.assert_close(setup.initial, flat.expand(4, -1))


@pytest.mark.parametrize("preset", ["centralized", "asysg-con", "hogwild"])
def test_every_kind_of_mini_batch_run_takes_a_module(preset):
    settings = ("algorithm.workers=2",) if preset != "centralized" else ()
    if preset == "hogwild":
        settings += ("algorithm.compare_single=false",)
    result = run(_config(preset, settings), model=_tanh_net())
    assert result.parameters.shape[1] == 8 * 6 + 6 + 6 + 6 + 6 * 4 + 4


def test_a_server_refuses_a_module_with_running_statistics_before_the_folder(tmp_path):
    module = nn.Sequential(nn.Linear(8, 6), nn.BatchNorm1d(6), nn.Linear(6, 4))
    with pytest.raises(UsageError, match="keeps no running statistics") as error:
        run(_config("sync-ps"), tmp_path / "run", model=module)
    assert "GroupNorm/LayerNorm" in str(error.value)
    assert "\n" not in str(error.value)
    assert not (tmp_path / "run").exists()


def test_a_module_of_the_wrong_shape_is_refused():
    with pytest.raises(UsageError, match=r"it must give \(rows, 4\) outputs"):
        run(_config(), model=nn.Linear(8, 3))
    with pytest.raises(UsageError, match="cannot read rows of 8 features"):
        run(_config(), model=nn.Linear(5, 4))


def test_layerwise_algorithms_take_no_module():
    ((_, config),) = load_experiment("ssfn-vowel").runs
    with pytest.raises(UsageError, match="takes no model"):
        run(config, model=nn.Linear(10, 11))


def test_a_custom_run_resumes_with_its_module_and_the_cli_says_why_it_cannot(
    tmp_path, capsys, periodic_checkpoints
):
    folder = tmp_path / "run"
    whole = run(_config(settings=("run.checkpoint_every=20",)), folder, model=_tanh_net())
    (folder / "summary.json").unlink()  # as if stopped after its last checkpoint
    assert main(["run", "--resume", str(folder), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "model.name = custom" in err and "model=" in err and len(err.splitlines()) == 1
    with pytest.raises(UsageError, match="a config alone cannot build it"):
        resume(folder)
    resumed = resume(folder, model=_tanh_net())
    torch.testing.assert_close(resumed.parameters, whole.parameters)
    assert json.loads((folder / "summary.json").read_text())["status"] == "finished"


def test_a_named_model_refuses_a_module_on_resume(tmp_path):
    folder = tmp_path / "run"
    run(_config(settings=("run.checkpoint_every=20",)), folder)
    (folder / "summary.json").unlink()
    with pytest.raises(UsageError, match="resume it without a model"):
        resume(folder, model=_tanh_net())
