"""Runs with data.augment = "crop-flip": the batches a step trains on are the keyed crops
of the rows drawn, the same in the simulator and in four ranks, and a config that
cannot augment is refused in one line."""

from __future__ import annotations

import pytest
import torch

from murmur.cli import main
from murmur.config import load_experiment
from murmur.data.augment import CropFlip
from murmur.experiment import run
from murmur.extend import assert_runtimes_agree
from murmur.models.stacked import StackedModel
from murmur.training.setup import prepare

SETTINGS = [
    "data.dataset=digits",
    "model.hidden=[16]",
    "topology.agents=4",
    "data.partition=iid",
    "data.batch_size=8",
    "run.iterations=30",
    "run.eval_every=10",
    "data.augment=crop-flip",
    "data.crop_padding=2",
]


def _config(preset: str, *settings: str):
    ((_, config),) = load_experiment(preset, [*SETTINGS, *settings]).runs
    return config


def test_a_step_trains_on_the_keyed_crops_of_the_rows_it_drew(tmp_path, monkeypatch):
    config = _config("dsgd", "run.seed=3", "run.iterations=2", "run.eval_every=2")
    problem = prepare(config).problem
    assert problem.augment == CropFlip((1, 8, 8), 2, 3)
    drawn = [problem.sampler.next(), problem.sampler.next()]  # what the run will draw
    seen = []
    original = StackedModel.loss_and_grad

    def record(self, flat, x, y, draws=None):
        seen.append(x.clone())
        return original(self, flat, x, y, draws)

    monkeypatch.setattr(StackedModel, "loss_and_grad", record)
    run(config, tmp_path / "run")
    assert len(seen) == 2
    for iteration, (x, indices) in enumerate(zip(seen, drawn, strict=True)):
        plain = problem.x_train[indices]
        assert torch.equal(x, CropFlip((1, 8, 8), 2, 3)(plain, [0, 1, 2, 3], iteration))
        assert not torch.equal(x, plain)


def _model(folder) -> dict:
    return torch.load(folder / "model.pt", weights_only=True)


def test_augmented_runs_learn_and_differ_from_plain_ones(tmp_path):
    settings = ["run.iterations=150", "run.eval_every=50", "data.crop_padding=1"]
    augmented = run(_config("dsgd", *settings), tmp_path / "augmented")
    plain = run(_config("dsgd", *settings, "data.augment=none"), tmp_path / "plain")
    # Flipped 8x8 digits are harder than the plain ones, but far above chance (10 %)
    assert 0.3 < augmented.accuracy["mean"] < plain.accuracy["mean"]


@pytest.mark.parametrize("preset", ["asysg-con", "sync-ps"])
def test_parameter_servers_augment_their_workers_batches(tmp_path, preset):
    settings = ["algorithm.workers=2", "run.iterations=10", "run.eval_every=10"]
    run(_config(preset, *settings), tmp_path / "augmented")
    run(_config(preset, *settings, "data.augment=none"), tmp_path / "plain")
    run(_config(preset, *settings), tmp_path / "again")
    augmented, plain, again = (_model(tmp_path / name) for name in ("augmented", "plain", "again"))
    assert any(not torch.equal(tensor, plain[key]) for key, tensor in augmented.items())
    assert all(torch.equal(tensor, again[key]) for key, tensor in augmented.items())


def test_four_ranks_augment_as_the_simulator_does(tmp_path):
    assert_runtimes_agree(_config("dsgd", "run.iterations=20"), tmp_path)


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        (["data.dataset=letter"], "letter (16 features) are none of"),
        (["algorithm.name=hogwild"], "hogwild does not draw them"),
        (["data.crop_padding=-1"], "data.crop_padding must be at least 0"),
    ],
)
def test_what_cannot_be_augmented_is_refused_in_one_line(settings, says, tmp_path, capsys):
    argv = ["run", "dsgd", *(arg for s in [*SETTINGS, *settings] for arg in ("--set", s))]
    assert main([*argv, "--out", str(tmp_path / "run")]) == 2
    error = capsys.readouterr().err.strip()
    assert says in error and "\n" not in error
    assert not (tmp_path / "run").exists()
