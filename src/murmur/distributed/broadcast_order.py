"""How a mailbox's neighbours number their broadcasts, and so when a message is out of
turn and when a step's messages are all in: every neighbour sends every broadcast
(:class:`InTurn`), or each sends some only, on a time-varying graph (:class:`Skipping`).
A :class:`~murmur.distributed.mailbox.Mailbox` picks one when it is made."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from murmur.distributed.failures import PeerFailure
from murmur.distributed.wire import Kind
from murmur.distributed.wording import rank_list

NUMBERED = (Kind.VALUE, Kind.DELTA, Kind.NONE)
"""The kinds of message that carry a broadcast's number."""


class BroadcastOrder(Protocol):
    """The rules of one way of numbering broadcasts. Lists run by neighbour index:
    ``steps`` the newest number each has sent, ``read`` the newest taken in."""

    keeps_none: bool
    """Whether a NONE is kept for the reader, so that it sees which numbers came."""

    def out_of_turn(self, kind: Kind, step: int, last: int) -> str | None:
        """Why a ``kind`` message numbered ``step`` cannot follow number ``last``, or None."""
        ...

    def all_in(self, steps: Sequence[int], awaited: Sequence[int], step: int) -> bool:
        """Whether every ``awaited`` neighbour has sent its step-``step`` message."""
        ...

    def check_taken(
        self, step: int, senders: Sequence[int], read: Sequence[int], neighbours: Sequence[int]
    ) -> None:
        """Once the messages up to ``step`` are taken in: PeerFailure naming the
        ``senders`` (indices into ``neighbours``, the ranks) that sent none of that number."""
        ...


class InTurn:
    """Every neighbour sends every broadcast, numbered 1, 2, ... in turn, and a STOP
    counting them all; a reader waits for every neighbour."""

    keeps_none = False

    def out_of_turn(self, kind: Kind, step: int, last: int) -> str | None:
        if kind in NUMBERED and step != last + 1:
            return f"step {step} after step {last}"
        if kind == Kind.STOP and step != last:
            return f"STOP after {step} broadcasts, {last} received"
        return None

    def all_in(self, steps: Sequence[int], awaited: Sequence[int], step: int) -> bool:
        return min(steps) >= step

    def check_taken(
        self, step: int, senders: Sequence[int], read: Sequence[int], neighbours: Sequence[int]
    ) -> None:
        return None


class Skipping:
    """A neighbour need not send every broadcast (on a time-varying graph it talks to
    this rank in some steps only): its numbers only increase, its STOP counts at least
    the broadcasts received, and a reader is told which neighbours sent the step it asks
    for, each of whose messages of that number must be in."""

    keeps_none = True

    def out_of_turn(self, kind: Kind, step: int, last: int) -> str | None:
        if kind in NUMBERED and step <= last:
            return f"step {step} after step {last}"
        if kind == Kind.STOP and step < last:
            return f"STOP after {step} broadcasts, {last} received"
        return None

    def all_in(self, steps: Sequence[int], awaited: Sequence[int], step: int) -> bool:
        return all(steps[i] >= step for i in awaited)

    def check_taken(
        self, step: int, senders: Sequence[int], read: Sequence[int], neighbours: Sequence[int]
    ) -> None:
        """A sender whose messages, all in up to ``step``, hold none of that number
        follows another schedule."""
        skipped = [neighbours[i] for i in senders if read[i] != step]
        if skipped:
            raise PeerFailure(
                skipped,
                f"{rank_list(skipped)} sent no step-{step} message, though due to "
                "(another schedule of the graphs?)",
            )
