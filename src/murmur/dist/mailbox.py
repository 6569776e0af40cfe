"""The wire format of the distributed runtime, and each rank's sending and receiving threads.

Every message starts with a header of five int64::

    [MAGIC, kind, sender, step, length]

and a ``VALUE`` is followed by a payload of ``length`` float32, sent under
another tag. Only tensors cross the wire; nothing is pickled.

gloo's point-to-point calls shape the design (docs/ENGINES.md):

- A pending receive cannot be polled, so a :class:`Mailbox` runs threads that
  block in receives, one per neighbour, each always with a receive from its
  neighbour posted. A blocking send completes only once the receiver has
  posted a matching receive; since a mailbox always has one posted for every
  neighbour, two ranks that send to each other at the same moment both
  complete, and sending threads never wait on each other's sends.
  One thread per neighbour rather than one receive from any source: a sender
  that freezes halfway through a message (a stopped process, a partitioned
  machine) holds the receive that matched it, and a shared receive would then
  stall the messages of every other neighbour behind it.
- A message larger than its receive buffer aborts the receiving process from
  C++, so headers have one fixed size, and a payload buffer is sized from a
  header only after the header has been checked. A payload shorter than its
  header says is caught too: the buffer is pre-filled with a marker that a
  complete payload overwrites.
- A gloo wait that times out closes every connection of the process group,
  so no gloo wait here has a deadline: receiving threads wait for messages,
  the :class:`Outbox`'s threads (one per neighbour) wait for sends to
  complete, and the callers wait for those threads with their own deadlines
  (:meth:`Mailbox.values_at`, :meth:`Mailbox.wait_stopped`,
  :meth:`Outbox.send`), raising :class:`PeerTimeout` or :class:`PeerFailure`
  naming the ranks they waited for. A peer that stops answering then stalls
  only the threads that talk to it, and the rank can still tell the others.

A malformed message (bad magic number, wrong sender, kind, length or step,
short payload) is counted in ``rejected`` and its payload is never read. Its
sender is not trusted again: since bytes cannot be skipped, its thread stops
listening (the sender's later sends never complete, so it fails on its own
deadline), and anyone waiting for it is told at once instead of at the
deadline. What gloo itself cannot survive is a message on the header tag
larger than a header: that still aborts the receiver.
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

import torch
import torch.distributed as dist

MAGIC = 0x6D726D72  # "mrmr"
HEADER_FIELDS = 5
HEADER_TAG = 0
PAYLOAD_TAG = 1
FOREVER = timedelta(days=7)
"""How long a receiving thread waits: in effect forever, as a timeout would be fatal."""
MALFORMED = "sent a malformed message"
"""How the reason a receiving loop ends starts when the peer, not the link, is at fault."""
_MARKER = 0x7FA5A5A5
"""A NaN bit pattern no arithmetic produces; still in a payload's last slot, it was short."""


class Kind(IntEnum):
    """What a message is. The header's ``step`` and ``length`` mean, per kind:"""

    VALUE = 1
    """A neighbour's broadcast number ``step`` (1, 2, ...): ``length`` floats follow."""
    NONE = 2
    """Broadcast number ``step`` of a neighbour that had nothing to send; no payload."""
    PUSH = 3
    """Reserved: a worker's update to a parameter server."""
    MODEL = 4
    """Reserved: a parameter server's model for a worker."""
    STOP = 5
    """The sender is done after ``step`` broadcasts and sends nothing more."""
    ABORT = 6
    """The sender stops because rank ``step`` failed."""
    PING = 7
    """Are you there? Taken and otherwise ignored: only whether the send completes matters."""
    UPDATE = 8
    """An asynchronous node's update number ``step`` (1, 2, ...; a newer one supersedes
    an older one, so numbers may be skipped): ``length`` floats follow."""
    RESULT = 9
    """A rank's results for rank 0 at the end of a run: ``length`` floats follow."""
    DELTA = 10
    """A neighbour's broadcast number ``step`` (1, 2, ...) carrying a compressed
    difference to its public estimate (:mod:`murmur.algorithms.estimates`):
    ``length`` float32 words follow, at most the receiver's bound."""


class PeerFailure(RuntimeError):
    """A peer stopped answering or sent something it must not; ``ranks`` names it."""

    def __init__(self, ranks: Sequence[int], message: str) -> None:
        super().__init__(message)
        self.ranks = tuple(ranks)


class PeerTimeout(PeerFailure):
    """Nothing arrived from ``ranks`` before a deadline."""


def encode_header(kind: Kind, sender: int, step: int, length: int) -> torch.Tensor:
    """The header tensor of one message."""
    return torch.tensor([MAGIC, int(kind), sender, step, length], dtype=torch.int64)


def receive_loop(
    group: dist.ProcessGroup,
    source: int,
    accept: Mapping[int, int | range],
    on_message: Callable[[Kind, int, torch.Tensor | None], bool],
    on_end: Callable[[str], None],
    tags: tuple[int, int] = (HEADER_TAG, PAYLOAD_TAG),
    check: Callable[[Kind, int], str | None] = lambda kind, step: None,
) -> None:
    """Receive ``source``'s messages (a receiving thread's whole life).

    ``accept``: kind -> payload length in float32 (0: none), or the range of
    lengths allowed. Each accepted
    message goes to ``on_message(kind, step, payload)``, which returns False when
    nothing more is expected from ``source``. A lost connection or a malformed
    message (bad magic number, wrong sender, kind or length, ``check(kind, step)``
    not None, a short payload) ends the loop with ``on_end(reason)``; a
    malformed message's reason starts with "sent a malformed message".
    """
    header_tag, payload_tag = tags
    header = torch.empty(HEADER_FIELDS, dtype=torch.int64)
    while True:
        try:
            group.recv([header], source, header_tag).wait(FOREVER)
        except RuntimeError as error:
            on_end(f"lost the connection ({first_line(error)})")
            return
        magic, kind, sender, step, length = header.tolist()
        problem = None
        if magic != MAGIC:
            problem = f"bad magic number {magic:#x}"
        elif sender != source:
            problem = f"header claims sender {sender}"
        elif kind not in accept:
            problem = f"unexpected message kind {kind}"
        elif not _allowed(length, accept[kind]):
            problem = f"{Kind(kind).name} of {length} floats, expected {_lengths(accept[kind])}"
        else:
            problem = check(Kind(kind), step)
        payload = None
        if problem is None and length > 0:
            payload = torch.empty(length, dtype=torch.float32)
            payload[-1:].view(torch.int32).fill_(_MARKER)
            try:
                group.recv([payload], source, payload_tag).wait(FOREVER)
            except RuntimeError as error:
                on_end(f"lost the connection ({first_line(error)})")
                return
            if int(payload[-1:].view(torch.int32)) == _MARKER:
                problem = f"payload shorter than the {length} floats announced"
        if problem is not None:
            on_end(f"{MALFORMED} ({problem})")
            return
        if not on_message(Kind(kind), step, payload):
            return


def _allowed(length: int, allowed: int | range) -> bool:
    return length in allowed if isinstance(allowed, range) else length == allowed


def _lengths(allowed: int | range) -> str:
    if isinstance(allowed, range):
        return f"{allowed.start} to {allowed.stop - 1}"
    return str(allowed)


class Mailbox:
    """Receives every message for one rank in threads; the caller reads with deadlines.

    ``initial`` (neighbours, P): the values each neighbour is known to start
    from. ``group`` is a torch.distributed process group (or gloo backend)
    whose ``recv`` only these threads call. ``delta_words``: the most float32
    words a DELTA may carry (0: DELTA is refused). ``lengths``: how many of the
    P float32 of its row each neighbour's VALUE carries, when they differ (a rank
    holding a block of agents sends each neighbour the rows it needs); the rest of
    a shorter row stays as it started.
    """

    def __init__(
        self,
        group: dist.ProcessGroup,
        rank: int,
        neighbours: Sequence[int],
        initial: torch.Tensor,
        delta_words: int = 0,
        lengths: Sequence[int] | None = None,
    ) -> None:
        if initial.shape[0] != len(neighbours) or initial.dtype != torch.float32:
            raise ValueError(
                f"initial must be float32 with one row per neighbour ({len(neighbours)}), "
                f"got {initial.dtype} {tuple(initial.shape)}"
            )
        self.rank = rank
        self.neighbours = list(neighbours)
        self.length = initial.shape[1]
        self.lengths = list(lengths) if lengths is not None else [self.length] * len(neighbours)
        """The float32 a VALUE of each neighbour carries."""
        if len(self.lengths) != len(self.neighbours) or not all(
            0 < n <= self.length for n in self.lengths
        ):
            raise ValueError(
                f"lengths must give each of the {len(neighbours)} neighbours 1 to "
                f"{self.length} values, got {self.lengths}"
            )
        self.delta_words = delta_words
        self.values = initial.clone()
        """Row ``i``: neighbour ``i``'s value as of the step last asked for in ``values_at``."""
        self.received = 0
        """Messages accepted."""
        self.rejected = 0
        """Messages refused as malformed."""
        self._group = group
        self._world = group.size()
        self._arrivals: list[deque[tuple[int, Kind, torch.Tensor]]] = [deque() for _ in neighbours]
        self._steps = [0] * len(neighbours)
        self._latest = [(0, row) for row in self.values.clone()]
        self._stopped = [False] * len(neighbours)
        self._lost: dict[int, str] = {}
        """Neighbours heard no more, and why (a failed connection, or garbage)."""
        self._abort: tuple[int, int] | None = None
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
        if values.shape != self.values.shape or values.dtype != self.values.dtype:
            raise ValueError(
                f"mailbox values {values.dtype} {tuple(values.shape)}, expected "
                f"{self.values.dtype} {tuple(self.values.shape)}"
            )
        if any(thread.is_alive() for thread in self._threads):
            raise ValueError("a mailbox is restored before it starts receiving")
        self.values.copy_(values)
        self.rejected = rejected
        self._steps = [step] * len(self.neighbours)
        self._latest = [(step, row) for row in self.values.clone()]

    # ------------------------------------------------------------ reading (caller's thread)

    def values_at(
        self,
        step: int,
        timeout: float,
        add: Callable[[torch.Tensor, torch.Tensor], None] | None = None,
    ) -> torch.Tensor:
        """Every neighbour's value as of its broadcast number ``step``, once all
        neighbours' step-``step`` messages are in; (neighbours, P).

        A VALUE replaces the neighbour's row; a DELTA is applied to it by
        ``add(row, words)``, which raises ValueError for a malformed one.
        Raises :class:`PeerTimeout` after ``timeout`` seconds, or :class:`PeerFailure`
        as soon as a neighbour it waits for is known to have failed or sends a
        malformed DELTA.
        """
        with self._condition:
            self._wait_for(
                lambda: [n for n, s in zip(self.neighbours, self._steps, strict=True) if s < step],
                time.monotonic() + timeout,
                f"sent no step-{step} message within {timeout:g} s",
            )
            for i, arrivals in enumerate(self._arrivals):
                while arrivals and arrivals[0][0] <= step:
                    _, kind, payload = arrivals.popleft()
                    if kind == Kind.VALUE:
                        self.values[i, : payload.numel()].copy_(payload)
                    else:
                        self._apply(i, payload, add)
        return self.values

    def _apply(
        self,
        i: int,
        words: torch.Tensor,
        add: Callable[[torch.Tensor, torch.Tensor], None] | None,
    ) -> None:
        """With the condition held: add neighbour ``i``'s DELTA to its row."""
        neighbour = self.neighbours[i]
        try:
            if add is None:
                raise ValueError("a DELTA where a VALUE was expected")
            add(self.values[i, : self.lengths[i]], words)
        except ValueError as error:
            why = f"{MALFORMED} ({error})"
            self.rejected += 1
            self._lost[neighbour] = why
            raise PeerFailure([neighbour], f"rank {neighbour}: {why}") from None

    def latest(self, neighbour: int) -> tuple[int, torch.Tensor]:
        """The step and value of the newest VALUE from ``neighbour`` (step 0: its initial value)."""
        with self._condition:
            return self._latest[self.neighbours.index(neighbour)]

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
                raise PeerTimeout(waiting, f"{rank_list(waiting)} {late}")
            self._condition.wait(remaining)

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

    def _receive_from(self, i: int, neighbour: int) -> None:
        """Receive neighbour ``i``'s messages until it stops, aborts, fails or misbehaves."""
        control = dict.fromkeys((Kind.NONE, Kind.STOP, Kind.ABORT, Kind.PING), 0)
        receive_loop(
            self._group,
            neighbour,
            {Kind.VALUE: self.lengths[i], Kind.DELTA: range(1, self.delta_words + 1), **control},
            lambda kind, step, payload: self._deliver(i, neighbour, kind, step, payload),
            lambda why: self._end(i, why),
            check=lambda kind, step: self._check(i, kind, step),
        )

    def _check(self, i: int, kind: Kind, step: int) -> str | None:
        """Why a well-formed message from neighbour ``i`` is out of turn, or None."""
        last = self._steps[i]
        if kind in (Kind.VALUE, Kind.DELTA, Kind.NONE) and step != last + 1:
            return f"step {step} after step {last}"
        if kind == Kind.STOP and step != last:
            return f"STOP after {step} broadcasts, {last} received"
        if kind == Kind.ABORT and not 0 <= step < self._world:
            return f"ABORT naming rank {step} of {self._world}"
        return None

    def _deliver(
        self, i: int, neighbour: int, kind: Kind, step: int, payload: torch.Tensor | None
    ) -> bool:
        """Record one accepted message; False when nothing more will come from this neighbour."""
        with self._condition:
            self.received += 1
            if kind == Kind.VALUE:
                self._latest[i] = (step, payload)
            if kind in (Kind.VALUE, Kind.DELTA):
                self._arrivals[i].append((step, kind, payload))
            if kind in (Kind.VALUE, Kind.DELTA, Kind.NONE):
                self._steps[i] = step
            elif kind == Kind.STOP:
                self._stopped[i] = True
            elif kind == Kind.ABORT:
                self._abort = (neighbour, step)
            self._condition.notify_all()
        return kind not in (Kind.STOP, Kind.ABORT)

    def _end(self, i: int, why: str) -> None:
        """Neighbour ``i`` is heard no more: its connection failed, or it sent garbage."""
        neighbour = self.neighbours[i]
        with self._condition:
            if why.startswith(MALFORMED):
                self.rejected += 1
            self._lost[neighbour] = why
            self._condition.notify_all()


class Outbox:
    """Sends to neighbours: posted by the caller, waited for by one thread per neighbour."""

    def __init__(self, group: dist.ProcessGroup, rank: int, neighbours: Sequence[int]) -> None:
        self.rank = rank
        self._group = group
        self._posted = dict.fromkeys(neighbours, 0)
        self._completed = dict.fromkeys(neighbours, 0)
        self._failed: dict[int, str] = {}
        self._condition = threading.Condition()
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
        for pending in self._queues.values():
            pending.put(None)

    def send(
        self,
        kind: Kind,
        step: int,
        targets: Sequence[int],
        timeout: float,
        payload: torch.Tensor | None = None,
    ) -> None:
        """Send one message to each of ``targets`` and wait until they all took it.

        Raises :class:`PeerFailure` naming the targets whose connection failed,
        or that did not take the message within ``timeout`` seconds.
        """
        self.send_each(step, dict.fromkeys(targets, (kind, payload)), timeout)

    def send_each(
        self,
        step: int,
        messages: Mapping[int, tuple[Kind, torch.Tensor | None]],
        timeout: float,
    ) -> None:
        """Send each target its own message, ``target -> (kind, payload)``, all numbered
        ``step``, and wait until they all took theirs; raises as :meth:`send`."""
        targets = list(messages)
        kinds = {kind for kind, _ in messages.values()}
        what = kinds.pop().name if len(kinds) == 1 else "message"
        failed: dict[int, str] = {}
        for target, (kind, payload) in messages.items():
            length = 0 if payload is None else payload.numel()
            header = encode_header(kind, self.rank, step, length)
            try:
                works = [self._group.send([header], target, HEADER_TAG)]
                if payload is not None:
                    works.append(self._group.send([payload], target, PAYLOAD_TAG))
            except RuntimeError as error:
                failed[target] = first_line(error)
                continue
            with self._condition:
                self._posted[target] += 1
            self._queues[target].put(works)
        deadline = time.monotonic() + timeout
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
            raise PeerFailure(
                ranks,
                f"could not send its step-{step} {what} to {rank_list(ranks)} ({reasons})",
            )

    def _complete(self, target: int) -> None:
        while (works := self._queues[target].get()) is not None:
            try:
                for work in works:
                    work.wait(FOREVER)
            except RuntimeError as error:
                with self._condition:
                    self._failed[target] = first_line(error)
                    self._condition.notify_all()
                return
            with self._condition:
                self._completed[target] += 1
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
