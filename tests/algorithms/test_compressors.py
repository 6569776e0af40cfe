"""Each compressor's code: its exact encoded size, its bytes, and what it decodes to."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from murmur.algorithms.compressors import (
    LowRank,
    NoCompression,
    Qsgd,
    RandK,
    Rounded,
    ScaledSign,
    TopK,
    largest,
    make_compressor,
)
from murmur.algorithms.draws import Draws
from murmur.algorithms.estimates import (
    Segments,
    add_packed,
    compressed_update,
    max_packed_words,
    message_draws,
)


def _draws(seed: int, agents, message: int = 0) -> Draws:
    """The draws of message ``message`` of ``agents`` in a run of seed ``seed``."""
    return message_draws(seed, list(agents), message, torch.device("cpu"))


COMPRESSORS = [
    NoCompression(),
    TopK(0.1),
    RandK(0.25),
    Qsgd(5),
    Qsgd(1),
    ScaledSign((3, 5)),
    ScaledSign(),
    TopK(0.1, index_width=6),  # indices below 64, packed in 6 bits
    Rounded(NoCompression(), torch.float16),
    Rounded(TopK(0.1, index_width=6), torch.float16),
    Rounded(RandK(0.25), torch.bfloat16),
    Rounded(Qsgd(5), torch.float16),
    Rounded(ScaledSign((3, 5)), torch.bfloat16),
]


def _values(agents: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    values = torch.randn(agents, n, generator=torch.Generator().manual_seed(n), dtype=dtype)
    values[:, 0] = 0.0  # a zero entry: its sign and level still encode
    return values


@pytest.mark.parametrize("compressor", COMPRESSORS, ids=lambda c: repr(c))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [1, 7, 8, 61])
def test_packed_size_is_exact_and_unpacking_decodes_to_the_sent_values(compressor, dtype, n):
    agents = 3
    values = _values(agents, n, dtype)
    code = compressor.compress(values, _draws(0, range(agents)))
    dense = compressor.decode(code, n)
    assert dense.shape == (agents, n) and dense.dtype == dtype
    size = torch.empty(0, dtype=dtype).element_size()
    for row in range(agents):
        data = compressor.pack(code, row)
        assert data.dtype == torch.uint8
        assert data.numel() == compressor.nbytes(n, size)
        unpacked = compressor.unpack(data, n, dtype)
        assert torch.equal(compressor.decode(unpacked, n)[0], dense[row])


def test_encoded_sizes_by_hand():
    """n = 1000 float32: values 4 bytes, indices 4, a seed 4, bits packed 8 to a byte."""
    assert NoCompression().nbytes(1000, 4) == 4000
    assert TopK(0.01).nbytes(1000, 4) == 10 * (4 + 4)
    assert TopK(0.0101).nbytes(1000, 4) == 11 * 8  # k = ceil(fraction n)
    assert RandK(0.01).nbytes(1000, 4) == 4 + 10 * 4
    assert Qsgd(1).nbytes(1000, 4) == 4 + 1000 * 2 // 8  # a sign bit and one level bit
    assert Qsgd(16).nbytes(1000, 4) == 4 + math.ceil(1000 * 6 / 8)  # levels 0..16: 5 bits
    assert ScaledSign().nbytes(1000, 4) == 4 + 125
    assert ScaledSign().nbytes(1001, 8) == 8 + 126


def test_topk_keeps_the_largest_magnitudes():
    values = torch.tensor([[0.5, -3.0, 1.0, 2.0, -0.1]])
    dense = TopK(0.4).decode(TopK(0.4).compress(values, _draws(0, range(values.shape[0]))), 5)
    assert dense.tolist() == [[0.0, -3.0, 0.0, 2.0, 0.0]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("k", [1, 37, 500, 999, 1000])
def test_the_selection_keeps_the_set_topk_keeps_where_nothing_ties(dtype, k):
    generator = torch.Generator().manual_seed(k)
    rows = [torch.randperm(1000, generator=generator) for _ in range(4)]
    magnitudes = torch.stack(rows).to(dtype)  # distinct integers, exact in float16 too
    chosen = largest(magnitudes, k).sort(dim=1).values
    expected = magnitudes.topk(k, dim=1).indices.sort(dim=1).values
    assert torch.equal(chosen, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_tied_magnitudes_keep_the_lowest_indices(dtype):
    magnitudes = torch.tensor([[1, 2, 2, 2, 0, 3], [0, 0, 0, 0, 0, 0], [5, 4, 3, 2, 1, 1]])
    chosen = largest(magnitudes.to(dtype), 3).sort(dim=1).values
    assert chosen.tolist() == [[1, 2, 5], [0, 1, 2], [0, 1, 2]]


def test_randk_sends_k_distinct_entries_and_the_receiver_finds_them_from_the_seed():
    values = torch.arange(1.0, 101.0).reshape(1, 100)
    compressor = RandK(0.1)
    code = compressor.compress(values, _draws(3, [0]))
    dense = compressor.decode(code, 100)
    kept = dense.nonzero()[:, 1]
    assert kept.numel() == 10
    assert torch.equal(dense[0, kept], values[0, kept])
    again = compressor.compress(values, _draws(3, [0]))
    assert torch.equal(again[1], code[1])  # the same agent and message: the same entries
    other = compressor.compress(values, _draws(3, [1]))
    assert not torch.equal(other[1], code[1])
    later = compressor.compress(values, _draws(3, [0], message=1))
    assert not torch.equal(later[1], code[1])
    # the receiver's indices from the seed alone
    assert torch.equal(compressor.unpack(compressor.pack(code, 0), 100, values.dtype)[1], code[1])


def test_qsgd_is_unbiased_after_the_choco_scaling():
    """E[q] = v / tau, with levels in 0..s and the norm over tau sent."""
    n, draws, levels = 50, 4000, 3
    v = torch.randn(1, n, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    compressor = Qsgd(levels)
    total = torch.zeros(1, n, dtype=torch.float64)
    for message in range(draws):
        code = compressor.compress(v, _draws(0, [0], message))
        assert int(code[2].max()) <= levels and int(code[2].min()) >= 0
        total += compressor.decode(code, n)
    tau = 1 + min(n / levels**2, math.sqrt(n) / levels)
    torch.testing.assert_close(total / draws, v / tau, atol=0.03 * float(v.norm()), rtol=0)


def test_scaled_sign_sends_the_mean_magnitude_and_counts_zero_as_positive():
    values = torch.tensor([[1.0, -2.0, 0.0, 3.0]])
    dense = ScaledSign().decode(ScaledSign().compress(values, _draws(0, range(values.shape[0]))), 4)
    assert dense.tolist() == [[1.5, -1.5, 1.5, 1.5]]


def test_a_zero_difference_compresses_to_zero():
    zero = torch.zeros(2, 9)
    for compressor in COMPRESSORS[:-1]:  # scaled sign of zero is zero too, by its scale
        code = compressor.compress(zero, _draws(0, range(2)))
        assert torch.equal(compressor.decode(code, 9), zero)
    sign = ScaledSign()
    assert torch.equal(sign.decode(sign.compress(zero, _draws(0, range(2))), 9), zero)


def test_unknown_compressor_is_refused():
    with pytest.raises(ValueError, match="unknown compressor 'zip'"):
        make_compressor("zip")


@pytest.mark.parametrize("compressor", COMPRESSORS, ids=lambda c: repr(c))
def test_a_packed_update_adds_only_the_sent_segments(compressor):
    """Per-tensor messages: segments 0 and 2 of agent 1 travel; the receiver adds them."""
    segments = Segments((5, 3, 9))
    difference = _values(2, 17, torch.float32)
    sent = torch.tensor([[True, True, True], [True, False, True]])
    update = compressed_update(compressor, difference, sent, segments, _draws(0, [0, 1]))
    assert torch.equal(update.delta[1, 5:8], torch.zeros(3))
    words = update.pack(1)
    assert words.dtype == torch.float32
    assert words.numel() <= max_packed_words(17, 4)
    received = torch.ones(17)
    add_packed(received, words, compressor, segments)
    assert torch.equal(received, torch.ones(17) + update.delta[1])
    sizes = update.segment_bytes()
    assert sizes.tolist() == [compressor.nbytes(n, 4) for n in (5, 3, 9)]


def test_a_malformed_packed_update_is_refused():
    segments = Segments((4, 4))
    update = compressed_update(
        TopK(0.5),
        torch.ones(1, 8),
        torch.tensor([[True, True]]),
        segments,
        _draws(0, [0]),
    )
    words = update.pack(0)
    with pytest.raises(ValueError, match="bytes"):
        add_packed(torch.zeros(8), words[1:], TopK(0.5), segments)
    wrong = words.clone()
    wrong[-1:].view(torch.int32).fill_(5)
    with pytest.raises(ValueError, match="segments"):
        add_packed(torch.zeros(8), wrong, TopK(0.5), segments)


def test_the_sign_scales_each_tensor_on_its_own():
    """Two tensors of magnitudes 1 and 100: one scale for the model would send the
    small one as +-50.5; per tensor each keeps its own."""
    values = torch.tensor([[1.0, -1.0, 100.0, -100.0]])
    per_tensor = ScaledSign((2, 2))
    draws = _draws(0, range(values.shape[0]))
    assert per_tensor.decode(per_tensor.compress(values, draws), 4).tolist() == [values[0].tolist()]
    assert per_tensor.nbytes(4, 4) == 2 * 4 + 1
    whole = ScaledSign().decode(ScaledSign().compress(values, draws), 4)
    assert whole.tolist() == [[50.5, -50.5, 50.5, -50.5]]


CONTRACTIONS = [
    TopK(0.1),
    TopK(0.5),
    RandK(0.25),
    Qsgd(4),
    Qsgd(64),
    ScaledSign(),
    ScaledSign((4, 9, 3)),
    LowRank(1, ((4, 4),)),
    LowRank(2, ((2, 3, 2), (4,))),
]


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    index=st.integers(0, len(CONTRACTIONS) - 1),
    seed=st.integers(0, 2**16),
    spikes=st.integers(0, 3),
    scale=st.floats(1e-3, 1e3),
)
def test_every_compressor_contracts_at_least_by_its_stated_delta(index, seed, spikes, scale):
    """E ||C(v) - v||^2 <= (1 - delta) ||v||^2 on random vectors, heavy entries included
    (over 200 draws for the random compressors, within their sampling error)."""
    compressor = CONTRACTIONS[index]
    n = 16
    v = scale * torch.randn(
        1, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64
    )
    v[0, :spikes] *= 1e3
    draws = 200 if isinstance(compressor, RandK | Qsgd) else 1
    error = (
        sum(
            float(
                (compressor.decode(compressor.compress(v, _draws(seed, [0], i)), n) - v)
                .square()
                .sum()
            )
            for i in range(draws)
        )
        / draws
    )
    bound = (1 - compressor.delta(n)) * float(v.square().sum())
    slack = 1.25 if draws > 1 else 1 + 1e-9
    assert error <= bound * slack, (compressor, error, bound)
    assert 0 <= compressor.delta(n) <= compressor.typical_delta(n) <= 1
