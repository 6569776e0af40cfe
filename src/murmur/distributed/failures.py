"""How a rank tells of a peer that failed: the errors it raises, and why a peer is heard
no more, as a :class:`Fault` kind that code tells apart and words that the user reads."""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from murmur.distributed.wording import first_line


class PeerFailure(RuntimeError):
    """A peer stopped answering or sent something it must not; ``ranks`` names it."""

    def __init__(self, ranks: Sequence[int], message: str) -> None:
        super().__init__(message)
        self.ranks = tuple(ranks)


class PeerTimeout(PeerFailure):
    """Nothing arrived from ``ranks`` before a deadline; ``late`` says what did not (the
    message without the ranks' names)."""

    def __init__(self, ranks: Sequence[int], message: str, late: str = "") -> None:
        super().__init__(ranks, message)
        self.late = late or message


class Fault(Enum):
    """Why a peer is heard no more; the value is how a run's summary says it."""

    LOST_CONNECTION = "lost the connection"
    """Its connection failed."""
    SILENT = "went silent past the timeout"
    """It sent nothing while needed, for longer than the timeout."""
    MALFORMED = "sent a malformed message"
    """It sent a message that breaks the wire format or comes out of turn."""
    UNFINISHED = "did not finish"
    """It did not end its part of the run in time."""


class Reason(str):
    """Why a peer is heard no more: the words told to the user (the string itself) and
    their :attr:`kind`, by which code tells reasons apart."""

    kind: Fault

    def __new__(cls, text: str, kind: Fault) -> Reason:
        reason = super().__new__(cls, text)
        reason.kind = kind
        return reason

    def __reduce__(self) -> tuple[type[Reason], tuple[str, Fault]]:
        """Copies and pickles keep the kind."""
        return Reason, (str(self), self.kind)

    @classmethod
    def of(cls, kind: Fault, detail: str) -> Reason:
        """``kind``'s words, then ``detail`` in parentheses."""
        return cls(f"{kind.value} ({detail})", kind)

    @classmethod
    def lost_connection(cls, error: BaseException) -> Reason:
        """The connection failed with ``error``."""
        return cls.of(Fault.LOST_CONNECTION, first_line(error))
