"""The wire format of the distributed runtime, and each rank's sending and receiving threads.

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
- A pending receive cannot be polled, so a :class:`Mailbox` runs threads that
  block in receives, one per neighbour. One thread per neighbour rather than
  one receive from any source: a sender that freezes halfway through a message
  (a stopped process, a partitioned machine) holds the receive that matched
  it, and a shared receive would then stall every other neighbour behind it.
- A message larger than its receive buffer aborts the receiving process from
  C++, so every receive buffer holds the largest message the receiver accepts
  from that sender. A shorter one fills a prefix, and gloo does not say how
  much arrived: the header's ``length`` says where the check word must be, and
  a message cut short leaves there what the buffer held before, which is never
  the check word (receive buffers start zeroed, and every check word is zeroed
  once read).
- A gloo wait that times out closes every connection of the process group,
  so no gloo wait here has a deadline: receiving threads wait for messages,
  the :class:`Outbox`'s threads (one per neighbour) wait for sends to
  complete, and the callers wait for those threads with their own deadlines
  (:meth:`Mailbox.values_at`, :meth:`Mailbox.wait_stopped`,
  :meth:`Outbox.send`, :meth:`Outbox.wait`), raising :class:`PeerTimeout` or
  :class:`PeerFailure` naming the ranks they waited for. A peer that stops
  answering then stalls only the threads that talk to it, and the rank can
  still tell the others.

Nothing is copied on the way that need not be: a sender writes its payload into
an :class:`Envelope` that goes on the wire as it is, and a :class:`Mailbox`
hands the algorithm the receive buffer itself as the neighbour's value, taking
it back for a later receive once a newer value has replaced it.

A malformed message (bad magic number, wrong sender, kind, length or step,
shorter than announced) is counted in ``rejected`` and its payload is never
read. Its sender is not trusted again: since bytes cannot be skipped, its
thread stops listening (the sender's later sends never complete, so it fails on
its own deadline), and anyone waiting for it is told at once instead of at the
deadline. What gloo itself cannot survive is a message larger than the largest
one the receiver accepts from its sender: that still aborts the receiver.
"""

from __future__ import annotations

import queue
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from enum import IntEnum

import numpy as np
import torch
import torch.distributed as dist

MAGIC = 0x6D726D72  # "mrmr"
HEADER_FIELDS = 5
HEADER_WORDS = 2 * HEADER_FIELDS
"""The header's float32 words: five int64."""
MESSAGE_TAG = 0
"""The tag of a mailbox's and an outbox's messages."""
FOREVER = timedelta(days=7)
"""How long a receiving thread waits: in effect forever, as a timeout would be fatal."""
MALFORMED = "sent a malformed message"
"""How the reason a receiving loop ends starts when the peer, not the link, is at fault."""


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


# ---------------------------------------------------------------- the wire format


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
    of ``length`` floats) and the :class:`Outbox` sends the buffer as it is; it must
    not change until the sends of it have completed (``pending`` is 0)."""

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
    on_end: Callable[[str], None],
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
    ends the loop with ``on_end(reason)``; a malformed message's reason starts
    with "sent a malformed message".
    """
    capacity = max(_largest(allowed) for allowed in accept.values())
    take = buffers if buffers is not None else lambda: receive_buffer(capacity)
    buffer = take()
    while True:
        try:
            group.recv([buffer], source, tag).wait(FOREVER)
        except RuntimeError as error:
            on_end(f"lost the connection ({first_line(error)})")
            return
        message = _read(buffer.numpy(), source, accept, check)
        if isinstance(message, str):
            on_end(f"{MALFORMED} ({message})")
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
_NOTHING = torch.empty(0)
"""The payload a skipping mailbox keeps of a NONE: none."""


def _allowed(length: int, allowed: int | range) -> bool:
    return length in allowed if isinstance(allowed, range) else length == allowed


def _lengths(allowed: int | range) -> str:
    if isinstance(allowed, range):
        return f"{allowed.start} to {allowed.stop - 1}"
    return str(allowed)


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


class Mailbox:
    """Receives every message for one rank in threads; the caller reads with deadlines.

    ``initial`` (neighbours, P): the values each neighbour is known to start
    from. ``group`` is a torch.distributed process group (or gloo backend)
    whose ``recv`` only these threads call. ``delta_words``: the most float32
    words a DELTA may carry (0: DELTA is refused). ``lengths``: how many of the
    P float32 of its row each neighbour's VALUE carries, when they differ (a rank
    holding a block of agents sends each neighbour the rows it needs); the rest of
    a shorter row stays as it started. ``skipping``: a neighbour need not send every
    broadcast (on a time-varying graph it talks to this rank in some steps only): its
    numbers only increase, and :meth:`values_at` is told which neighbours sent the
    step it asks for, each of whose messages of that number must be in.

    Each neighbour has a few receive buffers, reused: the one its newest VALUE
    arrived in is lent to the caller as the neighbour's row (no copy), and goes
    back for a later receive once a newer value has replaced it. A DELTA is added
    to a row the mailbox owns (a lent row is copied into it first).
    """

    def __init__(
        self,
        group: dist.ProcessGroup,
        rank: int,
        neighbours: Sequence[int],
        initial: torch.Tensor,
        delta_words: int = 0,
        lengths: Sequence[int] | None = None,
        skipping: bool = False,
    ) -> None:
        self.rank = rank
        self.neighbours = list(neighbours)
        self.skipping = skipping
        self.length = initial.shape[1]
        self.lengths = _value_lengths(len(self.neighbours), initial, lengths)
        """The float32 a VALUE of each neighbour carries."""
        self.delta_words = delta_words
        self._owned = initial.clone()
        """Row ``i``: neighbour ``i``'s value where the mailbox holds it itself (at the
        start, after a DELTA or a restore)."""
        self._rows = [self._owned[i, :n] for i, n in enumerate(self.lengths)]
        """Neighbour ``i``'s value as of the step last asked for in ``values_at``."""
        self._lent: list[torch.Tensor | None] = [None] * len(neighbours)
        """The receive buffer ``_rows[i]`` is a view of, if it is one."""
        self._capacity = [max(n, delta_words) for n in self.lengths]
        self._free: list[deque[torch.Tensor]] = [deque() for _ in neighbours]
        """Each neighbour's receive buffers not in use (a deque: its ends are thread-safe,
        so its receiving thread takes one without the condition)."""
        self._buffers: list[dict[int, torch.Tensor]] = [{} for _ in neighbours]
        """Each neighbour's receive buffers by the address of their payload."""
        self.received = 0
        """Messages accepted."""
        self.rejected = 0
        """Messages refused as malformed."""
        self._group = group
        self._world = group.size()
        self._arrivals: list[deque[tuple[int, Kind, torch.Tensor]]] = [deque() for _ in neighbours]
        self._steps, self._read = [0] * len(neighbours), [0] * len(neighbours)
        """Each neighbour's newest message number, and the newest ``values_at`` took in."""
        self._waiting: int | None = None
        """The step ``values_at`` waits for (None: no one, or a wait for something else)."""
        self._awaited: Sequence[int] = range(len(neighbours))  # whose messages of it
        self._stopped = [False] * len(neighbours)
        self._lost: dict[int, str] = {}
        """Neighbours heard no more, and why (a failed connection, or garbage)."""
        self._abort: tuple[int, int] | None = None
        self._pongs = [0] * len(neighbours)
        """PONGs received from each neighbour."""
        self.answer: Callable[[int], None] | None = None
        """Sends a PONG to the rank given, called by its receiving thread on a PING."""
        self._condition = threading.Condition()
        self._threads = [
            threading.Thread(
                target=self._receive_from,
                args=(i, neighbour),
                name=f"murmur-mailbox-{rank}-from-{neighbour}",
                daemon=True,
            )
            for i, neighbour in enumerate(self.neighbours)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def restore(self, step: int, values: torch.Tensor, rejected: int) -> None:
        """Before :meth:`start`: continue a run whose neighbours have all sent ``step``
        broadcasts, which brought them to ``values`` (neighbours, P), ``rejected`` refused."""
        if values.shape != self._owned.shape or values.dtype != self._owned.dtype:
            raise ValueError(
                f"mailbox values {values.dtype} {tuple(values.shape)}, expected "
                f"{self._owned.dtype} {tuple(self._owned.shape)}"
            )
        if any(thread.is_alive() for thread in self._threads):
            raise ValueError("a mailbox is restored before it starts receiving")
        self._owned.copy_(values)
        self.rejected = rejected
        self._steps = [step] * len(self.neighbours)
        self._read = [step] * len(self.neighbours)

    @property
    def receive_buffers(self) -> list[int]:
        """How many receive buffers each neighbour has had made (they are reused)."""
        with self._condition:
            return [len(buffers) for buffers in self._buffers]

    def matrix(self) -> torch.Tensor:
        """The rows of the last ``values_at`` as one (neighbours, P) tensor (a copy), as
        :meth:`restore` takes them."""
        with self._condition:
            values = self._owned.clone()
            for i, row in enumerate(self._rows):
                values[i, : row.numel()].copy_(row)
        return values

    # ------------------------------------------------------------ reading (caller's thread)

    def values_at(
        self,
        step: int,
        timeout: float,
        add: Callable[[torch.Tensor, torch.Tensor], None] | None = None,
        senders: Sequence[int] | None = None,
    ) -> list[torch.Tensor]:
        """Every neighbour's value as of its broadcast number ``step``, once all
        neighbours' step-``step`` messages are in: one float32 row per neighbour, of
        its ``lengths``. The rows are valid until the next call (a lent receive buffer
        goes back to receiving then): read them, do not keep them.

        ``senders``: of a skipping mailbox, the neighbours (indices) that sent a
        step-``step`` message, the only ones waited for (default: all).
        A VALUE replaces the neighbour's row; a DELTA is applied to it by
        ``add(row, words)``, which raises ValueError for a malformed one.
        Raises :class:`PeerTimeout` after ``timeout`` seconds, or :class:`PeerFailure`
        as soon as a neighbour it waits for is known to have failed, has stopped
        before that step, skipped it, or sends a malformed DELTA.
        """
        awaited = range(len(self.neighbours)) if senders is None else senders
        with self._condition:
            if min(self._steps, default=step) < step or self._abort is not None:
                self._waiting, self._awaited = step, awaited
                try:
                    self._wait_for(
                        lambda: self._missing(step, awaited),
                        time.monotonic() + timeout,
                        f"sent no step-{step} message within {timeout:g} s",
                    )
                finally:
                    self._waiting = None
            for i, arrivals in enumerate(self._arrivals):
                while arrivals and arrivals[0][0] <= step:
                    self._read[i], kind, payload = arrivals.popleft()
                    if kind == Kind.VALUE:
                        self._lend(i, payload)
                    elif kind == Kind.DELTA:
                        self._apply(i, payload, add)
            if self.skipping:
                self._raise_if_skipped(step, awaited)
            return list(self._rows)

    def _raise_if_skipped(self, step: int, senders: Sequence[int]) -> None:
        """With the condition held: PeerFailure naming the ``senders`` whose messages,
        all in up to ``step``, hold none of that number (it follows another schedule)."""
        skipped = [self.neighbours[i] for i in senders if self._read[i] != step]
        if skipped:
            raise PeerFailure(
                skipped,
                f"{rank_list(skipped)} sent no step-{step} message, though due to "
                "(another schedule of the graphs?)",
            )

    def _missing(self, step: int, awaited: Sequence[int]) -> list[int]:
        """With the condition held: the ``awaited`` neighbours whose step-``step`` message
        is not in; PeerFailure if one of them has stopped before it (it will never come)."""
        missing = [i for i in awaited if self._steps[i] < step]
        stopped = [self.neighbours[i] for i in missing if self._stopped[i]]
        if stopped:
            raise PeerFailure(
                stopped,
                "; ".join(
                    f"rank {n}: stopped after {self._steps[self.neighbours.index(n)]} "
                    f"broadcasts, before step {step}"
                    for n in stopped
                ),
            )
        return [self.neighbours[i] for i in missing]

    def _lend(self, i: int, payload: torch.Tensor) -> None:
        """With the condition held: neighbour ``i``'s row is now ``payload``."""
        lent = self._lent[i]
        if lent is not None:
            self._give_back(i, lent)
        self._lent[i] = payload
        self._rows[i] = payload

    def _apply(
        self,
        i: int,
        words: torch.Tensor,
        add: Callable[[torch.Tensor, torch.Tensor], None] | None,
    ) -> None:
        """With the condition held: add neighbour ``i``'s DELTA to its row."""
        neighbour = self.neighbours[i]
        row = self._owned[i, : self.lengths[i]]
        lent = self._lent[i]
        if lent is not None:
            row.copy_(lent)
            self._give_back(i, lent)
            self._lent[i] = None
            self._rows[i] = row
        try:
            if add is None:
                raise ValueError("a DELTA where a VALUE was expected")
            add(row, words)
        except ValueError as error:
            why = f"{MALFORMED} ({error})"
            self.rejected += 1
            self._lost[neighbour] = why
            raise PeerFailure([neighbour], f"rank {neighbour}: {why}") from None
        finally:
            self._give_back(i, words)

    def wait_stopped(self, timeout: float) -> None:
        """Wait until every neighbour has sent STOP; the threads then end."""
        deadline = time.monotonic() + timeout
        with self._condition:
            self._wait_for(
                lambda: [n for n, s in zip(self.neighbours, self._stopped, strict=True) if not s],
                deadline,
                f"did not finish within {timeout:g} s",
            )
        for thread in self._threads:
            thread.join(timeout=max(deadline - time.monotonic(), 0.0))

    def _wait_for(self, missing: Callable[[], list[int]], deadline: float, late: str) -> None:
        """With the condition held: wait until ``missing()`` is empty. PeerFailure as soon
        as a neighbour it lists is known to have failed; PeerTimeout ("RANKS ``late``")
        at the deadline."""
        while True:
            waiting = missing()
            self._raise_if_broken(waiting)
            if not waiting:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise PeerTimeout(waiting, f"{rank_list(waiting)} {late}", late)
            self._condition.wait(remaining)

    def pongs(self) -> list[int]:
        """How many PONGs each neighbour has sent so far, for :meth:`unanswered`."""
        with self._condition:
            return list(self._pongs)

    def unanswered(self, ranks: Sequence[int], since: Sequence[int], timeout: float) -> list[int]:
        """Wait up to ``timeout`` until each of ``ranks`` has sent a PONG more than
        ``since`` counted; the ranks that have not. PeerFailure as soon as one of them is
        known to have failed."""

        def silent() -> list[int]:
            index = self.neighbours.index
            return [r for r in ranks if self._pongs[index(r)] <= since[index(r)]]

        with self._condition:
            try:
                self._wait_for(silent, time.monotonic() + timeout, "did not answer")
            except PeerTimeout as quiet:
                return list(quiet.ranks)
        return []

    def raise_failure_within(self, timeout: float) -> None:
        """Wait up to ``timeout`` for news of a failure (an ABORT, or a neighbour lost) and
        raise it; return if none came."""
        deadline = time.monotonic() + timeout
        with self._condition:
            while True:
                self._raise_if_broken(list(self._lost))
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._condition.wait(remaining)

    def raise_if_aborted(self) -> None:
        """Raise the failure a neighbour reported (ABORT), if one has."""
        with self._condition:
            self._raise_if_broken([])

    def _raise_if_broken(self, missing: list[int]) -> None:
        if self._abort is not None:
            reporter, failed = self._abort
            cause = "" if reporter == failed else f" (rank {reporter} stopped because of it)"
            raise PeerFailure([failed], f"rank {failed} failed{cause}")
        lost = [rank for rank in missing if rank in self._lost]
        if lost:
            raise PeerFailure(lost, "; ".join(f"rank {rank}: {self._lost[rank]}" for rank in lost))

    # ------------------------------------------------------------ receiving (one thread each)

    def _take(self, i: int) -> torch.Tensor:
        """In neighbour ``i``'s receiving thread: a receive buffer, a free one or a new one."""
        try:
            return self._free[i].pop()
        except IndexError:
            buffer = receive_buffer(self._capacity[i])
            self._buffers[i][buffer[HEADER_WORDS:].data_ptr()] = buffer
            return buffer

    def _give_back(self, i: int, payload: torch.Tensor) -> None:
        """The buffer of ``payload`` may receive again."""
        self._free[i].append(self._buffers[i][payload.data_ptr()])

    def _receive_from(self, i: int, neighbour: int) -> None:
        """Receive neighbour ``i``'s messages until it stops, aborts, fails or misbehaves."""
        accept: dict[int, int | range] = {
            Kind.VALUE: self.lengths[i],
            Kind.DELTA: range(1, self.delta_words + 1),
            **dict.fromkeys((Kind.NONE, Kind.STOP, Kind.ABORT, Kind.PING, Kind.PONG), 0),
        }
        receive_loop(
            self._group,
            neighbour,
            accept,
            lambda kind, step, payload: self._deliver(i, neighbour, kind, step, payload),
            lambda why: self._end(i, why),
            check=lambda kind, step: self._check(i, kind, step),
            buffers=lambda: self._take(i),
        )

    def _check(self, i: int, kind: Kind, step: int) -> str | None:
        """Why a well-formed message from neighbour ``i`` is out of turn, or None."""
        last = self._steps[i]
        numbered = kind in (Kind.VALUE, Kind.DELTA, Kind.NONE)
        if numbered and (step <= last if self.skipping else step != last + 1):
            return f"step {step} after step {last}"
        if kind == Kind.STOP and (step < last if self.skipping else step != last):
            return f"STOP after {step} broadcasts, {last} received"
        if kind == Kind.ABORT and not 0 <= step < self._world:
            return f"ABORT naming rank {step} of {self._world}"
        return None

    def _deliver(
        self, i: int, neighbour: int, kind: Kind, step: int, payload: torch.Tensor | None
    ) -> bool:
        """Record one accepted message; False when nothing more will come from this neighbour.
        A PING is answered at once."""
        if kind == Kind.PING and self.answer is not None:
            self.answer(neighbour)
        with self._condition:
            self.received += 1
            if kind in (Kind.VALUE, Kind.DELTA):
                if payload is None:  # never: both are accepted with 1 float or more
                    raise ValueError(f"a {kind.name} without a payload")
                self._arrivals[i].append((step, kind, payload))
            elif kind == Kind.NONE and self.skipping:  # its number tells it was sent
                self._arrivals[i].append((step, kind, _NOTHING))
            if kind in (Kind.VALUE, Kind.DELTA, Kind.NONE):
                self._steps[i] = step
                # wake a reader only once it has every message it waits for
                if self._waiting is None or self._all_in(self._waiting):
                    self._condition.notify_all()
            else:
                if kind == Kind.STOP:
                    self._stopped[i] = True
                elif kind == Kind.ABORT:
                    self._abort = (neighbour, step)
                elif kind == Kind.PONG:
                    self._pongs[i] += 1
                self._condition.notify_all()
        return kind not in (Kind.STOP, Kind.ABORT)

    def _all_in(self, step: int) -> bool:
        """With the condition held: whether every neighbour ``values_at`` waits for has
        sent its step-``step`` message."""
        if self.skipping:
            return all(self._steps[i] >= step for i in self._awaited)
        return min(self._steps) >= step

    def _end(self, i: int, why: str) -> None:
        """Neighbour ``i`` is heard no more: its connection failed, or it sent garbage."""
        neighbour = self.neighbours[i]
        with self._condition:
            if why.startswith(MALFORMED):
                self.rejected += 1
            self._lost[neighbour] = why
            self._condition.notify_all()


class Outbox:
    """Sends to neighbours: posted by the caller, waited for by one thread per neighbour.

    A payload is an :class:`Envelope` the caller filled, sent as it is (it must not
    change until its sends have completed: :meth:`wait`), or a float32 tensor, copied
    into an envelope of the outbox's own.
    """

    def __init__(self, group: dist.ProcessGroup, rank: int, neighbours: Sequence[int]) -> None:
        self.rank = rank
        self._group = group
        self._posted = dict.fromkeys(neighbours, 0)
        self._completed = dict.fromkeys(neighbours, 0)
        self._failed: dict[int, str] = {}
        self._last: tuple[int, str] = (0, "message")
        """The step and kind of the last messages posted, to name them in a failure."""
        self._spares: dict[int, list[Envelope]] = {}
        """The outbox's own envelopes by capacity: headers alone, and copies of tensors."""
        self._condition = threading.Condition()
        self._posting = threading.Lock()
        """Held while a message is put on the wire: PONGs go out from receiving threads."""
        self._closed = False
        self.answered = 0
        """PONGs sent."""
        self._queues: dict[int, queue.SimpleQueue] = {n: queue.SimpleQueue() for n in neighbours}
        self._threads = [
            threading.Thread(
                target=self._complete,
                args=(neighbour,),
                name=f"murmur-outbox-{rank}-to-{neighbour}",
                daemon=True,
            )
            for neighbour in neighbours
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def close(self) -> None:
        """End the threads once the sends already posted have completed."""
        with self._posting:
            self._closed = True
        for pending in self._queues.values():
            pending.put(None)

    def answer(self, target: int) -> None:
        """Answer ``target``'s PING with a PONG (from the thread that received it), unless
        the outbox is closed; a failed send is raised by the next :meth:`wait`."""
        with self._posting:
            if self._closed:
                return
            self.answered += 1
            self._post(0, {target: (Kind.PONG, None)})

    def send(
        self,
        kind: Kind,
        step: int,
        targets: Sequence[int],
        timeout: float,
        payload: Envelope | torch.Tensor | None = None,
    ) -> None:
        """Send one message to each of ``targets`` and wait until they all took it.

        Raises :class:`PeerFailure` naming the targets whose connection failed,
        or that did not take the message within ``timeout`` seconds.
        """
        self.post_each(step, dict.fromkeys(targets, (kind, payload)))
        self.wait(timeout, targets)

    def post_each(
        self, step: int, messages: Mapping[int, tuple[Kind, Envelope | torch.Tensor | None]]
    ) -> None:
        """Put each target's message on the wire, ``target -> (kind, payload)``, all
        numbered ``step``, without waiting for them to be taken (:meth:`wait` does)."""
        kinds = {kind for kind, _ in messages.values()}
        with self._posting:
            self._last = (step, kinds.pop().name if len(kinds) == 1 else "message")
            self._post(step, messages)

    def _post(
        self, step: int, messages: Mapping[int, tuple[Kind, Envelope | torch.Tensor | None]]
    ) -> None:
        """With ``_posting`` held: :meth:`post_each`, the messages not named in failures."""
        sealed: dict[tuple[Kind, int], tuple[Envelope, torch.Tensor]] = {}
        for target, (kind, payload) in messages.items():
            key = (kind, id(payload))
            if key not in sealed:
                envelope = self._envelope(payload)
                sealed[key] = (envelope, envelope.seal(kind, self.rank, step, envelope.length))
            envelope, words = sealed[key]
            try:
                work = self._group.send([words], target, MESSAGE_TAG)
            except RuntimeError as error:
                with self._condition:
                    self._failed.setdefault(target, first_line(error))
                continue
            with self._condition:
                self._posted[target] += 1
                envelope.pending += 1
            self._queues[target].put((work, envelope))

    def wait(self, timeout: float, targets: Sequence[int] | None = None) -> None:
        """Wait until every message posted to ``targets`` (default: all) was taken;
        raises as :meth:`send`, naming the last messages posted."""
        targets = list(self._posted) if targets is None else list(targets)
        deadline = time.monotonic() + timeout
        failed: dict[int, str] = {}
        with self._condition:
            while True:
                failed.update((t, self._failed[t]) for t in targets if t in self._failed)
                late = [
                    t for t in targets if t not in failed and self._completed[t] < self._posted[t]
                ]
                remaining = deadline - time.monotonic()
                if not late or remaining <= 0:
                    break
                self._condition.wait(remaining)
        failed.update((t, f"did not take it within {timeout:g} s") for t in late)
        if failed:
            ranks = sorted(failed)
            reasons = "; ".join(f"rank {rank}: {failed[rank]}" for rank in ranks)
            step, what = self._last
            raise PeerFailure(
                ranks,
                f"could not send its step-{step} {what} to {rank_list(ranks)} ({reasons})",
            )

    def _envelope(self, payload: Envelope | torch.Tensor | None) -> Envelope:
        """The envelope a payload travels in: itself, or one of the outbox's own that no
        send holds any more (headers alone, or a copy of a tensor)."""
        if isinstance(payload, Envelope):
            return payload
        if payload is not None and payload.dtype != torch.float32:
            raise ValueError(f"payloads travel as float32, not {payload.dtype}")
        capacity = 0 if payload is None else payload.numel()
        spares = self._spares.setdefault(capacity, [])
        envelope = next((spare for spare in spares if spare.pending == 0), None)
        if envelope is None:
            envelope = Envelope(capacity)
            spares.append(envelope)
        return envelope if payload is None else envelope.fill(payload)

    def _complete(self, target: int) -> None:
        while (item := self._queues[target].get()) is not None:
            work, envelope = item
            try:
                work.wait(FOREVER)
            except RuntimeError as error:
                with self._condition:
                    self._failed[target] = first_line(error)
                    self._condition.notify_all()
                return
            with self._condition:
                self._completed[target] += 1
                envelope.pending -= 1
                self._condition.notify_all()


def rank_list(ranks: Sequence[int]) -> str:
    """``rank 2`` or ``ranks 1, 3``."""
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def first_line(error: BaseException) -> str:
    """The gist of an error: torch's C++ errors run on for pages, gloo's start with a
    source location and end with advice."""
    text = str(error).strip()
    line = text.splitlines()[0] if text else type(error).__name__
    line = re.sub(r"^\[[^\]]*\.(cc|cpp|h):\d+\]\s*", "", line)
    return line.split(". This is typically")[0]
