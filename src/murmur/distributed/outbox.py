"""Each rank's sending side: messages posted by the caller, one thread per neighbour
waiting for their sends to complete (see :mod:`murmur.distributed.wire` for why no
gloo wait has a deadline).

A sender writes its payload into an :class:`~murmur.distributed.wire.Envelope`
that goes on the wire as it is, so nothing is copied on the way that need not be.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Mapping, Sequence

import torch
import torch.distributed as dist

from murmur.distributed.failures import PeerFailure
from murmur.distributed.wire import FOREVER, MESSAGE_TAG, Envelope, Kind
from murmur.distributed.wording import first_line, rank_list


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
