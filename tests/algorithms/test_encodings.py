"""Tighter encodings: values in 16-bit floats and top-k indices packed in ceil(log2 P)
bits, with their exact sizes, what they decode to, and the config that chooses them."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from murmur.algorithms.choco import ChocoConfig
from murmur.algorithms.compressors import (
    LowRank,
    NoCompression,
    Qsgd,
    Rounded,
    TopK,
    _pack_uints,
    _unpack_uints,
    index_bits,
)
from murmur.algorithms.estimates import message_draws
from murmur.config import build_config
from murmur.errors import UsageError
from murmur.experiment import run


def _draws(agents: int):
    return message_draws(0, list(range(agents)), 0, torch.device("cpu"))


def test_sizes_by_hand_for_the_mlp_784_100_10():
    """P = 79,510: top-k 1 % keeps 796 entries; indices take 17 bits packed."""
    n = 79_510
    assert index_bits(n) == 17 and index_bits(2) == 1 and index_bits(1) == 1
    assert TopK(0.01).nbytes(n, 4) == 796 * (4 + 4)
    packed = TopK(0.01, index_width=17)
    assert packed.nbytes(n, 4) == 796 * 4 + math.ceil(796 * 17 / 8)
    assert Rounded(packed, torch.float16).nbytes(n, 4) == 796 * 2 + math.ceil(796 * 17 / 8)
    assert Rounded(NoCompression(), torch.bfloat16).nbytes(n, 4) == 2 * n
    assert Rounded(Qsgd(16), torch.float16).nbytes(n, 4) == 2 + math.ceil(n * 6 / 8)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 2**20), st.data())
def test_packed_indices_round_trip(n, data):
    width = index_bits(n)
    indices = torch.tensor(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=50)))
    packed = _pack_uints(indices, width)
    assert packed.numel() == math.ceil(indices.numel() * width / 8)
    assert torch.equal(_unpack_uints(packed, indices.numel(), width), indices)


@pytest.mark.parametrize("precision", [torch.float16, torch.bfloat16])
def test_rounded_values_are_what_every_holder_adds(precision):
    values = torch.randn(3, 200, generator=torch.Generator().manual_seed(0))
    inner = TopK(0.1)
    code = Rounded(inner, precision).compress(values, _draws(3))
    exact = inner.decode(inner.compress(values, _draws(3)), 200)
    decoded = Rounded(inner, precision).decode(code, 200)
    assert torch.equal(decoded, exact.to(precision).to(torch.float32))
    assert not torch.equal(decoded, exact), "rounding changes some values"


def test_float16_keeps_its_range_by_clamping():
    values = torch.tensor([[1e6, -1e6, 1.0]])
    code = Rounded(NoCompression(), torch.float16).compress(values, _draws(1))
    assert torch.isfinite(code[0]).all() and float(code[0][0, 0]) == 65504.0


def test_rounded_lowrank_keeps_its_warm_starts():
    lowrank = LowRank(1, ((6, 5),))
    warm: dict[str, torch.Tensor] = {}
    values = torch.randn(2, 30, generator=torch.Generator().manual_seed(1))
    Rounded(lowrank, torch.float16).compress(values, _draws(2), warm, "x")
    assert set(warm) == {"x/0"}


def test_rounding_lowers_the_contraction_by_the_roundoff():
    exact, rounded = TopK(0.1).delta(100), Rounded(TopK(0.1), torch.float16).delta(100)
    assert rounded < exact
    assert rounded == pytest.approx(1 - (math.sqrt(1 - exact) + 2**-11) ** 2)
    assert Rounded(NoCompression(), torch.bfloat16).delta(10) == pytest.approx(1 - 2**-16)


@pytest.mark.parametrize(
    ("settings_", "words"),
    [
        ({"compress": "qsgd", "indices": "packed"}, "codes topk's indices; 'qsgd' sends none"),
        ({"precision": "float8"}, "algorithm.precision must be one of float32, float16"),
        ({"indices": "int16"}, "algorithm.indices must be 'int32' or 'packed'"),
    ],
)
def test_encodings_that_do_not_apply_are_refused_in_one_line(settings_, words):
    with pytest.raises(UsageError, match=words):
        ChocoConfig(**settings_)


def test_a_run_counts_the_tighter_encodings_exact_bytes():
    """CHOCO-SGD, top-k 10 %, float16 values and packed indices: every message is the
    encoding's exact size, and the run still learns."""
    sets = {
        "run": {"iterations": 60, "eval_every": 60},
        "data": {"dataset": "blobs"},
        "model": {"name": "mlp", "hidden": [8]},
        "topology": {"graph": "ring", "agents": 4},
        "algorithm": {"name": "choco-sgd", "a": 0.2, "gamma": 0.3, "compress": "topk"},
    }
    sets["algorithm"] |= {"fraction": 0.1, "precision": "float16", "indices": "packed"}
    result = run(build_config(sets))
    parameters = int(result.parameters.shape[1])
    k = math.ceil(0.1 * parameters)
    assert result.bytes == result.messages * (2 * k + math.ceil(k * index_bits(parameters) / 8))
    assert result.accuracy["mean"] > 0.5
