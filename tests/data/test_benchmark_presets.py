"""The presets of the field's benchmarks run on the tests' tiny files in the official
formats, their set-ups as the papers state them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_cifar import write_cifar10
from test_leaf import femnist_user, write_leaf

from murmur.cli import main
from murmur.config import load_experiment
from murmur.data.leaf import ALL_LETTERS, clear_cache


@pytest.fixture(autouse=True)
def fresh_cache():
    clear_cache()
    yield
    clear_cache()


def shakespeare_user(seed: int, samples: int) -> tuple[list, list]:
    """A speaking part's lines: 80 characters of LEAF's alphabet, and the next one."""
    rng = np.random.default_rng(seed)
    lines = ["".join(rng.choice(list(ALL_LETTERS), 81)) for _ in range(samples)]
    return [line[:80] for line in lines], [line[80] for line in lines]


def _single(name: str):
    ((_, config),) = load_experiment(name).runs
    return config


def test_the_cifar_preset_is_the_papers_set_up():
    config = _single("cifar10-resnet20")
    assert (config.topology.graph, config.topology.agents) == ("ring", 16)
    assert (config.data.partition, config.data.dirichlet_alpha) == ("dirichlet", 1.0)
    assert (config.data.batch_size, config.data.augment) == (32, "crop-flip")
    assert (config.model.name, config.model.norm) == ("resnet20", "group")
    algorithm = config.algorithm
    assert (algorithm.optimizer, algorithm.beta1, algorithm.d2) == ("nesterov", 0.9, 0.0)
    assert algorithm.a == pytest.approx(0.1 * 16 * 32 / 128)  # 0.1 per 128 images, scaled
    epoch = 50_000 / 16 / 32
    assert algorithm.warmup == pytest.approx(5 * epoch, abs=1)
    assert config.run.iterations == pytest.approx(300 * epoch, abs=10)
    half, three_quarters = algorithm.milestones
    assert (half, three_quarters) == (config.run.iterations // 2, config.run.iterations * 3 // 4)


@pytest.mark.parametrize(
    ("preset", "settings"),
    [
        ("cifar10-resnet20", ["topology.agents=4", "data.batch_size=2"]),
        ("femnist-cnn", ["topology.agents=4", "data.batch_size=2"]),
        ("shakespeare-lstm", ["topology.agents=4", "data.batch_size=2"]),
    ],
)
def test_each_benchmark_preset_trains_on_files_of_its_format(tmp_path, preset, settings):
    root = tmp_path / "data"
    if preset.startswith("cifar"):
        write_cifar10(root)
    elif preset.startswith("femnist"):
        users = {f"f{w:04d}": femnist_user(w, 6) for w in range(5)}
        write_leaf(root / "all_data" / "all_data_0.json", users)
    else:
        users = {f"PLAY_PART{w}": shakespeare_user(w, 6) for w in range(5)}
        write_leaf(root / "all_data" / "all_data_0.json", users)
    short = ["run.iterations=2", "run.eval_every=2", "run.eval_agents=2"]
    argv = ["run", preset, "--set", f"data.root={root}", "--out", str(tmp_path / "run")]
    for setting in [*settings, *short]:
        argv += ["--set", setting]
    assert main(argv) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["iterations"] == 2
