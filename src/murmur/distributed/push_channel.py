"""Asynchronous pushes between neighbour processes, the newest one winning (asynchronous dSSFN).

A node running ARock in a process of its own (:class:`~murmur.algorithms.arock.AsyncSolver`)
sends each neighbour its own block after every update and never waits: a
:class:`PushChannel` per layer hands each push to a sending thread per
neighbour, and a newer push to a neighbour replaces one that is not on the
wire yet (only the newest block matters). A receiving thread per neighbour
keeps the newest block that arrived; the node reads what is new with
:meth:`PushChannel.news` between updates and, with nothing new and nothing to
do, sleeps in :meth:`PushChannel.wait`.

Every layer has a tag of its own (``channel_tag``), so a neighbour still
in an earlier layer takes that layer's messages on that layer's threads while
the pushes of the next one wait for it in the sending threads. When a node is
done with a layer it sends STOP after its last push; each receiving thread ends
at its neighbour's STOP. :meth:`Neighbourhood.finish` waits, at the end of the
run, for every thread to end.

Failures do not stop the run: a neighbour whose connection closes, that sends
a malformed message, or that stays silent for ``timeout`` seconds while the
node needs it (it has not made its quota) is dropped. The solver drops its edge
from the layer's problem, later layers leave it out, and the run reports it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from functools import partial

import torch
import torch.distributed as dist

from murmur.distributed.failures import Fault, Reason
from murmur.distributed.wire import FOREVER, Envelope, Kind, receive_loop
from murmur.metrics.counters import MessageCounters

RESULT_TAG = 2
"""The tag of the results sent to rank 0 at the end of a run."""
_FIRST_CHANNEL_TAG = 4


def channel_tag(phase: int) -> int:
    """The tag of layer ``phase``'s channel (0, 1, ...)."""
    return _FIRST_CHANNEL_TAG + phase


class Neighbourhood:
    """What one node's channels share over a run: the neighbours still there, when each
    was last heard, why the dropped ones were dropped, and the message counters."""

    def __init__(
        self,
        group: dist.ProcessGroup,
        rank: int,
        neighbours: Sequence[int],
        timeout: float,
        counters: MessageCounters,
    ) -> None:
        self.group = group
        self.rank = rank
        self.neighbours = list(neighbours)
        self.timeout = timeout
        self.counters = counters
        self.failures: dict[int, Reason] = {}
        """Dropped neighbours and why."""
        self.rejected = 0
        """Malformed messages refused."""
        self.superseded = 0
        """Pushes replaced by a newer one before they went on the wire."""
        self.control_messages = 0
        """STOP headers sent."""
        self.condition = threading.Condition()
        self.heard = dict.fromkeys(self.neighbours, time.monotonic())
        self._threads: list[tuple[int, threading.Thread]] = []
        self._phases = 0

    @property
    def live(self) -> list[int]:
        """Neighbours not dropped."""
        with self.condition:
            return [n for n in self.neighbours if n not in self.failures]

    def channel(self, length: int, dtype: torch.dtype) -> PushChannel:
        """The next layer's channel, to the neighbours still there; blocks of ``length``
        values of ``dtype`` (float32 or float64)."""
        channel = PushChannel(self, self._phases, length, dtype)
        self._phases += 1
        return channel

    def fail(self, neighbour: int, why: Reason) -> None:
        """Drop ``neighbour`` (call with ``condition`` held)."""
        if neighbour not in self.failures:
            self.failures[neighbour] = why
            if why.kind is Fault.MALFORMED:
                self.rejected += 1
            self.condition.notify_all()

    def start(self, neighbour: int, target: Callable[[], None], name: str) -> None:
        """Start a thread that talks to ``neighbour``."""
        thread = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append((neighbour, thread))
        thread.start()

    def finish(self) -> None:
        """Wait (at most ``timeout`` s) until every neighbour has taken this node's last
        messages and sent its own STOPs; one that has not is dropped."""
        deadline = time.monotonic() + self.timeout
        for neighbour, thread in self._threads:
            if neighbour not in self.failures:  # a failed one's may never return
                thread.join(timeout=max(deadline - time.monotonic(), 0.0))
        with self.condition:
            for neighbour, thread in self._threads:
                if thread.is_alive():
                    self.fail(
                        neighbour,
                        Reason(f"did not finish within {self.timeout:g} s", Fault.UNFINISHED),
                    )


class PushChannel:
    """One layer's pushes of this node to its neighbours, and theirs to it (see the
    module docstring); implements :class:`murmur.algorithms.arock.PushChannel`."""

    def __init__(self, shared: Neighbourhood, phase: int, length: int, dtype: torch.dtype) -> None:
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"blocks must be float32 or float64, not {dtype}")
        self.neighbours = shared.live
        self._shared = shared
        self._dtype = dtype
        self._words = length * (2 if dtype == torch.float64 else 1)
        self._message_bytes = self._words * 4
        self._tag = channel_tag(phase)
        self._new: dict[int, tuple[int, torch.Tensor]] = {}
        self._newest = dict.fromkeys(self.neighbours, 0)
        self._reported: set[int] = set(shared.failures)
        self._slots: dict[int, tuple[int, torch.Tensor] | None] = dict.fromkeys(self.neighbours)
        self._closing = False
        for neighbour in self.neighbours:
            rank = shared.rank
            shared.start(
                neighbour,
                partial(self._receive, neighbour),
                f"murmur-push-{rank}-{phase}-from-{neighbour}",
            )
            shared.start(
                neighbour,
                partial(self._send, neighbour),
                f"murmur-push-{rank}-{phase}-to-{neighbour}",
            )

    # ------------------------------------------------------------ the solver's side

    def push(self, blocks: dict[int, torch.Tensor], stamp: int) -> None:
        shared = self._shared
        with shared.condition:
            targets = [n for n in blocks if n in self._slots and n not in shared.failures]
            wires = {n: blocks[n].contiguous().view(-1).view(torch.float32) for n in targets}
            for neighbour, wire in wires.items():
                if blocks[neighbour].dtype != self._dtype or wire.numel() != self._words:
                    raise ValueError(
                        f"a block of {blocks[neighbour].numel()} {blocks[neighbour].dtype} for "
                        f"a channel of {self._words} float32 words of {self._dtype}"
                    )
            for neighbour, wire in wires.items():
                if self._slots[neighbour] is not None:
                    shared.superseded += 1
                self._slots[neighbour] = (stamp + 1, wire)
            if targets:
                shared.counters.events_per_agent[0] += 1
            shared.condition.notify_all()

    def news(self) -> dict[int, tuple[int, torch.Tensor]]:
        with self._shared.condition:
            news, self._new = self._new, {}
        return news

    def failed(self) -> list[int]:
        shared = self._shared
        with shared.condition:
            fresh = [n for n in self.neighbours if n in shared.failures and n not in self._reported]
            self._reported.update(fresh)
        return fresh

    def wait(self, needed: list[int]) -> None:
        shared = self._shared
        with shared.condition:
            while not self._new and not self._unreported():
                now = time.monotonic()
                waiting = [n for n in needed if n not in shared.failures]
                if not waiting:
                    return
                silent = [n for n in waiting if now - shared.heard[n] >= shared.timeout]
                for neighbour in silent:
                    shared.fail(
                        neighbour, Reason(f"sent nothing for {shared.timeout:g} s", Fault.SILENT)
                    )
                if silent:
                    return
                deadline = min(shared.heard[n] for n in waiting) + shared.timeout
                shared.condition.wait(deadline - now)

    def close(self) -> None:
        with self._shared.condition:
            self._closing = True
            self._shared.condition.notify_all()

    def _unreported(self) -> bool:
        failures = self._shared.failures
        return any(n in failures and n not in self._reported for n in self.neighbours)

    # ------------------------------------------------------------ the threads

    def _send(self, neighbour: int) -> None:
        """Put this node's newest block for ``neighbour`` on the wire, one at a time;
        STOP once the layer is done and the last block is out."""
        shared = self._shared
        envelope = Envelope(self._words)
        while True:
            with shared.condition:
                while (
                    self._slots[neighbour] is None
                    and not self._closing
                    and neighbour not in shared.failures
                ):
                    shared.condition.wait()
                if neighbour in shared.failures:
                    return
                slot, self._slots[neighbour] = self._slots[neighbour], None
            step, payload = slot if slot is not None else (0, None)
            if payload is not None:
                words = envelope.fill(payload).seal(Kind.UPDATE, shared.rank, step, self._words)
            else:
                words = envelope.seal(Kind.STOP, shared.rank, step, 0)
            try:
                shared.group.send([words], neighbour, self._tag).wait(FOREVER)
            except RuntimeError as error:
                with shared.condition:
                    shared.fail(neighbour, Reason.lost_connection(error))
                return
            with shared.condition:
                if payload is None:
                    shared.control_messages += 1
                    return
                shared.counters.messages_per_agent[0] += 1
                shared.counters.bytes_per_agent[0] += self._message_bytes

    def _receive(self, neighbour: int) -> None:
        shared = self._shared

        def check(kind: Kind, step: int) -> str | None:
            if kind == Kind.UPDATE and step <= self._newest[neighbour]:
                return f"update {step} after update {self._newest[neighbour]}"
            return None

        def take(kind: Kind, step: int, payload: torch.Tensor | None) -> bool:
            with shared.condition:
                shared.heard[neighbour] = time.monotonic()
                if kind == Kind.UPDATE:
                    if payload is None:  # never: an UPDATE is accepted with its block only
                        raise ValueError("an UPDATE without a block")
                    self._newest[neighbour] = step
                    self._new[neighbour] = (step - 1, payload.view(self._dtype))
                shared.condition.notify_all()
            return kind != Kind.STOP

        def end(why: Reason) -> None:
            with shared.condition:
                shared.fail(neighbour, why)

        receive_loop(
            shared.group,
            neighbour,
            {Kind.UPDATE: self._words, Kind.STOP: 0},
            take,
            end,
            tag=self._tag,
            check=check,
        )
