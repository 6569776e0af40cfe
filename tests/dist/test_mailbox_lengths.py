"""A header whose payload length differs from the expected one, shorter as well as
longer, is malformed: rejected, counted, its sender named at once and never read from.

Real gloo ranks held by threads of this process, on loopback (gloo.py).
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
import torch
from gloo import gloo_groups

from murmur.dist.mailbox import (
    HEADER_TAG,
    MALFORMED,
    PAYLOAD_TAG,
    Kind,
    Mailbox,
    PeerFailure,
    encode_header,
    receive_loop,
)

P = 6
WAIT = timedelta(seconds=5)


def send(group, to: int, header: torch.Tensor, payload: torch.Tensor | None = None) -> None:
    group.send([header], to, HEADER_TAG).wait(WAIT)
    if payload is not None:
        group.send([payload], to, PAYLOAD_TAG).wait(WAIT)


@pytest.mark.parametrize("length", [P - 1, 1, 0, P + 1])
def test_a_value_header_with_another_length_is_rejected_and_counted(length):
    """VALUE announcing ``length`` != P floats: refused before any payload is read."""
    groups = gloo_groups(3)
    mailbox = Mailbox(groups[0], 0, [1, 2], torch.tensor([[-1.0] * P, [-2.0] * P]))
    mailbox.start()
    send(groups[2], 0, encode_header(Kind.VALUE, 2, 1, length))  # no payload follows
    send(groups[1], 0, encode_header(Kind.VALUE, 1, 1, P), torch.ones(P))
    started = time.monotonic()
    with pytest.raises(PeerFailure, match=f"rank 2: .*VALUE of {length} floats, expected {P}"):
        mailbox.values_at(1, timeout=5.0)
    assert time.monotonic() - started < 4.0, "a known-bad sender must not be waited for"
    send(groups[1], 0, encode_header(Kind.STOP, 1, 1, 0))
    deadline = time.monotonic() + 5.0
    while (mailbox.received, mailbox.rejected) != (2, 1) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert (mailbox.received, mailbox.rejected) == (2, 1)


def test_a_short_push_header_ends_the_receiving_loop_as_malformed():
    """The server's loop (PUSH of P floats) refuses a PUSH announcing fewer floats."""
    groups = gloo_groups(2)
    taken: list[Kind] = []
    ended: list[str] = []
    thread = threading.Thread(
        target=receive_loop,
        args=(
            groups[0],
            1,
            {Kind.PUSH: P, Kind.STOP: 0},
            lambda kind, step, payload: taken.append(kind) or True,
            ended.append,
        ),
        daemon=True,
    )
    thread.start()
    send(groups[1], 0, encode_header(Kind.PUSH, 1, 0, P - 2))
    thread.join(timeout=5.0)
    assert not thread.is_alive(), "the loop waited for a payload it must not read"
    assert taken == []
    assert ended == [f"{MALFORMED} (PUSH of {P - 2} floats, expected {P})"]
