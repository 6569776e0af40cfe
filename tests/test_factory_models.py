"""A network of one's own from the command line: model.factory names a function in a
file or module, which every process imports as a plugin; dropout draws per agent, keyed;
load_model rebuilds the network and scores what the summary says; bad factories are one
line and exit status 2."""

from __future__ import annotations

import json
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
import torch
from small_runs import SMALL_SGD
from test_cli_resume import kill_after_a_checkpoint

import murmur
from murmur.cli import main
from murmur.config import load_experiment
from murmur.data import load_dataset
from murmur.models.stacked import StackedModel

ROOT = Path(__file__).resolve().parents[1]
NETWORKS = ROOT / "examples" / "networks.py"
WALL = {"wall_seconds", "train_seconds", "samples_per_second", "run_dir", "wall"}
DROPOUT = ["model.name=factory", f"model.factory={NETWORKS}:dropout_mlp"]


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def _config(*settings: str) -> murmur.Config:
    return load_experiment("dsgd", [*SMALL_SGD, *settings]).runs[0][1]


def _sets(*settings: str) -> list[str]:
    return [part for setting in [*SMALL_SGD, *settings] for part in ("--set", setting)]


def _summary(folder: Path) -> dict:
    summary = json.loads((folder / "summary.json").read_text())
    return {key: value for key, value in summary.items() if key not in WALL}


def test_a_factory_network_trains_and_load_model_scores_what_the_summary_says(tmp_path):
    assert main(["run", "dsgd", *_sets(*DROPOUT, 'model.options=["hidden=16"]'), "--quiet"]) == 0
    (folder,) = (tmp_path / "runs").iterdir()
    config = tomllib.loads((folder / "config.toml").read_text())
    assert config["model"]["factory"] == f"{NETWORKS}:dropout_mlp"
    assert config["run"]["plugins"] == [str(NETWORKS)]
    model = murmur.load_model(folder)
    assert isinstance(model[2], torch.nn.Dropout) and model[0].out_features == 16
    assert not model.training
    blobs = load_dataset("blobs")
    with torch.no_grad():
        accuracy = float((model(blobs.x_test).argmax(dim=-1) == blobs.y_test).double().mean())
    assert accuracy == _summary(folder)["model"]["test_accuracy"]


def test_dropout_draws_per_agent_from_a_key_of_the_run_seed_the_agent_and_the_step():
    """An agent's masks do not depend on which other agents share its call."""
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 4))
    model = StackedModel(net, "classification", seed=3)
    flat = model.initial().repeat(4, 1)
    x, y = torch.randn(4, 5, 8), torch.randint(0, 4, (4, 5))
    together = model.loss_and_grad(flat, x, y, draws=([0, 1, 2, 3], 7))[1].clone()
    alone = model.loss_and_grad(flat[2:3], x[2:3], y[2:3], draws=([2], 7))[1].clone()
    assert torch.equal(together[2], alone[0])
    later = model.loss_and_grad(flat[2:3], x[2:3], y[2:3], draws=([2], 8))[1]
    assert not torch.equal(later[0], alone[0])  # another step, other masks
    assert not torch.equal(together[0], together[1])  # same rows, other agents' masks


def test_dropout_changes_the_run_and_the_run_repeats_itself(tmp_path):
    drop = murmur.run(_config(*DROPOUT, 'model.options=["p=0.5"]'), tmp_path / "a")
    again = murmur.run(_config(*DROPOUT, 'model.options=["p=0.5"]'), tmp_path / "b")
    none = murmur.run(_config(*DROPOUT, 'model.options=["p=0.0"]'), tmp_path / "c")
    assert drop.accuracy == again.accuracy and drop.test_loss == again.test_loss
    assert drop.test_loss != none.test_loss


def test_a_random_operation_of_the_modules_own_trains_agent_by_agent(tmp_path):
    (tmp_path / "noisy.py").write_text(
        textwrap.dedent(
            """
            import torch
            from torch import nn

            class Noisy(nn.Module):
                def __init__(self, features, outputs):
                    super().__init__()
                    self.layer = nn.Linear(features, outputs)

                def forward(self, x):
                    if self.training:
                        x = x + 0.1 * torch.randn_like(x)
                    return self.layer(x)

            def noisy(features, outputs):
                return Noisy(features, outputs)
            """
        )
    )
    result = murmur.run(
        _config("model.name=factory", "model.factory=noisy.py:noisy"), tmp_path / "r"
    )
    assert result.status == "finished" and result.accuracy["mean"] > 0.5


def _resumes_to_the_bit(tmp_path: Path, network: list[str]) -> None:
    """A run of ``network`` killed after its first checkpoint and resumed ends as the
    uninterrupted run does: its summary and every tensor of agents.pt."""
    settings = [*network, "run.iterations=400", "run.eval_every=100", "run.checkpoint_every=100"]
    argv = ["run", "dsgd", *_sets(*settings), "--quiet"]
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    kill_after_a_checkpoint([sys.executable, "-m", "murmur", *argv, "--out", str(killed)], killed)
    assert main(["run", "--resume", str(killed), "--quiet"]) == 0
    assert main([*argv, "--out", str(whole)]) == 0
    assert _summary(killed) == _summary(whole)
    ours, theirs = (torch.load(run / "agents.pt", weights_only=True) for run in (killed, whole))
    assert ours.keys() == theirs.keys()
    for name, tensor in ours.items():
        assert torch.equal(tensor, theirs[name]), name


@pytest.mark.slow  # the batch-norm case below kills and resumes a factory network too
def test_a_factory_run_resumes_after_a_kill_to_the_bit(tmp_path):
    """Dropout's masks are keyed by the step, so the resumed run draws them again."""
    _resumes_to_the_bit(tmp_path, DROPOUT)


BAD_FACTORIES = {
    "returns.py": "def net(features, outputs):\n    return 3\n",
    "takes.py": "def net(features):\n    return None\n",
}


@pytest.mark.parametrize(
    ("factory", "options", "message"),
    [
        ("returns.py:net", [], "returned an object of type int, not a torch.nn.Module"),
        ("takes.py:net", [], "cannot be called as FUNCTION(features, outputs)"),
        ("returns.py:other", [], "has no function other"),
        ("absent.py:net", [], "no such file"),
        ("net", [], "model.factory must be FILE.py:FUNCTION or MODULE:FUNCTION"),
        ("returns.py:net", ['model.options=["=3"]'], "model.options entries must be key=value"),
    ],
)
def test_a_bad_factory_is_one_line_and_exit_2_with_nothing_written(
    tmp_path, capsys, factory, options, message
):
    for name, text in BAD_FACTORIES.items():
        (tmp_path / name).write_text(text)
    settings = ["model.name=factory", f"model.factory={factory}", *options]
    out = tmp_path / "out"
    assert main(["run", "dsgd", *_sets(*settings), "--out", str(out), "--quiet"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and message in error, error
    assert not out.exists()


def test_factory_keys_belong_to_model_name_factory(capsys):
    assert main(["run", "dsgd", *_sets(f"model.factory={NETWORKS}:dropout_mlp"), "--check"]) == 2
    assert "model.factory and model.options are for model.name = factory" in capsys.readouterr().err


BATCH_NORM = ["model.name=factory", f"model.factory={NETWORKS}:batch_norm_mlp"]


def test_batch_norm_keeps_each_agents_statistics_and_the_model_their_mean(tmp_path):
    settings = [*BATCH_NORM, 'model.options=["hidden=16"]', "data.partition=labels"]
    assert main(["run", "dsgd", *_sets(*settings), "--quiet"]) == 0
    (folder,) = (tmp_path / "runs").iterdir()
    agents = torch.load(folder / "agents.pt", weights_only=True)
    average = torch.load(folder / "model.pt", weights_only=True)
    means = agents["1.running_mean"]
    assert means.shape == (6, 16) and not torch.equal(means[0], means[1])  # not exchanged
    torch.testing.assert_close(average["1.running_mean"], means.double().mean(dim=0).float())
    iterations = _config().run.iterations
    assert agents["1.num_batches_tracked"].tolist() == [iterations] * 6
    assert int(average["1.num_batches_tracked"]) == iterations
    model = murmur.load_model(folder)
    blobs = load_dataset("blobs")
    with torch.no_grad():
        accuracy = float((model(blobs.x_test).argmax(dim=-1) == blobs.y_test).double().mean())
    assert accuracy == _summary(folder)["model"]["test_accuracy"]
    own = murmur.load_model(folder, agent=2)
    assert torch.equal(own[1].running_var, agents["1.running_var"][2])


def test_a_batch_norm_run_resumes_after_a_kill_to_the_bit(tmp_path):
    _resumes_to_the_bit(tmp_path, BATCH_NORM)  # the running statistics included


def test_servers_refuse_running_statistics_in_one_line(capsys):
    assert main(["run", "sync-ps", *_sets(*BATCH_NORM), "--check"]) == 2
    error = capsys.readouterr().err.strip()
    assert "keeps no running statistics" in error and "\n" not in error
