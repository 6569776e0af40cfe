"""SSFN's self-size estimation against the SSFN authors' Python code.

The authors' code (github.com/alirezamj14/SSFN: ``optimize_output.py``,
``multi_layer_ssfn.py``) draws every layer's random matrix from NumPy's global
legacy stream: ``np.random.seed(seed)``, then ``2 * np.random.rand(50, n) - 1``
for the first 50 random nodes and 50 more rows appended at every node step.
Run on murmur's z-scored Vowel arrays (X transposed, one-hot T, both float32)
with the paper's Vowel settings (lambda 1e2, mu 1e3, alpha 2, 100 ADMM
iterations, node step 50 up to 1000, eta_n 0.005, eta_l 0.1) and at most
``layers`` layers, it grows the layers and reaches the test accuracy below.
Given the same draws, murmur's growth must pick the same widths and reach the
same accuracy: only the random stream differs between the two, never the method.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import murmur.training.layer_loop as layerwise
from murmur.algorithms.ssfn import CentralSolver, SsfnConfig
from murmur.config import TimingConfig
from murmur.data.datasets import load_dataset
from murmur.metrics.counters import MessageCounters
from murmur.sim.events import ComputeTimes, EventLoop, LinkDelays
from murmur.sim.layer_network import SimulatedNetwork
from murmur.topology import complete

# (seed, layers at most) -> (widths, correct test answers of 462), as the authors' code gives.
AUTHORS = {
    (0, 1): ([372], 259),
    (1, 1): ([372], 255),
    (2, 1): ([272], 271),
    (0, 2): ([372, 422], 263),
    (2, 2): ([272, 272], 270),
}


def legacy_draws(seed: int):
    """R_l as the authors' code draws it: one legacy NumPy stream for the whole run,
    rows appended as a layer widens (a new layer starts a new matrix)."""
    stream = np.random.RandomState(seed)
    drawn: dict[int, np.ndarray] = {}

    def weights(_seed: int, layer: int, rows: int, columns: int) -> torch.Tensor:
        have = drawn.get(layer, np.zeros((0, columns)))
        if rows > have.shape[0]:
            have = np.concatenate([have, 2 * stream.rand(rows - have.shape[0], columns) - 1])
            drawn[layer] = have
        return torch.from_numpy(have[:rows].copy())

    return weights


@pytest.mark.parametrize(("seed", "layers"), list(AUTHORS))
def test_growth_with_the_authors_draws_gives_their_widths_and_accuracy(seed, layers, monkeypatch):
    monkeypatch.setattr(layerwise, "random_weights", legacy_draws(seed))
    data = load_dataset("vowel")
    config = SsfnConfig(
        lam=1e2,
        mu=1e3,
        alpha=2.0,
        layers=layers,
        nodes=1000,
        admm_iterations=100,
        tolerance=0.0,
        output="iterate",
        grow=True,
        node_step=50,
        node_tolerance=0.005,
        layer_tolerance=0.1,
    )
    graph = complete(1)
    timing = TimingConfig()
    network = SimulatedNetwork(
        graph=graph,
        counters=MessageCounters(1),
        clock=EventLoop(),
        compute=ComputeTimes(timing, 1, seed=1),
        links=LinkDelays(timing),
    )
    layer_data = layerwise.LayerData(
        data.x_train,
        data.y_train,
        data.x_test,
        data.y_test,
        [torch.arange(len(data.y_train))],
        data.num_classes,
    )
    result = layerwise.train_layerwise(
        config,
        CentralSolver(config),
        network,
        layer_data,
        seed,
        layerwise.LayerHooks(on_record=lambda record: None),
    )
    widths, correct = AUTHORS[(seed, layers)]
    assert result.sizes == widths
    assert result.last_record["accuracy_mean"] == pytest.approx(correct / len(data.y_test))
