"""Compressors: what an agent sends instead of a dense float vector.

A compressor maps a stacked difference V (agents, n) to a *code*, the parts
that travel (values, indices, norms, bits), agent axis first. ``decode(code)``
gives the dense values every holder adds to the sender's public copy;
``nbytes(n, element_size)`` is the exact encoded size of one agent's code, and
``pack(code, row)`` / ``unpack(data, n, dtype)`` turn one agent's code into
those bytes and back: the distributed runtime sends them, and decoding the
unpacked code gives the sender's dense values bit for bit. Values travel in the
models' dtype (float32: 4 bytes each), indices as int32, signs and levels as
packed bits. Random choices are computed from keys of (seed, agent, iteration,
part of the message), on the values' device (:mod:`murmur.algorithms.draws`).

- ``none``: the n values.
- ``topk`` (fraction f): the k = ceil(f n) entries of largest magnitude; k
  values and k indices.
- ``randk`` (fraction f): k distinct entries chosen at random from a 31-bit
  seed that the sender draws and sends; k values and the seed, from which the
  receiver finds the same indices.
- ``qsgd`` (levels s; Alistarh et al. 2017): (||v|| / tau) sign(v_i) xi_i / s,
  where xi_i in {0..s} rounds s |v_i| / ||v|| up or down at random, unbiased;
  one value (the scaled norm), one sign bit and ceil(log2(s + 1)) level bits per
  entry. Every murmur method compresses differences to public estimates, as
  CHOCO-SGD does, so qsgd takes CHOCO's scaling tau = 1 + min(n / s^2, sqrt(n) / s),
  which keeps the expected error below the difference.
- ``sign``: (||v_t||_1 / n_t) sign(v_t) for each parameter tensor t of the model
  (``sign_scale = "tensor"``, as the CHOCO-SGD authors scale it), or one scale for
  the whole vector (``"model"``); sign(0) = +1; one value per scale and one bit per
  entry. A message of one tensor (DETSGRAD's layer trigger) has one scale.
- ``lowrank`` (rank r; after PowerGossip, Vogels et al. 2020): each weight tensor,
  as an m x n matrix D (its first axis by the rest), is sent as P Q^T with P
  (m x r) orthonormal and Q = D^T P (n x r), found by ``power_iterations`` steps
  of subspace iteration from a Gaussian start the agent draws from its stream;
  r (m + n) values. Tensors where that is no smaller than m n (vectors, small
  matrices) go dense. P Q^T is D's projection onto span(P), never longer than D.
  With ``warm_start`` (the default) each matrix starts from the last round's
  basis, kept in the sender's state, as PowerGossip warm-starts from the last Q;
  without it, every round draws a fresh start and iterates.

Each compressor states its contraction ``delta(n)``: E ||C(v) - v||^2 <= (1 - delta)
||v||^2 for every v of n entries (the worst case), and ``typical_delta(n)``, what
the automatic steps use: the same where the worst case is the rule (k / n for topk
and randk, 1 / tau for qsgd, 1 for none); for the sign, whose contraction
||v||_1^2 / (n ||v||^2) is 1 / n for a vector of one nonzero entry and 2 / pi for
Gaussian entries, 2 / pi per scale; for lowrank, whose projection keeps no
guaranteed share of an adversarial D (delta 0), (r / min(m, n))^2 / 4 of its
largest matrix (see ``LowRank.typical_delta``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np
import torch

from murmur.algorithms.draws import Draws, distinct_indices
from murmur.errors import UsageError
from murmur.origins import check_entry, current
from murmur.sections import AlgorithmConfig

Code = tuple[torch.Tensor, ...]
"""A compressor's parts for a block of agents, agent axis first."""

_INDEX_BYTES = 4
_SEED_BYTES = 4


class Compressor(Protocol):
    """One compression rule; see the module docstring."""

    name: str

    def compress(self, values: torch.Tensor, draws: Draws) -> Code:
        """The code of each row of ``values`` (agents, n); row i draws from its key of
        ``draws``."""
        ...

    def decode(self, code: Code, n: int) -> torch.Tensor:
        """The dense values (agents, n) a code stands for."""
        ...

    def nbytes(self, n: int, element_size: int) -> int:
        """Bytes of one agent's code for n entries of ``element_size`` bytes."""
        ...

    def pack(self, code: Code, row: int) -> torch.Tensor:
        """Row ``row`` of ``code`` as bytes (uint8, exactly ``nbytes`` of them)."""
        ...

    def unpack(self, data: torch.Tensor, n: int, dtype: torch.dtype) -> Code:
        """The one-agent code packed in ``data``."""
        ...

    def delta(self, n: int) -> float:
        """The contraction guaranteed for any vector of n entries (module docstring)."""
        ...

    def typical_delta(self, n: int) -> float:
        """The contraction the automatic steps assume (module docstring)."""
        ...


COMPRESSOR_PARTS = ("compress", "decode", "nbytes", "pack", "unpack", "delta", "typical_delta")
"""What a compressor must have (:class:`Compressor`)."""

CompressorBuild = Callable[
    ["CompressionConfig", tuple[int, ...], tuple[tuple[int, ...], ...]], Compressor
]
"""What makes a compressor: from the algorithm's config (``fraction``, ``levels``,
``rank``, ...), the sizes of the model's parameter tensors in the flat vector and their
shapes."""


@dataclass(frozen=True)
class CompressorEntry:
    """One compressor by name: how it is made, one line for listings, whose it is."""

    build: CompressorBuild
    summary: str
    origin: str


COMPRESSORS: dict[str, CompressorEntry] = {}
"""Every compressor ``algorithm.compress`` may name, built-in ones first."""


def register_compressor(name: str, build: CompressorBuild, summary: str) -> None:
    """Make ``algorithm.compress = name`` mean the compressor ``build(config, sizes,
    shapes)`` makes (a :class:`Compressor`), for every algorithm that compresses and in
    both runtimes. RegistrationError for a malformed or taken name."""
    taken = COMPRESSORS[name].origin if isinstance(name, str) and name in COMPRESSORS else None
    check_entry("compressor", name, build, taken)
    COMPRESSORS[name] = CompressorEntry(build, summary, current())


WarmStarts = dict[str, torch.Tensor]
"""A sender's memory between messages, by message and tensor: the agents' starting
bases (agents, cols, r) of ``lowrank`` with warm starts."""


def compress_message(
    compressor: Compressor,
    values: torch.Tensor,
    draws: Draws,
    warm: WarmStarts | None,
    key: str,
) -> Code:
    """``compressor.compress(values, draws)``, with the sender's warm starts for
    the message called ``key`` where the compressor keeps them (``lowrank``)."""
    if isinstance(compressor, LowRank | Rounded) and warm is not None:
        return compressor.compress(values, draws, warm, key)
    return compressor.compress(values, draws)


def _as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.contiguous().reshape(-1).view(torch.uint8)


def _from_bytes(data: torch.Tensor, dtype: torch.dtype, count: int) -> torch.Tensor:
    """``count`` values of ``dtype`` from the start of ``data``, as a (1, count) tensor."""
    size = torch.empty(0, dtype=dtype).element_size() * count
    return data[:size].clone().view(dtype).reshape(1, count)


def _pack_bits(bits: torch.Tensor) -> torch.Tensor:
    """A 0/1 vector as bytes, 8 bits each (the last byte zero-padded)."""
    return torch.from_numpy(np.packbits(bits.to(torch.uint8).numpy()))


def _unpack_bits(data: torch.Tensor, count: int) -> torch.Tensor:
    return torch.from_numpy(np.unpackbits(data.numpy(), count=count).astype(np.int64))


def index_bits(n: int) -> int:
    """Bits that hold any index of n entries: ceil(log2 n), at least 1."""
    return max(1, (n - 1).bit_length())


def _pack_uints(values: torch.Tensor, width: int) -> torch.Tensor:
    """Non-negative integers of ``width`` bits each, as bytes (lowest bit first)."""
    shifts = torch.arange(width)
    return _pack_bits(((values.to(torch.int64).unsqueeze(1) >> shifts) & 1).reshape(-1))


def _unpack_uints(data: torch.Tensor, count: int, width: int) -> torch.Tensor:
    bits = _unpack_bits(data[: math.ceil(count * width / 8)], count * width)
    return (bits.reshape(count, width) << torch.arange(width)).sum(1)


def _sample_count(fraction: float, n: int) -> int:
    return min(n, max(1, math.ceil(fraction * n)))


@dataclass(frozen=True)
class NoCompression:
    """Send the difference as it is."""

    name = "none"

    def compress(self, values: torch.Tensor, draws: Draws) -> Code:
        return (values.clone(),)

    def decode(self, code: Code, n: int) -> torch.Tensor:
        return code[0]

    def nbytes(self, n: int, element_size: int) -> int:
        return n * element_size

    def pack(self, code: Code, row: int) -> torch.Tensor:
        return _as_bytes(code[0][row])

    def unpack(self, data: torch.Tensor, n: int, dtype: torch.dtype) -> Code:
        return (_from_bytes(data, dtype, n),)

    def delta(self, n: int) -> float:
        return 1.0

    def typical_delta(self, n: int) -> float:
        return 1.0


def largest(magnitudes: torch.Tensor, k: int) -> torch.Tensor:
    """The indices (int64, in no set order) of each row's k largest entries. On the
    CPU, where entries equal to the k-th largest are more than the places left for
    them, the lowest of their indices are kept, so that the set is the same on every
    CPU and with every selection algorithm; numpy's introselect (``argpartition``)
    finds them several times faster than ``torch.topk``. On another device
    ``torch.topk`` selects, ties in its own order, and nothing is read back."""
    if magnitudes.device.type != "cpu":
        return magnitudes.topk(k, dim=1, sorted=False).indices
    n = magnitudes.shape[1]
    if k >= n or magnitudes.dtype not in _SELECTABLE:
        indices = magnitudes.topk(k, dim=1, sorted=False).indices
        crowded = _crowded(magnitudes, indices, k)
    else:
        values = magnitudes.detach().numpy()
        order = np.argpartition(values, n - k, axis=1)
        cut = values[np.arange(values.shape[0]), order[:, n - k]]
        indices = torch.from_numpy(np.ascontiguousarray(order[:, n - k :]))
        crowded = np.flatnonzero(np.count_nonzero(values >= cut[:, None], axis=1) > k).tolist()
    for row in crowded:
        least = magnitudes[row, indices[row]].min()
        above = (magnitudes[row] > least).nonzero().flatten()
        tied = (magnitudes[row] == least).nonzero().flatten()[: k - above.numel()]
        indices[row] = torch.cat([above, tied])
    return indices


def _crowded(magnitudes: torch.Tensor, indices: torch.Tensor, k: int) -> list[int]:
    """The rows with more entries equal to or above their k-th largest than k."""
    cut = magnitudes.gather(1, indices).amin(dim=1, keepdim=True)
    return ((magnitudes >= cut).sum(dim=1) > k).nonzero().flatten().tolist()


_SELECTABLE = (torch.float32, torch.float64)


@dataclass(frozen=True)
class TopK:
    """The ceil(fraction n) entries of largest magnitude, with their indices: int32
    each, or ``index_width`` bits each where it is set (0: int32)."""

    fraction: float
    index_width: int = 0
    name = "topk"

    def compress(self, values: torch.Tensor, draws: Draws) -> Code:
        k = _sample_count(self.fraction, values.shape[1])
        indices = largest(values.abs(), k)
        return indices, values.gather(1, indices)

    def decode(self, code: Code, n: int) -> torch.Tensor:
        indices, kept = code
        return kept.new_zeros(kept.shape[0], n).scatter_(1, indices, kept)

    def _index_bytes(self, n: int) -> int:
        k = _sample_count(self.fraction, n)
        return math.ceil(k * self.index_width / 8) if self.index_width else k * _INDEX_BYTES

    def nbytes(self, n: int, element_size: int) -> int:
        return _sample_count(self.fraction, n) * element_size + self._index_bytes(n)

    def pack(self, code: Code, row: int) -> torch.Tensor:
        indices, kept = code
        if self.index_width:
            packed = _pack_uints(indices[row], self.index_width)
            return torch.cat([packed, _as_bytes(kept[row])])
        return torch.cat([_as_bytes(indices[row].to(torch.int32)), _as_bytes(kept[row])])

    def unpack(self, data: torch.Tensor, n: int, dtype: torch.dtype) -> Code:
        k = _sample_count(self.fraction, n)
        if self.index_width:
            indices = _unpack_uints(data, k, self.index_width).reshape(1, k)
        else:
            indices = _from_bytes(data, torch.int32, k).to(torch.int64)
        return indices, _from_bytes(data[self._index_bytes(n) :], dtype, k)

    def delta(self, n: int) -> float:
        """k / n: the k largest entries hold at least that share of the squared norm."""
        return _sample_count(self.fraction, n) / n

    def typical_delta(self, n: int) -> float:
        return self.delta(n)


@dataclass(frozen=True)
class RandK:
    """ceil(fraction n) entries drawn at random; the indices travel as the seed that drew them."""

    fraction: float
    name = "randk"

    def compress(self, values: torch.Tensor, draws: Draws) -> Code:
        seeds = draws.seeds()
        indices = self._indices(seeds, values.shape[1])
        return seeds, indices, values.gather(1, indices)

    def _indices(self, seeds: torch.Tensor, n: int) -> torch.Tensor:
        return distinct_indices(seeds, n, _sample_count(self.fraction, n))

    def decode(self, code: Code, n: int) -> torch.Tensor:
        _, indices, kept = code
        return kept.new_zeros(kept.shape[0], n).scatter_(1, indices, kept)

    def nbytes(self, n: int, element_size: int) -> int:
        return _SEED_BYTES + _sample_count(self.fraction, n) * element_size

    def pack(self, code: Code, row: int) -> torch.Tensor:
        seeds, _, kept = code
        return torch.cat([_as_bytes(seeds[row : row + 1].to(torch.int32)), _as_bytes(kept[row])])

    def unpack(self, data: torch.Tensor, n: int, dtype: torch.dtype) -> Code:
        seeds = _from_bytes(data, torch.int32, 1).reshape(1).to(torch.int64)
        kept = _from_bytes(data[_SEED_BYTES:], dtype, _sample_count(self.fraction, n))
        return seeds, self._indices(seeds, n), kept

    def delta(self, n: int) -> float:
        """k / n, in expectation over the draw."""
        return _sample_count(self.fraction, n) / n

    def typical_delta(self, n: int) -> float:
        return self.delta(n)


@dataclass(frozen=True)
class Qsgd:
    """Stochastic rounding to ``levels`` levels of the norm, scaled as CHOCO-SGD needs."""

    levels: int
    name = "qsgd"

    def level_bits(self) -> int:
        return self.levels.bit_length()

    def tau(self, n: int) -> float:
        s = self.levels
        return 1.0 + min(n / s**2, math.sqrt(n) / s)

    def compress(self, values: torch.Tensor, draws: Draws) -> Code:
        n = values.shape[1]
        norms = torch.linalg.vector_norm(values, dim=1, keepdim=True)
        scaled = values.abs() * self.levels / torch.where(norms > 0, norms, 1.0)
        lower = scaled.floor()
        uniform = draws.uniform(n, values.dtype).reshape(values.shape)
        levels = (lower + (uniform < scaled - lower).to(values.dtype)).clamp_(max=self.levels)
        return norms / self.tau(n), values < 0, levels.to(torch.int64)

    def decode(self, code: Code, n: int) -> torch.Tensor:
        norms, negative, levels = code
        signs = torch.where(negative, -1.0, 1.0).to(norms.dtype)
        return (norms / self.levels) * signs * levels.to(norms.dtype)

    def nbytes(self, n: int, element_size: int) -> int:
        return element_size + math.ceil(n * (1 + self.level_bits()) / 8)

    def pack(self, code: Code, row: int) -> torch.Tensor:
        norms, negative, levels = code
        shifts = torch.arange(self.level_bits())
        level_bits = (levels[row].unsqueeze(1) >> shifts) & 1
        bits = torch.cat([negative[row].to(torch.int64), level_bits.reshape(-1)])
        return torch.cat([_as_bytes(norms[row]), _pack_bits(bits)])

    def unpack(self, data: torch.Tensor, n: int, dtype: torch.dtype) -> Code:
        norms = _from_bytes(data, dtype, 1)
        width = self.level_bits()
        bits = _unpack_bits(data[norms.element_size() :], n * (1 + width))
        negative = bits[:n].bool().reshape(1, n)
        shifts = torch.arange(width)
        levels = (bits[n:].reshape(n, width) << shifts).sum(1).reshape(1, n)
        return norms, negative, levels

    def delta(self, n: int) -> float:
        """1 / tau: the unbiased rounding's variance is at most (tau - 1) ||v||^2."""
        return 1.0 / self.tau(n)

    def typical_delta(self, n: int) -> float:
        return self.delta(n)


@dataclass(frozen=True)
class ScaledSign:
    """The mean magnitude times the sign of each entry, one scale per block: per
    parameter tensor where ``sizes`` (the model's tensors) cover the message, else
    one for the whole message."""

    sizes: tuple[int, ...] = ()
    name = "sign"

    def _blocks(self, n: int) -> tuple[int, ...]:
        return self.sizes if len(self.sizes) > 1 and sum(self.sizes) == n else (n,)

    def compress(self, values: torch.Tensor, draws: Draws) -> Code:
        blocks = values.split(self._blocks(values.shape[1]), dim=1)
        scales = torch.cat([b.abs().sum(1, keepdim=True) / b.shape[1] for b in blocks], dim=1)
        return scales, values < 0

    def decode(self, code: Code, n: int) -> torch.Tensor:
        scales, negative = code
        blocks = self._blocks(n)
        spread = torch.cat(
            [scales[:, b : b + 1].expand(-1, size) for b, size in enumerate(blocks)], dim=1
        )
        return spread * torch.where(negative, -1.0, 1.0).to(scales.dtype)

    def nbytes(self, n: int, element_size: int) -> int:
        return len(self._blocks(n)) * element_size + math.ceil(n / 8)

    def pack(self, code: Code, row: int) -> torch.Tensor:
        scales, negative = code
        return torch.cat([_as_bytes(scales[row]), _pack_bits(negative[row])])

    def unpack(self, data: torch.Tensor, n: int, dtype: torch.dtype) -> Code:
        scales = _from_bytes(data, dtype, len(self._blocks(n)))
        bits = data[scales.numel() * scales.element_size() :]
        return scales, _unpack_bits(bits, n).bool().reshape(1, n)

    def delta(self, n: int) -> float:
        """1 / n_t of the largest block: a block of one nonzero entry keeps only that."""
        return 1.0 / max(self._blocks(n))

    def typical_delta(self, n: int) -> float:
        """2 / pi, the contraction on Gaussian entries, in each block."""
        return 2.0 / math.pi


Part = tuple[int, int] | int
"""A tensor of a low-rank code: (m, n) sent as a product, or a size sent dense."""


@dataclass(frozen=True)
class LowRank:
    """Each weight matrix as a rank-r product found by subspace iteration; the other
    tensors dense (module docstring). ``shapes``: the model's tensors, in order."""

    rank: int
    shapes: tuple[tuple[int, ...], ...]
    power_iterations: int = 1
    warm_start: bool = True
    name = "lowrank"

    def _parts(self, n: int) -> list[Part]:
        """Per tensor: (m, cols) where it goes as a product, else its size (dense)."""
        if sum(math.prod(shape) for shape in self.shapes) != n:
            raise ValueError(f"lowrank compresses whole models of {self.shapes}, not {n} values")
        parts: list[Part] = []
        for shape in self.shapes:
            size = math.prod(shape)
            cols = size // shape[0] if shape else 1
            product = len(shape) >= 2 and self.rank * (shape[0] + cols) < size
            parts.append((shape[0], cols) if product else size)
        return parts

    def compress(
        self,
        values: torch.Tensor,
        draws: Draws,
        warm: WarmStarts | None = None,
        key: str = "",
    ) -> Code:
        """The code of each row; with ``warm`` (and ``warm_start``), each matrix starts
        from the basis kept under ``key`` for it and leaves its new one there."""
        agents, offset, code = values.shape[0], 0, []
        keep = warm if self.warm_start else None
        for index, part in enumerate(self._parts(values.shape[1])):
            if isinstance(part, int):
                code.append(values[:, offset : offset + part].clone())
                offset += part
                continue
            m, cols = part
            matrix = values[:, offset : offset + m * cols].reshape(agents, m, cols)
            slot = f"{key}/{index}"
            start = keep.get(slot) if keep is not None else None
            if start is None:
                start = self._draw(draws.child(index), cols, values.dtype)
            p, q = self._factors(matrix, start)
            if keep is not None:
                # an orthonormal basis: a zero difference leaves a usable start, not zeros
                keep[slot] = torch.linalg.qr(q).Q
            code.extend((p, q))
            offset += m * cols
        return tuple(code)

    def _draw(self, draws: Draws, cols: int, dtype: torch.dtype) -> torch.Tensor:
        """A Gaussian start (agents, cols, r), row i from its key of ``draws``."""
        return draws.normal(cols * self.rank, dtype).reshape(len(draws), cols, self.rank)

    def _factors(self, matrix: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(P, Q): P an orthonormal basis from subspace iteration, Q = D^T P."""
        p = q
        for _ in range(max(self.power_iterations, 1)):
            p = torch.linalg.qr(matrix @ q).Q
            q = matrix.transpose(1, 2) @ p
        return p, q

    def decode(self, code: Code, n: int) -> torch.Tensor:
        parts, pieces = iter(code), []
        for part in self._parts(n):
            if isinstance(part, int):
                pieces.append(next(parts))
                continue
            p, q = next(parts), next(parts)
            pieces.append((p @ q.transpose(1, 2)).reshape(p.shape[0], -1))
        return torch.cat(pieces, dim=1)

    def _shapes(self, n: int) -> list[tuple[int, ...]]:
        """The shape of each piece of one agent's code, in order."""
        shapes: list[tuple[int, ...]] = []
        for part in self._parts(n):
            shapes += (
                [(part,)] if isinstance(part, int) else [(part[0], self.rank), (part[1], self.rank)]
            )
        return shapes

    def nbytes(self, n: int, element_size: int) -> int:
        return sum(math.prod(shape) for shape in self._shapes(n)) * element_size

    def pack(self, code: Code, row: int) -> torch.Tensor:
        return torch.cat([_as_bytes(piece[row]) for piece in code])

    def unpack(self, data: torch.Tensor, n: int, dtype: torch.dtype) -> Code:
        size, offset, code = torch.empty(0, dtype=dtype).element_size(), 0, []
        for shape in self._shapes(n):
            count = math.prod(shape)
            code.append(_from_bytes(data[offset:], dtype, count).reshape(1, *shape))
            offset += count * size
        return tuple(code)

    def delta(self, n: int) -> float:
        """0: a projection onto a drawn subspace keeps no share it can promise."""
        return 0.0

    def typical_delta(self, n: int) -> float:
        """(r / min(m, n))^2 / 4 of the largest matrix, so that the automatic steps,
        which take its square root, are half of r / min(m, n), the share a rank-r
        subspace of a flat spectrum keeps. Measured: CHOCO-SGD with rank-1 messages on
        the i.i.d. mnist5k split drifts apart at gamma 0.075 (the square root of that
        share; its consensus distance grows from 2.2 to 564 in 600 iterations) and holds
        at 0.01; BEER with rank-4 messages on the one-digit split drifted apart after
        2,200 iterations on one seed of three at r / min(m, n) (gamma 0.03) and held on
        all three at half of it."""
        matrices = [part for part in self._parts(n) if not isinstance(part, int)]
        if not matrices:
            return 1.0
        m, cols = max(matrices, key=lambda part: part[0] * part[1])
        return min(1.0, self.rank / min(m, cols)) ** 2 / 4


PRECISIONS: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
"""The float types a code's values may travel as (``algorithm.precision``)."""


@dataclass(unsafe_hash=True)
class Rounded:
    """``inner``'s code with its floating-point parts (values, norms, scales, factors)
    rounded to ``precision`` and sent at its width; its indices, seeds and bits as they
    are. The rounding is part of the compression: every holder, the sender included,
    adds the rounded values, and what rounding drops stays in the sender's difference
    to its public estimate. float16's range is kept by clamping to +-65504."""

    inner: Compressor
    precision: torch.dtype
    name: str = field(init=False, default="", compare=False)

    def __post_init__(self) -> None:
        self.name = self.inner.name  # set once: the wrapper is not changed after

    def compress(
        self, values: torch.Tensor, draws: Draws, warm: WarmStarts | None = None, key: str = ""
    ) -> Code:
        code = compress_message(self.inner, values, draws, warm, key)
        return tuple(self._narrow(part).to(part.dtype) for part in code)

    def _narrow(self, part: torch.Tensor) -> torch.Tensor:
        if not part.is_floating_point():
            return part
        largest = torch.finfo(self.precision).max
        return part.clamp(-largest, largest).to(self.precision)

    def decode(self, code: Code, n: int) -> torch.Tensor:
        return self.inner.decode(code, n)

    def nbytes(self, n: int, element_size: int) -> int:
        return self.inner.nbytes(n, self.precision.itemsize)

    def pack(self, code: Code, row: int) -> torch.Tensor:
        return self.inner.pack(tuple(self._narrow(part) for part in code), row)

    def unpack(self, data: torch.Tensor, n: int, dtype: torch.dtype) -> Code:
        code = self.inner.unpack(data, n, self.precision)
        return tuple(part.to(dtype) if part.is_floating_point() else part for part in code)

    def delta(self, n: int) -> float:
        """The inner contraction less the rounding's: ||C(v) - v|| grows by at most the
        unit roundoff u times ||v|| (for values in the normal range), so 1 - delta is at
        most (sqrt(1 - delta_inner) + u)^2."""
        return _rounded_delta(self.inner.delta(n), self.precision)

    def typical_delta(self, n: int) -> float:
        return _rounded_delta(self.inner.typical_delta(n), self.precision)


def _rounded_delta(inner: float, precision: torch.dtype) -> float:
    roundoff = torch.finfo(precision).eps / 2
    return max(0.0, 1.0 - (math.sqrt(max(0.0, 1.0 - inner)) + roundoff) ** 2)


@dataclass(frozen=True)
class CompressionConfig(AlgorithmConfig):
    """How an algorithm compresses what it sends (see :mod:`murmur.algorithms.compressors`)."""

    compress: str = "none"
    """Compressor: none, topk, randk, qsgd, sign or lowrank."""
    fraction: float = 0.01
    """Entries kept by topk and randk, as a fraction of each message's entries, in (0, 1]."""
    levels: int = 16
    """Quantization levels s of qsgd (>= 1)."""
    sign_scale: Literal["tensor", "model"] = "tensor"
    """sign: one scale per parameter tensor, or one for the whole model."""
    rank: int = 1
    """lowrank: the rank r of each weight matrix's message (>= 1)."""
    power_iterations: int = 1
    """lowrank: steps of subspace iteration per message (>= 1)."""
    warm_start: bool = True
    """lowrank: start each message's iteration from the last one's Q, as PowerGossip
    does (false: from a fresh Gaussian draw each time)."""
    precision: Literal["float32", "float16", "bfloat16"] = "float32"
    """The float type a message's values travel as (2 bytes each for float16 and
    bfloat16; the rounding is part of the compression). float32: as computed."""
    indices: Literal["int32", "packed"] = "int32"
    """topk: each index as an int32, or packed in ceil(log2 P) bits (P: the model's
    parameters), 17 bits for the MLP 784-100-10."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.compress not in COMPRESSORS:
            raise UsageError(
                f"algorithm.compress must be one of {', '.join(COMPRESSORS)}, not {self.compress!r}"
            )
        if not 0 < self.fraction <= 1:
            raise UsageError(f"algorithm.fraction must be in (0, 1], not {self.fraction:g}")
        if self.levels < 1:
            raise UsageError(f"algorithm.levels must be at least 1, not {self.levels}")
        if self.rank < 1 or self.power_iterations < 1:
            raise UsageError(
                "algorithm.rank and algorithm.power_iterations must be at least 1, not "
                f"{self.rank} and {self.power_iterations}"
            )
        if self.sign_scale not in ("tensor", "model"):
            raise UsageError(
                f"algorithm.sign_scale must be 'tensor' or 'model', not {self.sign_scale!r}"
            )
        self._check_encoding()

    def compresses(self) -> bool:
        """Whether messages are encoded at all: a compressor, or values rounded."""
        return self.compress != "none" or self.precision != "float32"

    def _check_encoding(self) -> None:
        if self.precision not in PRECISIONS:
            raise UsageError(
                f"algorithm.precision must be one of {', '.join(PRECISIONS)}, "
                f"not {self.precision!r}"
            )
        if self.indices not in ("int32", "packed"):
            raise UsageError(f"algorithm.indices must be 'int32' or 'packed', not {self.indices!r}")
        if self.indices == "packed" and self.compress != "topk":
            raise UsageError(
                f"algorithm.indices = 'packed' codes topk's indices; {self.compress!r} sends "
                "none (randk sends the seed that drew them)"
            )

    def compressor(
        self, sizes: Sequence[int] = (), shapes: Sequence[tuple[int, ...]] = ()
    ) -> Compressor:
        """The compressor; ``sizes``: the model's parameter tensors, which ``sign``
        scales one by one (``sign_scale = "tensor"``); ``shapes``: theirs, which
        ``lowrank`` needs."""
        entry = COMPRESSORS[self.compress]
        made = entry.build(self, tuple(sizes), tuple(tuple(shape) for shape in shapes))
        missing = [part for part in COMPRESSOR_PARTS if not callable(getattr(made, part, None))]
        if missing:
            raise UsageError(
                f"compressor '{self.compress}' ({entry.origin}): what it made, a "
                f"{type(made).__name__}, lacks {', '.join(missing)}"
            )
        if self.precision == "float32":
            return made
        return Rounded(made, PRECISIONS[self.precision])


def kept_share(compressor: Compressor, n: int) -> float:
    """omega, the contraction the automatic steps take for differences of n entries:
    the compressor's ``typical_delta`` (k / n for topk and randk, 1 / tau for qsgd,
    2 / pi for the sign, 1 for none)."""
    return compressor.typical_delta(n)


def make_compressor(
    name: str, *, fraction: float = 0.01, levels: int = 16, sizes: tuple[int, ...] = ()
) -> Compressor:
    """The built-in compressor called ``name`` (not lowrank); ValueError for another
    name. ``sizes``: the blocks the sign scales one by one."""
    if name == "none":
        return NoCompression()
    if name == "topk":
        return TopK(fraction)
    if name == "randk":
        return RandK(fraction)
    if name == "qsgd":
        return Qsgd(levels)
    if name == "sign":
        return ScaledSign(sizes)
    if name == "lowrank":
        raise ValueError("lowrank needs the model's tensor shapes: CompressionConfig.compressor")
    raise ValueError(f"unknown compressor {name!r}; choose one of {', '.join(COMPRESSORS)}")


def _lowrank(
    config: CompressionConfig, sizes: tuple[int, ...], shapes: tuple[tuple[int, ...], ...]
) -> Compressor:
    if not shapes:
        raise UsageError("lowrank compresses the weight matrices of a model")
    return LowRank(config.rank, shapes, config.power_iterations, config.warm_start)


def _sign(
    config: CompressionConfig, sizes: tuple[int, ...], shapes: tuple[tuple[int, ...], ...]
) -> Compressor:
    return ScaledSign(sizes if config.sign_scale == "tensor" else ())


register_compressor("none", lambda config, sizes, shapes: NoCompression(), "the n values")


def _topk(
    config: CompressionConfig, sizes: tuple[int, ...], shapes: tuple[tuple[int, ...], ...]
) -> Compressor:
    if config.indices == "int32":
        return TopK(config.fraction)
    if not sizes:
        raise UsageError("algorithm.indices = 'packed' needs the model's size")
    return TopK(config.fraction, index_bits(sum(sizes)))


register_compressor(
    "topk",
    _topk,
    "the entries of largest magnitude (algorithm.fraction of them), with their indices",
)
register_compressor(
    "randk",
    lambda config, sizes, shapes: RandK(config.fraction),
    "algorithm.fraction of the entries at random, with the seed that chose them",
)
register_compressor(
    "qsgd",
    lambda config, sizes, shapes: Qsgd(config.levels),
    "the norm, signs, and algorithm.levels levels rounded at random (unbiased)",
)
register_compressor("sign", _sign, "the sign of each entry, scaled by the mean magnitude")
register_compressor(
    "lowrank", _lowrank, "each weight matrix as P Q^T of rank algorithm.rank (PowerGossip)"
)
