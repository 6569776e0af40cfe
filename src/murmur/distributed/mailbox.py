"""Each rank's receiving side: a thread per neighbour takes its messages (the format
and gloo's limits: :mod:`murmur.distributed.wire`), and the caller reads the
neighbours' values with deadlines.

Nothing is copied on the way that need not be: a :class:`Mailbox` hands the
algorithm the receive buffer itself as the neighbour's value, taking it back for a
later receive once a newer value has replaced it
(:mod:`murmur.distributed.neighbour_rows`).

A malformed message (bad magic number, wrong sender, kind, length or step,
shorter than announced, a DELTA its reader refuses) is counted in ``rejected``
and its sender is heard no more: anyone waiting for it is told at once instead
of at the deadline.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from murmur.distributed.broadcast_order import NUMBERED, BroadcastOrder, InTurn, Skipping
from murmur.distributed.failures import Fault, PeerFailure, PeerTimeout, Reason
from murmur.distributed.neighbour_rows import NeighbourRows
from murmur.distributed.wire import Kind, receive_loop
from murmur.distributed.wording import rank_list

_NOTHING = torch.empty(0)
"""The payload a skipping mailbox keeps of a NONE: none."""


@dataclass
class _Heard:
    """What a mailbox has heard from its neighbours, in lists by neighbour index; read
    and written with the mailbox's condition held."""

    steps: list[int]
    """Each neighbour's newest message number."""
    read: list[int]
    """The newest message number of each neighbour that ``values_at`` took in."""
    arrivals: list[deque[tuple[int, Kind, torch.Tensor]]]
    """Each neighbour's numbered messages not taken in yet: (number, kind, payload)."""
    stopped: list[bool]
    pongs: list[int]
    """PONGs received from each neighbour."""
    lost: dict[int, Reason] = field(default_factory=dict)
    """Neighbours (ranks) heard no more, and why (a failed connection, or garbage)."""
    abort: tuple[int, int] | None = None
    """The last ABORT: the rank that sent it and the rank it names."""

    @classmethod
    def nothing(cls, neighbours: int) -> _Heard:
        """Nothing heard yet from any of ``neighbours``."""
        return cls(
            steps=[0] * neighbours,
            read=[0] * neighbours,
            arrivals=[deque() for _ in range(neighbours)],
            stopped=[False] * neighbours,
            pongs=[0] * neighbours,
        )

    def raise_failure(self, missing: list[int]) -> None:
        """PeerFailure for an ABORT, or naming the ranks of ``missing`` heard no more."""
        if self.abort is not None:
            reporter, failed = self.abort
            cause = "" if reporter == failed else f" (rank {reporter} stopped because of it)"
            raise PeerFailure([failed], f"rank {failed} failed{cause}")
        lost = [rank for rank in missing if rank in self.lost]
        if lost:
            raise PeerFailure(lost, "; ".join(f"rank {rank}: {self.lost[rank]}" for rank in lost))


class Mailbox:
    """Receives every message for one rank in threads; the caller reads with deadlines.

    ``initial`` (neighbours, P): the values each neighbour is known to start
    from. ``group`` is a torch.distributed process group (or gloo backend)
    whose ``recv`` only these threads call. ``delta_words``: the most float32
    words a DELTA may carry (0: DELTA is refused). ``lengths``: how many of the
    P float32 of its row each neighbour's VALUE carries, when they differ (a rank
    holding a block of agents sends each neighbour the rows it needs); the rest of
    a shorter row stays as it started. ``skipping``: a neighbour need not send every
    broadcast (:class:`~murmur.distributed.broadcast_order.Skipping`).

    The rows :meth:`values_at` returns are the neighbours' receive buffers, lent
    (:class:`~murmur.distributed.neighbour_rows.NeighbourRows`).
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
        self._order: BroadcastOrder = Skipping() if skipping else InTurn()
        self.length = initial.shape[1]
        self._values = NeighbourRows(len(self.neighbours), initial, lengths, delta_words)
        self.lengths = self._values.lengths
        """The float32 a VALUE of each neighbour carries."""
        self.delta_words = delta_words
        self.received = 0
        """Messages accepted."""
        self.rejected = 0
        """Messages refused as malformed."""
        self._group = group
        self._world = group.size()
        self._heard = _Heard.nothing(len(self.neighbours))
        self._waiting: int | None = None
        """The step ``values_at`` waits for (None: no one, or a wait for something else)."""
        self._awaited: Sequence[int] = range(len(neighbours))  # whose messages of it
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
        self._values.check(values)
        if any(thread.is_alive() for thread in self._threads):
            raise ValueError("a mailbox is restored before it starts receiving")
        self._values.restore(values)
        self.rejected = rejected
        self._heard.steps = [step] * len(self.neighbours)
        self._heard.read = [step] * len(self.neighbours)

    @property
    def receive_buffers(self) -> list[int]:
        """How many receive buffers each neighbour has had made (they are reused)."""
        with self._condition:
            return self._values.buffer_counts()

    def matrix(self) -> torch.Tensor:
        """The rows of the last ``values_at`` as one (neighbours, P) tensor (a copy), as
        :meth:`restore` takes them."""
        with self._condition:
            return self._values.matrix()

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
            if min(self._heard.steps, default=step) < step or self._heard.abort is not None:
                self._waiting, self._awaited = step, awaited
                try:
                    self._wait_for(
                        lambda: self._missing(step, awaited),
                        time.monotonic() + timeout,
                        f"sent no step-{step} message within {timeout:g} s",
                    )
                finally:
                    self._waiting = None
            self._take_in(step, add)
            self._order.check_taken(step, awaited, self._heard.read, self.neighbours)
            return list(self._values.rows)

    def _take_in(self, step: int, add: Callable[[torch.Tensor, torch.Tensor], None] | None) -> None:
        """With the condition held: every neighbour's messages up to number ``step`` into
        its row. PeerFailure for a malformed DELTA, whose sender is heard no more."""
        heard = self._heard
        for i, arrivals in enumerate(heard.arrivals):
            while arrivals and arrivals[0][0] <= step:
                heard.read[i], kind, payload = arrivals.popleft()
                if kind == Kind.VALUE:
                    self._values.lend(i, payload)
                elif kind == Kind.DELTA:
                    try:
                        self._values.add(i, payload, add)
                    except ValueError as error:
                        neighbour = self.neighbours[i]
                        why = Reason.of(Fault.MALFORMED, str(error))
                        self.rejected += 1
                        heard.lost[neighbour] = why
                        raise PeerFailure([neighbour], f"rank {neighbour}: {why}") from None

    def _missing(self, step: int, awaited: Sequence[int]) -> list[int]:
        """With the condition held: the ``awaited`` neighbours whose step-``step`` message
        is not in; PeerFailure if one of them has stopped before it (it will never come)."""
        missing = [i for i in awaited if self._heard.steps[i] < step]
        stopped = [self.neighbours[i] for i in missing if self._heard.stopped[i]]
        if stopped:
            raise PeerFailure(
                stopped,
                "; ".join(
                    f"rank {n}: stopped after {self._heard.steps[self.neighbours.index(n)]} "
                    f"broadcasts, before step {step}"
                    for n in stopped
                ),
            )
        return [self.neighbours[i] for i in missing]

    def wait_stopped(self, timeout: float) -> None:
        """Wait until every neighbour has sent STOP; the threads then end."""
        deadline = time.monotonic() + timeout
        with self._condition:
            self._wait_for(
                lambda: [
                    n for n, s in zip(self.neighbours, self._heard.stopped, strict=True) if not s
                ],
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
            self._heard.raise_failure(waiting)
            if not waiting:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise PeerTimeout(waiting, f"{rank_list(waiting)} {late}", late)
            self._condition.wait(remaining)

    def pongs(self) -> list[int]:
        """How many PONGs each neighbour has sent so far, for :meth:`unanswered`."""
        with self._condition:
            return list(self._heard.pongs)

    def unanswered(self, ranks: Sequence[int], since: Sequence[int], timeout: float) -> list[int]:
        """Wait up to ``timeout`` until each of ``ranks`` has sent a PONG more than
        ``since`` counted; the ranks that have not. PeerFailure as soon as one of them is
        known to have failed."""

        def silent() -> list[int]:
            index = self.neighbours.index
            return [r for r in ranks if self._heard.pongs[index(r)] <= since[index(r)]]

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
                self._heard.raise_failure(list(self._heard.lost))
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._condition.wait(remaining)

    def raise_if_aborted(self) -> None:
        """Raise the failure a neighbour reported (ABORT), if one has."""
        with self._condition:
            self._heard.raise_failure([])

    # ------------------------------------------------------------ receiving (one thread each)

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
            buffers=lambda: self._values.take(i),
        )

    def _check(self, i: int, kind: Kind, step: int) -> str | None:
        """Why a well-formed message from neighbour ``i`` is out of turn, or None."""
        if kind == Kind.ABORT and not 0 <= step < self._world:
            return f"ABORT naming rank {step} of {self._world}"
        return self._order.out_of_turn(kind, step, self._heard.steps[i])

    def _deliver(
        self, i: int, neighbour: int, kind: Kind, step: int, payload: torch.Tensor | None
    ) -> bool:
        """Record one accepted message; False when nothing more will come from this neighbour.
        A PING is answered at once."""
        if kind == Kind.PING and self.answer is not None:
            self.answer(neighbour)
        with self._condition:
            self.received += 1
            heard = self._heard
            if kind in (Kind.VALUE, Kind.DELTA):
                if payload is None:  # never: both are accepted with 1 float or more
                    raise ValueError(f"a {kind.name} without a payload")
                heard.arrivals[i].append((step, kind, payload))
            elif kind == Kind.NONE and self._order.keeps_none:  # its number tells it was sent
                heard.arrivals[i].append((step, kind, _NOTHING))
            if kind in NUMBERED:
                heard.steps[i] = step
                # wake a reader only once it has every message it waits for
                waiting = self._waiting
                if waiting is None or self._order.all_in(heard.steps, self._awaited, waiting):
                    self._condition.notify_all()
            else:
                if kind == Kind.STOP:
                    heard.stopped[i] = True
                elif kind == Kind.ABORT:
                    heard.abort = (neighbour, step)
                elif kind == Kind.PONG:
                    heard.pongs[i] += 1
                self._condition.notify_all()
        return kind not in (Kind.STOP, Kind.ABORT)

    def _end(self, i: int, why: Reason) -> None:
        """Neighbour ``i`` is heard no more: its connection failed, or it sent garbage."""
        neighbour = self.neighbours[i]
        with self._condition:
            if why.kind is Fault.MALFORMED:
                self.rejected += 1
            self._heard.lost[neighbour] = why
            self._condition.notify_all()
