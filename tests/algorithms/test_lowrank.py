"""The low-rank compressor: a matrix of rank at most r comes through exactly, any
other is projected (never lengthened), its code is exactly its stated bytes, and
CHOCO-SGD and BEER with it reach the least-squares optimum of a regression whose
weight is a full-rank matrix."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import murmur
from murmur.algorithms.compressors import LowRank, compress_message
from murmur.algorithms.estimates import message_draws
from murmur.config import build_config
from murmur.data import from_arrays

SHAPES = ((6, 9), (6,), (2, 6), (2,))
"""An MLP 9-6-2: two weight matrices, two biases; 74 parameters."""
N = 74


def _draws(agents: int, message: int = 0):
    return message_draws(0, list(range(agents)), message, torch.device("cpu"))


def test_a_matrix_of_rank_r_comes_through_exactly_and_vectors_go_dense():
    compressor = LowRank(2, SHAPES)
    rng = torch.Generator().manual_seed(0)
    weight = torch.randn(3, 6, 2, generator=rng) @ torch.randn(3, 2, 9, generator=rng)
    values = torch.cat([weight.reshape(3, -1), torch.randn(3, 20, generator=rng)], dim=1)
    decoded = compressor.decode(compressor.compress(values, _draws(3)), N)
    torch.testing.assert_close(decoded[:, :54], values[:, :54], rtol=1e-4, atol=1e-4)
    assert torch.equal(decoded[:, 54:60], values[:, 54:60])  # the bias, dense
    # 2 x (6 + 9) for the first matrix; the (2, 6) one and the biases are smaller dense
    assert compressor.nbytes(N, 4) == (2 * 15 + 6 + 12 + 2) * 4


def test_a_full_rank_matrix_is_projected_never_lengthened_and_its_bytes_travel():
    compressor = LowRank(1, SHAPES, power_iterations=3)
    values = torch.randn(4, N, generator=torch.Generator().manual_seed(1))
    code = compressor.compress(values, _draws(4))
    decoded = compressor.decode(code, N)
    error = (decoded - values)[:, :54].square().sum(1)
    assert bool((error < values[:, :54].square().sum(1)).all())
    assert bool((error > 0).all())
    for row in range(4):
        packed = compressor.pack(code, row)
        assert packed.numel() == compressor.nbytes(N, 4)
        unpacked = compressor.unpack(packed, N, torch.float32)
        assert torch.equal(compressor.decode(unpacked, N)[0], decoded[row])


def test_more_power_iterations_find_more_of_the_top_singular_direction():
    """A matrix with one strong direction: the error falls with the iterations."""
    rng = torch.Generator().manual_seed(2)
    strong = 10 * torch.randn(1, 54, 1, generator=rng)[:, :6] @ torch.randn(1, 1, 9, generator=rng)
    matrix = strong + torch.randn(1, 6, 9, generator=rng)
    values = torch.cat([matrix.reshape(1, -1), torch.zeros(1, 20)], dim=1)
    errors = []
    for steps in (1, 4):
        compressor = LowRank(1, SHAPES, power_iterations=steps)
        decoded = compressor.decode(compressor.compress(values, _draws(1)), N)
        errors.append(float((decoded - values).square().sum()))
    assert errors[1] <= errors[0]


def _best_rank_one_error(matrix: torch.Tensor) -> float:
    """Eckart-Young: the squared error of the best rank-1 approximation."""
    singular = torch.linalg.svdvals(matrix.double())
    return float(singular[..., 1:].square().sum())


def test_warm_starts_find_the_best_rank_one_message_of_a_repeated_difference():
    """PowerGossip's warm start: one power step a message, from the last message's Q,
    converges to the top singular pair of a difference that keeps recurring, where
    one step from a fresh draw each time stays as far from it as at first."""
    rng = torch.Generator().manual_seed(3)
    spectrum = torch.tensor([3.0, 2.0, 1.5, 1.0, 0.5, 0.2])
    left = torch.linalg.qr(torch.randn(2, 6, 6, generator=rng)).Q
    right = torch.linalg.qr(torch.randn(2, 9, 6, generator=rng)).Q
    matrix = left @ torch.diag(spectrum) @ right.transpose(1, 2)
    values = torch.cat([matrix.reshape(2, -1), torch.randn(2, 20, generator=rng)], dim=1)
    best = _best_rank_one_error(matrix[0])
    errors = {}
    for warm_start in (True, False):
        compressor, memory = LowRank(1, SHAPES, warm_start=warm_start), {}
        for message in range(30):
            code = compress_message(compressor, values, _draws(2, message), memory, "0")
        decoded = compressor.decode(code, N)
        errors[warm_start] = float((decoded - values)[0, :54].square().sum())
        assert bool(memory) == warm_start
    assert errors[True] == pytest.approx(best, rel=1e-4)
    assert errors[False] > best * 1.05


def test_a_zero_difference_leaves_a_usable_warm_start():
    compressor, memory = LowRank(1, SHAPES), {}
    compress_message(compressor, torch.zeros(1, N), _draws(1), memory, "0")
    assert all(bool(torch.isfinite(start).all()) for start in memory.values())
    values = torch.randn(1, N, generator=torch.Generator().manual_seed(4))
    decoded = compressor.decode(compress_message(compressor, values, _draws(1), memory, "0"), N)
    assert float(decoded[:, :54].norm()) > 0


def test_lowrank_needs_whole_models():
    with pytest.raises(ValueError, match="whole models"):
        LowRank(1, SHAPES).compress(torch.zeros(1, 54), _draws(1))


@pytest.mark.parametrize(
    "algorithm", ["choco-sgd", pytest.param("beer", marks=pytest.mark.slow)]
)  # BEER's rank-1 messages are checked in both runtimes by tests/distributed
def test_lowrank_gossip_reaches_the_optimum_of_a_full_rank_regression(algorithm):
    """y = x W^T + b with W (4 x 8) of full rank: rank-1 messages, error feedback."""
    rng = np.random.default_rng(0)
    weight = rng.normal(size=(4, 8))
    x = rng.normal(size=(600, 8))
    y = x @ weight.T + 0.5 + 0.01 * rng.normal(size=(600, 4))
    data = from_arrays(x[:500], y[:500], x[500:], y[500:], task="regression")
    config = build_config(
        {
            "run": {"iterations": 1500, "eval_every": 1500},
            "data": {"dataset": "arrays", "partition": "iid", "batch_size": 32},
            "model": {"name": "linear"},
            "topology": {"graph": "ring", "agents": 5},
            "algorithm": {
                "name": algorithm,
                "a": 0.05,
                "eps": 0.01,
                "compress": "lowrank",
                "rank": 1,
            },
        }
    )
    result = murmur.run(config, data=data)
    design = np.hstack([x[:500], np.ones((500, 1))])
    solution = np.linalg.lstsq(design, y[:500], rcond=None)[0]
    optimum = torch.tensor(np.concatenate([solution[:-1].T.reshape(-1), solution[-1]]))
    errors = torch.linalg.vector_norm(result.parameters - optimum.float(), dim=1)
    assert float(errors.max() / optimum.norm()) < 1e-2, errors
    dense = result.iterations * 5 * 2 * optimum.numel() * 4 * (2 if algorithm == "beer" else 1)
    assert result.bytes < dense / 2
