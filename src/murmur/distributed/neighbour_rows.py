"""A mailbox's rows of its neighbours' values, and the receive buffers they come in.

Each neighbour has a few receive buffers, reused: the one its newest VALUE arrived
in is lent to the reader as the neighbour's row (no copy), and goes back for a later
receive once a newer value has replaced it. A DELTA is added to a row owned here (a
lent row is copied into it first).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

import torch

from murmur.distributed.wire import HEADER_WORDS, receive_buffer


class NeighbourRows:
    """One row per neighbour (index ``i``), and each neighbour's receive buffers.

    ``initial`` (neighbours, P): the values each neighbour starts from.
    ``lengths``: how many of the P float32 of its row each neighbour's VALUE
    carries (default: all); the rest of a shorter row stays as it started.
    ``delta_words``: the most float32 words of a DELTA, which a receive buffer
    must hold too. The caller serialises the calls, but for :meth:`take`, which
    a neighbour's receiving thread makes alone.
    """

    def __init__(
        self,
        neighbours: int,
        initial: torch.Tensor,
        lengths: Sequence[int] | None,
        delta_words: int,
    ) -> None:
        self.lengths = _value_lengths(neighbours, initial, lengths)
        """The float32 a VALUE of each neighbour carries."""
        self._owned = initial.clone()
        """Row ``i``: neighbour ``i``'s value where it is held here (at the start, after a
        DELTA or a restore)."""
        self.rows = [self._owned[i, :n] for i, n in enumerate(self.lengths)]
        """Neighbour ``i``'s value as the reader last took it in."""
        self._lent: list[torch.Tensor | None] = [None] * neighbours
        """The receive buffer ``rows[i]`` is a view of, if it is one."""
        self._capacity = [max(n, delta_words) for n in self.lengths]
        self._free: list[deque[torch.Tensor]] = [deque() for _ in range(neighbours)]
        """Each neighbour's receive buffers not in use (a deque: its ends are thread-safe,
        so its receiving thread takes one without the caller's lock)."""
        self._buffers: list[dict[int, torch.Tensor]] = [{} for _ in range(neighbours)]
        """Each neighbour's receive buffers by the address of their payload."""

    def take(self, i: int) -> torch.Tensor:
        """In neighbour ``i``'s receiving thread: a receive buffer, a free one or a new one."""
        try:
            return self._free[i].pop()
        except IndexError:
            buffer = receive_buffer(self._capacity[i])
            self._buffers[i][buffer[HEADER_WORDS:].data_ptr()] = buffer
            return buffer

    def buffer_counts(self) -> list[int]:
        """How many receive buffers each neighbour has had made."""
        return [len(buffers) for buffers in self._buffers]

    def lend(self, i: int, payload: torch.Tensor) -> None:
        """Neighbour ``i``'s row is now ``payload``, a VALUE in its receive buffer."""
        lent = self._lent[i]
        if lent is not None:
            self._give_back(i, lent)
        self._lent[i] = payload
        self.rows[i] = payload

    def add(
        self,
        i: int,
        words: torch.Tensor,
        add: Callable[[torch.Tensor, torch.Tensor], None] | None,
    ) -> None:
        """Add neighbour ``i``'s DELTA ``words`` to its row by ``add(row, words)``;
        ValueError for a malformed one, or with no ``add``."""
        row = self._owned[i, : self.lengths[i]]
        lent = self._lent[i]
        if lent is not None:
            row.copy_(lent)
            self._give_back(i, lent)
            self._lent[i] = None
            self.rows[i] = row
        try:
            if add is None:
                raise ValueError("a DELTA where a VALUE was expected")
            add(row, words)
        finally:
            self._give_back(i, words)

    def matrix(self) -> torch.Tensor:
        """The rows as one (neighbours, P) tensor (a copy), as :meth:`restore` takes them."""
        values = self._owned.clone()
        for i, row in enumerate(self.rows):
            values[i, : row.numel()].copy_(row)
        return values

    def check(self, values: torch.Tensor) -> None:
        """ValueError unless ``values`` is shaped and typed as :meth:`matrix`."""
        if values.shape != self._owned.shape or values.dtype != self._owned.dtype:
            raise ValueError(
                f"mailbox values {values.dtype} {tuple(values.shape)}, expected "
                f"{self._owned.dtype} {tuple(self._owned.shape)}"
            )

    def restore(self, values: torch.Tensor) -> None:
        """Start again from ``values``, as :meth:`matrix` gave them (:meth:`check` first)."""
        self._owned.copy_(values)

    def _give_back(self, i: int, payload: torch.Tensor) -> None:
        """The buffer of ``payload`` may receive again."""
        self._free[i].append(self._buffers[i][payload.data_ptr()])


def _value_lengths(
    neighbours: int, initial: torch.Tensor, lengths: Sequence[int] | None
) -> list[int]:
    """The float32 a VALUE of each of a mailbox's ``neighbours`` carries: ``lengths``, by
    default every neighbour's whole row of ``initial``; ValueError unless ``initial`` is
    float32 with one row per neighbour and each length fits in a row."""
    if initial.shape[0] != neighbours or initial.dtype != torch.float32:
        raise ValueError(
            f"initial must be float32 with one row per neighbour ({neighbours}), "
            f"got {initial.dtype} {tuple(initial.shape)}"
        )
    row = initial.shape[1]
    chosen = list(lengths) if lengths is not None else [row] * neighbours
    if len(chosen) != neighbours or not all(0 < n <= row for n in chosen):
        raise ValueError(
            f"lengths must give each of the {neighbours} neighbours 1 to {row} values, got {chosen}"
        )
    return chosen
