"""The field's networks in real processes: DSGD with 16 agents of ResNet-20 (GroupNorm)
and of the character LSTM, in four ranks of four agents each, gives the simulator's
run, on files of CIFAR's and Shakespeare's shapes."""

from __future__ import annotations

import numpy as np
import pytest

from murmur.config import load_experiment
from murmur.extend import assert_runtimes_agree


def _npz(path, features: int, classes: int, indices: bool) -> str:
    generator = np.random.default_rng(0)

    def rows(count: int) -> np.ndarray:
        if indices:
            return generator.integers(0, classes, (count, features)).astype(np.float32)
        return generator.random((count, features), dtype=np.float32)

    np.savez(  # every class among the labels: the LSTM's vocabulary is the classes
        path,
        x_train=rows(2 * classes),
        y_train=np.arange(2 * classes) % classes,
        x_test=rows(8),
        y_test=generator.integers(0, classes, 8),
    )
    return str(path)


@pytest.mark.parametrize(
    ("model", "features", "classes", "extra"),
    [
        ("resnet20", 3072, 10, ["data.augment=crop-flip"]),
        ("char-lstm", 80, 80, []),
    ],
)
def test_sixteen_agents_in_four_ranks_of_four_give_the_simulators_run(
    tmp_path, model, features, classes, extra
):
    data = _npz(tmp_path / "data.npz", features, classes, model == "char-lstm")
    settings = [
        "data.dataset=file",
        "data.partition=iid",
        f"data.path={data}",
        f"model.name={model}",
        "topology.agents=16",
        "data.batch_size=2",
        "run.iterations=3",
        "run.eval_every=3",
        "algorithm.optimizer=nesterov",
        *extra,
    ]
    ((_, config),) = load_experiment("dsgd", settings).runs
    assert_runtimes_agree(config, tmp_path / "runs", nproc=4, agents_per_rank=4, timeout=240)
