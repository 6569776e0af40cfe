"""Public estimates x^ and the compressed differences that move them.

CHOCO-SGD, SPARQ-SGD and DETSGRAD with compression keep, for every agent i, a
public estimate x^_i that i and all its neighbours hold alike. Agent i moves it
by sending q_i = C(x_i - x^_i); everyone holding x^_i adds the decoded q_i, so
the estimates stay identical everywhere and the error x_i - x^_i left by the
compressor is sent later rather than lost.

A message may cover the whole model or, with per-tensor triggers, only some of
its parameter tensors (*segments*): an :class:`EstimateUpdate` says which
segments each agent sends, and carries their codes. Each sent segment is one
event and, to each neighbour, one point-to-point message of the segment's
encoded size. ``pack`` / :func:`unpack_update` are the bytes that travel in
the distributed runtime: the sent segments' codes, then their numbers (int32)
and their count (int32), padded to whole float32 words.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple, Protocol, TypeVar, cast

import torch

from murmur.algorithms.compressors import Code, Compressor, WarmStarts, compress_message
from murmur.algorithms.draws import Draws
from murmur.seeding import agent_keys

_WORD = 4
S = TypeVar("S", bound="CompressedState")


@dataclass(frozen=True)
class Segments:
    """How a flat parameter vector splits into tensors: their sizes in order."""

    sizes: tuple[int, ...]
    shapes: tuple[tuple[int, ...], ...] = ()
    """The tensors' shapes where known (the model's), for compressors of matrices."""

    @classmethod
    def whole(cls, parameters: int) -> Segments:
        return cls((parameters,))

    @cached_property
    def slices(self) -> tuple[slice, ...]:
        ends = list(itertools.accumulate(self.sizes))
        return tuple(slice(end - size, end) for size, end in zip(self.sizes, ends, strict=True))

    @property
    def total(self) -> int:
        return sum(self.sizes)

    def __len__(self) -> int:
        return len(self.sizes)

    def norms(self, values: torch.Tensor) -> torch.Tensor:
        """The l2 norm of each segment of each row of ``values`` (agents, P): (agents, S)."""
        return torch.stack(
            [torch.linalg.vector_norm(values[:, part], dim=1) for part in self.slices], dim=1
        )


@dataclass(frozen=True)
class EstimateUpdate:
    """Every agent's compressed difference of one round, ready to publish."""

    sent: torch.Tensor
    """(agents, S) bool: which segments each agent sends."""
    delta: torch.Tensor
    """(agents, P): what every holder of x^_i adds to it, zero outside the sent segments."""
    codes: tuple[Code, ...]
    """One code per segment, agent axis first (rows that do not send it included)."""
    compressor: Compressor
    segments: Segments

    def segment_bytes(self) -> torch.Tensor:
        """(S,) int64: the encoded size of each segment's message."""
        compressor = cast(Any, self.compressor)  # a frozen dataclass: hashable
        return _segment_bytes(
            compressor, self.segments.sizes, self.delta.element_size(), self.delta.device
        )

    def pack(self, row: int, out: torch.Tensor | None = None) -> torch.Tensor:
        """Row ``row``'s sent segments as float32 words (see the module docstring);
        written into the start of ``out`` (float32, room enough) when given, and
        that prefix returned."""
        sent = self.sent[row].nonzero().squeeze(1)
        parts = [self.compressor.pack(self.codes[s], row) for s in sent.tolist()]
        padding = torch.zeros(-sum(part.numel() for part in parts) % _WORD, dtype=torch.uint8)
        trailer = torch.cat([sent.to(torch.int32), torch.tensor([sent.numel()], dtype=torch.int32)])
        pieces = [*parts, padding, trailer.view(torch.uint8)]
        if out is None:
            return torch.cat(pieces).view(torch.float32)
        size = sum(piece.numel() for piece in pieces)
        if size > out.numel() * _WORD:
            raise ValueError(f"a packed difference of {size} bytes, room for {out.numel() * _WORD}")
        torch.cat(pieces, out=out.view(torch.uint8)[:size])
        return out[: size // _WORD]


@functools.lru_cache(maxsize=64)
def _segment_bytes(
    compressor: Compressor, sizes: tuple[int, ...], element_size: int, device: torch.device
) -> torch.Tensor:
    """(S,) int64 on ``device``, made once per run (not to be written to)."""
    counts = torch.tensor([compressor.nbytes(n, element_size) for n in sizes])
    return counts.to(device)


def compressed_update(
    compressor: Compressor,
    difference: torch.Tensor,
    sent: torch.Tensor,
    segments: Segments,
    draws: Draws,
    warm: WarmStarts | None = None,
) -> EstimateUpdate:
    """Compress each segment of ``difference`` (agents, P) for the segments ``sent``
    (agents, S) flags; segment s of row i draws from row i's key of
    ``draws.child(s)``; ``warm``: the senders' warm starts (``lowrank``), kept by
    segment."""
    codes, parts = [], []
    for index, part in enumerate(segments.slices):
        values = difference[:, part]
        code = compress_message(compressor, values, draws.child(index), warm, str(index))
        dense = compressor.decode(code, part.stop - part.start)
        codes.append(code)
        parts.append(torch.where(sent[:, index : index + 1], dense, 0.0))
    delta = torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]
    return EstimateUpdate(sent, delta, tuple(codes), compressor, segments)


def add_packed(
    target: torch.Tensor,
    words: torch.Tensor,
    compressor: Compressor,
    segments: Segments,
) -> None:
    """Add the difference packed in ``words`` (float32) to ``target`` (P,) in place.

    ValueError when the words are not a well-formed message for these segments.
    """
    data = words.view(torch.uint8)
    count = int(words[-1:].view(torch.int32))
    if not 0 < count <= len(segments) or count + 1 > words.numel():
        raise ValueError(f"a difference of {count} segments of {len(segments)}")
    numbers = words[-1 - count : -1].view(torch.int32).tolist()
    if numbers != sorted(set(numbers)) or not 0 <= numbers[0] <= numbers[-1] < len(segments):
        raise ValueError(f"segment numbers {numbers} of {len(segments)} segments")
    size = target.element_size()
    lengths = [compressor.nbytes(segments.sizes[s], size) for s in numbers]
    expected = sum(lengths) + -sum(lengths) % _WORD + _WORD * (count + 1)
    if expected != data.numel():
        raise ValueError(f"{data.numel()} bytes for a difference of {expected}")
    offset = 0
    for number, length in zip(numbers, lengths, strict=True):
        part = segments.slices[number]
        code = compressor.unpack(
            data[offset : offset + length], part.stop - part.start, target.dtype
        )
        target[part] += compressor.decode(code, part.stop - part.start)[0]
        offset += length


class CompressedState(Protocol):
    """A state record with the senders' warm starts."""

    @property
    def warm(self) -> WarmStarts | None: ...


def with_warm(state: S) -> S:
    """``state`` (a named tuple) with its warm starts, empty until the first message."""
    if state.warm is not None:
        return state
    record: Any = state
    return cast(S, record._replace(warm={}))


def warm_starts(state: CompressedState) -> WarmStarts:
    """The warm starts :func:`with_warm` gave ``state``."""
    if state.warm is None:
        raise ValueError("warm starts are made before the first message")
    return state.warm


class Message(NamedTuple):
    """What a compressed message's draws follow from: the run's seed, the agents that
    send it and the iteration."""

    seed: int
    agents: Sequence[int]
    iteration: int


def sent_update(
    compressor: Compressor,
    difference: torch.Tensor,
    sent: torch.Tensor,
    segments: Segments,
    message: Message,
    state: CompressedState,
) -> EstimateUpdate:
    """:func:`compressed_update` of ``difference`` with ``message``'s draws and the warm
    starts :func:`with_warm` gave ``state``: what the agents publish."""
    seed, agents, iteration = message
    draws = message_draws(seed, agents, iteration, difference.device)
    return compressed_update(compressor, difference, sent, segments, draws, warm_starts(state))


def message_draws(seed: int, agents: Sequence[int], iteration: int, device: torch.device) -> Draws:
    """The draws of the compressed message ``agents`` send at ``iteration`` (run seed
    ``seed``), on ``device``: the same for an agent in both runtimes."""
    return Draws(_agent_keys(seed, agents, device)).child(iteration)


_KEYS: dict[tuple[int, int, torch.device], tuple[Sequence[int], torch.Tensor]] = {}
"""Each block's agent keys, by seed, block and device: worked out once per run."""


def _agent_keys(seed: int, agents: Sequence[int], device: torch.device) -> torch.Tensor:
    known = _KEYS.get((seed, id(agents), device))
    if known is not None and known[0] is agents:
        return known[1]
    if len(_KEYS) >= 16:
        _KEYS.clear()
    indices = torch.tensor(list(agents), dtype=torch.int64)
    keys = agent_keys(seed, "compress", indices).to(device)
    _KEYS[(seed, id(agents), device)] = (agents, keys)
    return keys


def max_packed_words(parameters: int, element_size: int) -> int:
    """An upper bound on the float32 words of any packed difference of ``parameters`` entries.

    Per entry at most an index and a value (topk at fraction 1) or 64 level bits
    (qsgd), plus per segment (at most one per entry) a value, its number and padding.
    """
    per_entry = max(element_size + 4, 8) + element_size + 2 * _WORD
    return (per_entry * parameters) // _WORD + 1
