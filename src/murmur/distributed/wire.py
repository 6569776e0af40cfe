"""The wire format of the distributed runtime, and the loop that receives a peer's messages.

Every message is one gloo message of float32 words::

    [MAGIC, kind, sender, step, length]    the header: five int64 (ten words)
    payload                                ``length`` float32
    check                                  one int32, a hash of the header

Only tensors cross the wire; nothing is pickled. Header and payload travel as
one message, so a message costs gloo one send, as a bare ``dist.send`` does.

gloo's point-to-point calls shape the design:

- A send completes only once the receiver has posted a matching receive, and
  then goes out at once: gloo tells the sender of every posted receive ahead of
  time. So each receiving side keeps a receive posted for every neighbour at
  all times, in a buffer sized for the largest message it accepts from it, and
  a sender never waits for the receiver's program. Two ranks that send to each
  other at the same moment both complete, and sending threads never wait on
  each other's sends.
- A pending receive cannot be polled, so a receiver runs threads that block in
  receives (:func:`receive_loop`), one per neighbour. One thread per neighbour
  rather than one receive from any source: a sender that freezes halfway through
  a message (a stopped process, a partitioned machine) holds the receive that
  matched it, and a shared receive would then stall every other neighbour
  behind it.
- A message larger than its receive buffer aborts the receiving process from
  C++, so every receive buffer holds the largest message the receiver accepts
  from that sender. A shorter one fills a prefix, and gloo does not say how
  much arrived: the header's ``length`` says where the check word must be, and
  a message cut short leaves there what the buffer held before, which is never
  the check word (receive buffers start zeroed, and every check word is zeroed
  once read).
- A gloo wait that times out closes every connection of the process group,
  so no gloo wait here has a deadline: receiving threads wait for messages,
  the :class:`~murmur.distributed.outbox.Outbox`'s threads (one per neighbour)
  wait for sends to complete, and the callers wait for those threads with their
  own deadlines (:meth:`~murmur.distributed.mailbox.Mailbox.values_at`,
  :meth:`~murmur.distributed.mailbox.Mailbox.wait_stopped`,
  :meth:`~murmur.distributed.outbox.Outbox.send`,
  :meth:`~murmur.distributed.outbox.Outbox.wait`), raising
  :class:`~murmur.distributed.failures.PeerTimeout` or
  :class:`~murmur.distributed.failures.PeerFailure` naming the ranks they
  waited for. A peer that stops answering then stalls only the threads that
  talk to it, and the rank can still tell the others.

A malformed message (bad magic number, wrong sender, kind, length or step,
shorter than announced) ends its sender's receiving loop, and its payload is
never read. Its sender is not trusted again: since bytes cannot be skipped, its
thread stops listening (the sender's later sends never complete, so it fails on
its own deadline), and anyone waiting for it is told at once instead of at the
deadline. What gloo itself cannot survive is a message larger than the largest
one the receiver accepts from its sender: that still aborts the receiver.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from enum import IntEnum

import numpy as np
import torch
import torch.distributed as dist

from murmur.distributed.failures import Fault, Reason

MAGIC = 0x6D726D72  # "mrmr"
HEADER_FIELDS = 5
HEADER_WORDS = 2 * HEADER_FIELDS
"""The header's float32 words: five int64."""
MESSAGE_TAG = 0
"""The tag of a mailbox's and an outbox's messages."""
FOREVER = timedelta(days=7)
"""How long a receiving thread waits: in effect forever, as a timeout would be fatal."""


class Kind(IntEnum):
    """What a message is. The header's ``step`` and ``length`` mean, per kind:"""

    VALUE = 1
    """A neighbour's broadcast number ``step`` (1, 2, ...): ``length`` floats follow."""
    NONE = 2
    """Broadcast number ``step`` of a neighbour that had nothing to send; no payload."""
    PUSH = 3
    """A worker's gradient for the parameter server, of the model version ``step``."""
    MODEL = 4
    """The parameter server's model, version ``step``, for a worker."""
    STOP = 5
    """The sender is done after ``step`` broadcasts and sends nothing more."""
    ABORT = 6
    """The sender stops because rank ``step`` failed."""
    PING = 7
    """Are you there? The receiving thread answers with a PONG, even while the rank's
    training waits for another rank."""
    UPDATE = 8
    """An asynchronous node's update number ``step`` (1, 2, ...; a newer one supersedes
    an older one, so numbers may be skipped): ``length`` floats follow."""
    RESULT = 9
    """A rank's results for rank 0 at the end of a run: ``length`` floats follow."""
    DELTA = 10
    """A neighbour's broadcast number ``step`` (1, 2, ...) carrying a compressed
    difference to its public estimate (:mod:`murmur.algorithms.estimates`):
    ``length`` float32 words follow, at most the receiver's bound."""
    PONG = 11
    """The answer to a PING: the sender's process runs. No payload."""


def check_word(kind: int, sender: int, step: int, length: int) -> int:
    """The int32 that ends a message with this header: a hash of it, never 0."""
    mixed = (
        MAGIC
        ^ (kind * 0x9E3779B1)
        ^ (sender * 0x85EBCA6B)
        ^ (step * 0xC2B2AE35)
        ^ (length * 0x27D4EB2F)
    ) & 0xFFFFFFFF | 1
    return mixed - (1 << 32) if mixed >= 1 << 31 else mixed


def words_for(length: int) -> int:
    """The float32 words of a message with ``length`` payload floats."""
    return HEADER_WORDS + length + 1


class Envelope:
    """A reusable send buffer: a header, room for ``capacity`` float32 of payload, the
    check word. The sender writes its payload into ``payload`` (all of it, or a prefix
    of ``length`` floats) and the :class:`~murmur.distributed.outbox.Outbox` sends the
    buffer as it is; it must not change until the sends of it have completed
    (``pending`` is 0)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.words = torch.empty(words_for(capacity), dtype=torch.float32)
        self._numbers = self.words.numpy()
        self._header = self._numbers[:HEADER_WORDS].view(np.int64)
        self.length = capacity
        """The payload floats the next message carries: a prefix of ``payload``."""
        self.pending = 0
        """Sends of this buffer posted and not completed (kept by the outbox)."""

    @property
    def payload(self) -> torch.Tensor:
        """Room for the payload: ``capacity`` float32 (a view, written in place)."""
        return self.words[HEADER_WORDS : HEADER_WORDS + self.capacity]

    def fill(self, payload: torch.Tensor) -> Envelope:
        """Copy ``payload`` (float32, at most ``capacity`` of them) in; set ``length``."""
        flat = payload.reshape(-1)
        self.words[HEADER_WORDS : HEADER_WORDS + flat.numel()].copy_(flat)
        self.length = flat.numel()
        return self

    def seal(self, kind: Kind, sender: int, step: int, length: int) -> torch.Tensor:
        """Write the header and check word of a message of ``length`` payload floats;
        the words to send."""
        if not 0 <= length <= self.capacity:
            raise ValueError(f"a payload of {length} floats in an envelope of {self.capacity}")
        self._header[:] = (MAGIC, int(kind), sender, step, length)
        end = HEADER_WORDS + length
        self._numbers[end : end + 1].view(np.int32)[0] = check_word(int(kind), sender, step, length)
        return self.words[: end + 1]


def encode(
    kind: Kind,
    sender: int,
    step: int,
    payload: torch.Tensor | None = None,
    length: int | None = None,
) -> torch.Tensor:
    """The words of one message. ``length`` (default: the payload's size) is what the
    header announces and where the check word is computed for: a different one makes
    a malformed message, as tests need."""
    values = payload.reshape(-1) if payload is not None else torch.empty(0)
    announced = values.numel() if length is None else length
    header = torch.tensor([MAGIC, int(kind), sender, step, announced], dtype=torch.int64)
    check = torch.tensor([check_word(int(kind), sender, step, announced)], dtype=torch.int32)
    return torch.cat(
        [header.view(torch.float32), values.to(torch.float32), check.view(torch.float32)]
    )


def receive_buffer(capacity: int) -> torch.Tensor:
    """A zeroed receive buffer for messages of up to ``capacity`` payload floats (zero
    pages are only mapped, so room a message never fills costs no memory)."""
    return torch.from_numpy(np.zeros(words_for(capacity), dtype=np.float32))


def _largest(allowed: int | range) -> int:
    return allowed.stop - 1 if isinstance(allowed, range) else allowed


def receive_loop(
    group: dist.ProcessGroup,
    source: int,
    accept: Mapping[int, int | range],
    on_message: Callable[[Kind, int, torch.Tensor | None], bool],
    on_end: Callable[[Reason], None],
    tag: int = MESSAGE_TAG,
    check: Callable[[Kind, int], str | None] = lambda kind, step: None,
    buffers: Callable[[], torch.Tensor] | None = None,
) -> None:
    """Receive ``source``'s messages (a receiving thread's whole life).

    ``accept``: kind -> payload length in float32 (0: none), or the range of
    lengths allowed. Each accepted message goes to ``on_message(kind, step,
    payload)``, which returns False when nothing more is expected from
    ``source``; ``payload`` is a view of the receive buffer, which then belongs
    to the callee. ``buffers()`` gives each receive its buffer (at least
    :func:`receive_buffer` of the largest accepted length, zeroed where no
    message has been); by default a new one each time a payload was handed on.
    A lost connection or a malformed message (bad magic number, wrong sender,
    kind or length, ``check(kind, step)`` not None, shorter than announced)
    ends the loop with ``on_end(reason)``, whose kind is
    :attr:`~murmur.distributed.failures.Fault.LOST_CONNECTION` or
    :attr:`~murmur.distributed.failures.Fault.MALFORMED`.
    """
    capacity = max(_largest(allowed) for allowed in accept.values())
    take = buffers if buffers is not None else lambda: receive_buffer(capacity)
    buffer = take()
    while True:
        try:
            group.recv([buffer], source, tag).wait(FOREVER)
        except RuntimeError as error:
            on_end(Reason.lost_connection(error))
            return
        message = _read(buffer.numpy(), source, accept, check)
        if isinstance(message, str):
            on_end(Reason.of(Fault.MALFORMED, message))
            return
        kind, step, length = message
        payload = buffer[HEADER_WORDS : HEADER_WORDS + length] if length > 0 else None
        if not on_message(kind, step, payload):
            return
        if payload is not None:
            buffer = take()


def _read(
    numbers: np.ndarray,
    source: int,
    accept: Mapping[int, int | range],
    check: Callable[[Kind, int], str | None],
) -> tuple[Kind, int, int] | str:
    """The kind, step and payload length of the message just received from ``source``
    into the receive buffer of ``numbers``, or why it is malformed. Its magic number and
    check word are zeroed once read, so that a later message cut short cannot reuse
    them."""
    magic, kind, sender, step, length = numbers[:HEADER_WORDS].view(np.int64).tolist()
    numbers[:2] = 0  # the magic number
    if magic != MAGIC:
        return f"bad magic number {magic:#x}"
    if sender != source:
        return f"header claims sender {sender}"
    if kind not in accept:
        return f"unexpected message kind {kind}"
    if not _allowed(length, accept[kind]):
        return f"{Kind(kind).name} of {length} floats, expected {_lengths(accept[kind])}"
    end = numbers[HEADER_WORDS + length : HEADER_WORDS + length + 1].view(np.int32)
    if int(end[0]) != check_word(kind, sender, step, length):
        return f"message shorter than the {length} floats announced, or damaged"
    end[0] = 0
    problem = check(_KINDS[kind], step)
    return problem if problem is not None else (_KINDS[kind], step, length)


_KINDS = {int(kind): kind for kind in Kind}


def _allowed(length: int, allowed: int | range) -> bool:
    return length in allowed if isinstance(allowed, range) else length == allowed


def _lengths(allowed: int | range) -> str:
    if isinstance(allowed, range):
        return f"{allowed.start} to {allowed.stop - 1}"
    return str(allowed)
