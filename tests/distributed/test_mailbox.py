"""The mailbox and the distributed transport, on gloo ranks held by threads of this process.

Each test builds a few real gloo process groups over loopback (one per rank,
all in this process), so the wire format, the receiving thread, its deadlines
and the transport's arithmetic are checked in well under a second; the
process-per-rank runs are in test_distributed.py.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
import torch
from gloo import gloo_groups, run_rank_threads
from hypothesis import given, settings
from hypothesis import strategies as st

from murmur.algorithms.detsgrad import Detsgrad, DetsgradConfig
from murmur.distributed.failures import Fault, PeerFailure, PeerTimeout, Reason
from murmur.distributed.mailbox import Mailbox
from murmur.distributed.outbox import Outbox
from murmur.distributed.transport import DistributedTransport
from murmur.distributed.wire import (
    HEADER_WORDS,
    MAGIC,
    MESSAGE_TAG,
    Envelope,
    Kind,
    encode,
    receive_loop,
)
from murmur.sim.transport import InMemoryTransport
from murmur.topology import ring

P = 6
WAIT = timedelta(seconds=5)


def send(group, to: int, words: torch.Tensor) -> None:
    """One message, as the words of :func:`encode` (or words made to be malformed)."""
    group.send([words], to, MESSAGE_TAG).wait(WAIT)


def value(group, to: int, sender: int, step: int, fill: float) -> None:
    send(group, to, encode(Kind.VALUE, sender, step, torch.full((P,), fill)))


def control(group, to: int, kind: Kind, sender: int, step: int) -> None:
    send(group, to, encode(kind, sender, step))


def firsts(rows: list[torch.Tensor]) -> list[float]:
    return [row[0].item() for row in rows]


@pytest.fixture
def three():
    """Rank 0's mailbox (neighbours 1 and 2, starting from -1 and -2) and all three groups."""
    groups = gloo_groups(3)
    mailbox = Mailbox(groups[0], 0, [1, 2], torch.tensor([[-1.0] * P, [-2.0] * P]))
    mailbox.start()
    return mailbox, groups


def test_values_at_waits_for_every_neighbour_and_keeps_the_last_value_sent(three):
    mailbox, groups = three
    value(groups[1], 0, sender=1, step=1, fill=1.0)
    control(groups[2], 0, Kind.NONE, sender=2, step=1)
    value(groups[1], 0, sender=1, step=2, fill=11.0)
    # Rank 2's step-2 message is not in yet: step 1 is, and rank 2 kept its initial value.
    assert firsts(mailbox.values_at(1, timeout=5.0)) == [1.0, -2.0]
    value(groups[2], 0, sender=2, step=2, fill=22.0)
    assert firsts(mailbox.values_at(2, timeout=5.0)) == [11.0, 22.0]
    assert mailbox.matrix().tolist() == [[11.0] * P, [22.0] * P]
    control(groups[1], 0, Kind.STOP, sender=1, step=2)
    control(groups[2], 0, Kind.STOP, sender=2, step=2)
    mailbox.wait_stopped(timeout=5.0)
    assert (mailbox.received, mailbox.rejected) == (6, 0)


def test_a_silent_neighbour_is_named_at_the_deadline(three):
    mailbox, groups = three
    value(groups[1], 0, sender=1, step=1, fill=1.0)
    started = time.monotonic()
    with pytest.raises(PeerTimeout, match="rank 2 sent no step-1 message within 0.3 s") as caught:
        mailbox.values_at(1, timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 2.0
    assert caught.value.ranks == (2,)
    control(groups[1], 0, Kind.STOP, sender=1, step=1)
    control(groups[2], 0, Kind.STOP, sender=2, step=0)
    mailbox.wait_stopped(timeout=5.0)


def bad_magic() -> torch.Tensor:
    words = encode(Kind.VALUE, 2, 1, torch.ones(P))
    words[:HEADER_WORDS].view(torch.int64)[0] = MAGIC + 1
    return words


@pytest.mark.parametrize(
    ("words", "reason"),
    [
        (bad_magic(), "bad magic"),
        (encode(Kind.VALUE, 2, 1, length=10**12), "VALUE of 1000000000000 floats"),
        (encode(Kind.VALUE, 1, 1, torch.ones(P)), "claims sender 1"),
        (encode(Kind.NONE, 2, 5), "step 5 after step 0"),
        (encode(Kind.PUSH, 2, 1), "unexpected message kind 3"),
        (encode(Kind.VALUE, 2, 1, torch.ones(P))[:-1], "shorter than the 6 floats announced"),
        # the rest of a cut header is what the receive buffer held: zeros
        (encode(Kind.NONE, 2, 1)[:4], "claims sender 0"),
    ],
    ids=["magic", "huge", "sender", "step", "kind", "no-check-word", "cut-header"],
)
def test_a_malformed_message_is_rejected_counted_and_its_sender_named_at_once(three, words, reason):
    mailbox, groups = three
    send(groups[2], 0, words)
    value(groups[1], 0, sender=1, step=1, fill=1.0)
    started = time.monotonic()
    with pytest.raises(PeerFailure, match=f"rank 2: .*{reason}") as caught:
        mailbox.values_at(1, timeout=30.0)
    assert time.monotonic() - started < 5.0, "a known-bad sender must not be waited for"
    assert caught.value.ranks == (2,)
    # Rank 2 is not listened to any more (its next send would never complete); rank 1 is.
    control(groups[1], 0, Kind.STOP, sender=1, step=1)
    deadline = time.monotonic() + 5.0
    while (mailbox.received, mailbox.rejected) != (2, 1) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert (mailbox.received, mailbox.rejected) == (2, 1)


def test_a_payload_shorter_than_its_header_says_is_rejected(three):
    mailbox, groups = three
    send(groups[2], 0, encode(Kind.VALUE, 2, 1, torch.ones(P - 1), length=P))
    value(groups[1], 0, sender=1, step=1, fill=1.0)
    with pytest.raises(PeerFailure, match="shorter than the 6 floats announced"):
        mailbox.values_at(1, timeout=30.0)
    assert mailbox.rejected == 1
    control(groups[1], 0, Kind.STOP, sender=1, step=1)


def test_a_neighbour_that_stopped_is_named_at_once_not_waited_for(three):
    mailbox, groups = three
    control(groups[1], 0, Kind.STOP, sender=1, step=0)
    control(groups[2], 0, Kind.NONE, sender=2, step=1)
    started = time.monotonic()
    with pytest.raises(PeerFailure, match="rank 1: stopped after 0 broadcasts, before step 1"):
        mailbox.values_at(1, timeout=30.0)
    assert time.monotonic() - started < 5.0
    control(groups[2], 0, Kind.STOP, sender=2, step=1)


def test_an_abort_names_the_failed_rank(three):
    mailbox, groups = three
    control(groups[1], 0, Kind.ABORT, sender=1, step=2)
    with pytest.raises(PeerFailure, match="rank 2 failed \\(rank 1 stopped") as caught:
        mailbox.values_at(1, timeout=30.0)
    assert caught.value.ranks == (2,)
    control(groups[2], 0, Kind.STOP, sender=2, step=0)  # rank 1 said its last word


def test_a_ping_is_answered_by_the_receiving_thread_and_a_silent_rank_is_named(three):
    """Rank 0 answers rank 1's PING with a PONG while its own training waits; of the two
    ranks rank 0 pings, the one that answers is alive, the one that does not is named."""
    mailbox, groups = three
    outbox = Outbox(groups[0], 0, [1, 2])
    outbox.start()
    mailbox.answer = outbox.answer
    since = mailbox.pongs()
    control(groups[1], 0, Kind.PING, sender=1, step=0)
    answer = torch.zeros(HEADER_WORDS + 1, dtype=torch.float32)
    groups[1].recv([answer], 0, MESSAGE_TAG).wait(WAIT)
    assert answer[:HEADER_WORDS].view(torch.int64)[1].item() == Kind.PONG
    assert outbox.answered == 1
    control(groups[1], 0, Kind.PONG, sender=1, step=0)
    started = time.monotonic()
    assert mailbox.unanswered([1, 2], since, timeout=0.3) == [2]
    assert 0.3 <= time.monotonic() - started < 2.0
    assert mailbox.unanswered([1], since, timeout=0.3) == []
    outbox.close()
    control(groups[1], 0, Kind.STOP, sender=1, step=0)
    control(groups[2], 0, Kind.STOP, sender=2, step=0)
    mailbox.wait_stopped(timeout=5.0)


def test_detsgrad_over_the_gloo_transport_equals_the_in_memory_one():
    """Three ranks on a ring, some silent some steps (v0 > 0): same events, same models."""
    agents, steps = 3, 25
    graph = ring(agents)
    config = DetsgradConfig(a=0.3, b=0.3, v0=2.5)
    initial = torch.randn(agents, P, generator=torch.Generator().manual_seed(0))
    grads = torch.randn(steps, agents, P, generator=torch.Generator().manual_seed(1))

    reference = InMemoryTransport(graph, initial)
    algorithm = Detsgrad(config, graph)
    state = algorithm.init(initial)
    for step in range(steps):
        state = algorithm.step(state, grads[step].clone(), step, reference)

    groups = gloo_groups(agents)
    finals: dict[int, tuple[torch.Tensor, DistributedTransport]] = {}

    def rank_main(rank: int) -> None:
        transport = DistributedTransport(groups[rank], graph, rank, initial, timeout=10.0)
        transport.start()
        own = Detsgrad(config, graph)
        rank_state = own.init(initial[rank : rank + 1])
        for step in range(steps):
            rank_state = own.step(rank_state, grads[step, rank : rank + 1].clone(), step, transport)
        transport.finish()
        finals[rank] = (rank_state.x, transport)

    run_rank_threads(agents, rank_main)
    assert len(finals) == agents, "a rank did not finish"
    silent = 0
    for rank, (x, transport) in finals.items():
        torch.testing.assert_close(x[0], state.x[rank], atol=1e-5, rtol=1e-5)
        counters = transport.counters
        assert counters.events == int(reference.counters.events_per_agent[rank])
        assert counters.messages == int(reference.counters.messages_per_agent[rank])
        assert counters.bytes == int(reference.counters.bytes_per_agent[rank])
        silent += steps - counters.events
        assert transport.control_messages == 2 * (steps - counters.events) + 2  # NONEs, STOPs
        assert transport.rejected == 0
    assert silent > 0, "pick a threshold under which some agents stay silent"


# ---------------------------------------------------------------- announced lengths


@pytest.mark.parametrize("length", [P - 1, 1, 0, P + 1])
def test_a_value_header_with_another_length_is_rejected_and_counted(length):
    """VALUE announcing ``length`` != P floats: refused before any payload is read."""
    groups = gloo_groups(3)
    mailbox = Mailbox(groups[0], 0, [1, 2], torch.tensor([[-1.0] * P, [-2.0] * P]))
    mailbox.start()
    send(groups[2], 0, encode(Kind.VALUE, 2, 1, length=length))  # no payload with it
    send(groups[1], 0, encode(Kind.VALUE, 1, 1, torch.ones(P)))
    started = time.monotonic()
    with pytest.raises(PeerFailure, match=f"rank 2: .*VALUE of {length} floats, expected {P}"):
        mailbox.values_at(1, timeout=5.0)
    assert time.monotonic() - started < 4.0, "a known-bad sender must not be waited for"
    send(groups[1], 0, encode(Kind.STOP, 1, 1))
    deadline = time.monotonic() + 5.0
    while (mailbox.received, mailbox.rejected) != (2, 1) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert (mailbox.received, mailbox.rejected) == (2, 1)


def test_a_short_push_header_ends_the_receiving_loop_as_malformed():
    """The server's loop (PUSH of P floats) refuses a PUSH announcing fewer floats."""
    groups = gloo_groups(2)
    taken: list[Kind] = []
    ended: list[Reason] = []
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
    send(groups[1], 0, encode(Kind.PUSH, 1, 0, length=P - 2))
    thread.join(timeout=5.0)
    assert not thread.is_alive(), "the loop waited for a payload it must not read"
    assert taken == []
    assert ended == [f"{Fault.MALFORMED.value} (PUSH of {P - 2} floats, expected {P})"]
    assert [why.kind for why in ended] == [Fault.MALFORMED]


# ---------------------------------------------------------------- one message per send


def test_a_value_is_read_in_its_receive_buffer_and_the_buffers_are_reused(three):
    """No copy on the receiving side: the row handed over is the receive buffer (not
    the mailbox's own storage), and a few buffers per neighbour serve a whole run."""
    mailbox, groups = three
    owned = mailbox.matrix().untyped_storage().data_ptr()
    for step in range(1, 41):
        value(groups[1], 0, sender=1, step=step, fill=float(step))
        control(groups[2], 0, Kind.NONE, sender=2, step=step)
        rows = mailbox.values_at(step, timeout=5.0)
        assert firsts(rows) == [float(step), -2.0]
        assert rows[0].untyped_storage().data_ptr() != owned
    assert mailbox.receive_buffers[0] <= 3, mailbox.receive_buffers
    assert mailbox.receive_buffers[1] == 1  # headers only: one buffer, never lent
    control(groups[1], 0, Kind.STOP, sender=1, step=40)
    control(groups[2], 0, Kind.STOP, sender=2, step=40)
    mailbox.wait_stopped(timeout=5.0)
    assert (mailbox.received, mailbox.rejected) == (82, 0)


@pytest.mark.parametrize("cut", ["check-word", "last-float"])
def test_a_message_cut_short_in_a_reused_buffer_is_refused(three, cut):
    """A reused buffer still holds an earlier, longer message of the same sender: what
    stands where a short message's check word should be is never a valid one."""
    mailbox, groups = three
    for step in (1, 2, 3):  # three buffers, the first one back in the pool
        value(groups[1], 0, sender=1, step=step, fill=float(step))
        control(groups[2], 0, Kind.NONE, sender=2, step=step)
        mailbox.values_at(step, timeout=5.0)
    full = encode(Kind.VALUE, 1, 4, torch.full((P,), 4.0))
    short = full[:-1] if cut == "check-word" else torch.cat([full[:-2], full[-1:]])
    send(groups[1], 0, short)
    control(groups[2], 0, Kind.NONE, sender=2, step=4)
    with pytest.raises(PeerFailure, match="rank 1: .*shorter than the 6 floats announced"):
        mailbox.values_at(4, timeout=5.0)
    assert mailbox.rejected == 1
    control(groups[2], 0, Kind.STOP, sender=2, step=4)


def test_an_envelope_goes_out_as_it_is_and_a_post_is_waited_for_later():
    """Outbox.post_each returns at once; Outbox.wait names a target that never takes
    its message (rank 2 posts no receive), after the deadline, and the envelope stays
    pending; rank 1's mailbox reads the payload written in place."""
    groups = gloo_groups(3)
    mailbox = Mailbox(groups[1], 1, [0], torch.zeros(1, P))
    mailbox.start()
    outbox = Outbox(groups[0], 0, [1, 2])
    outbox.start()
    envelope = Envelope(P)
    envelope.payload.copy_(torch.arange(P, dtype=torch.float32))
    outbox.post_each(1, {1: (Kind.VALUE, envelope)})
    assert mailbox.values_at(1, timeout=5.0)[0].tolist() == list(range(P))
    outbox.wait(timeout=5.0)
    assert envelope.pending == 0
    outbox.post_each(2, {2: (Kind.VALUE, envelope)})
    started = time.monotonic()
    with pytest.raises(PeerFailure, match="step-2 VALUE to rank 2 .*within 0.3 s") as caught:
        outbox.wait(timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 2.0
    assert caught.value.ranks == (2,) and envelope.pending == 1
    receiver = Mailbox(groups[2], 2, [0], torch.zeros(1, P))
    receiver.restore(1, torch.zeros(1, P), rejected=0)  # as if it had step 1
    receiver.start()  # now rank 2 takes it, and the envelope is free again
    assert receiver.values_at(2, timeout=5.0)[0].tolist() == list(range(P))
    outbox.wait(timeout=5.0)
    assert envelope.pending == 0
    outbox.send(Kind.STOP, 2, [2], timeout=5.0)
    receiver.wait_stopped(timeout=5.0)
    outbox.send(Kind.STOP, 1, [1], timeout=5.0)
    mailbox.wait_stopped(timeout=5.0)
    outbox.close()


# ---------------------------------------------------------------- any message


def _mutated(words: torch.Tensor, how: str, at: int, value: int) -> torch.Tensor:
    """``words`` cut to ``at`` words, or with word ``at`` set to ``value``."""
    words = words.clone()
    if how == "cut":
        return words[: max(1, at % words.numel())]
    words[at % words.numel() : at % words.numel() + 1].view(torch.int32)[0] = value
    return words


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(
    how=st.sampled_from(["cut", "set"]),
    at=st.integers(min_value=0, max_value=10**6),
    value=st.integers(min_value=-(2**31), max_value=2**31 - 1),
    kind=st.sampled_from([Kind.VALUE, Kind.NONE, Kind.STOP, Kind.DELTA]),
)
def test_any_message_no_larger_than_a_valid_one_is_taken_or_refused_never_a_crash(
    how, at, value, kind
):
    """A damaged message (cut anywhere, or any word set to anything) either still says
    what it said (a payload word changed) or is refused naming its sender, and the
    mailbox carries on with the other neighbour."""
    groups = gloo_groups(3)
    mailbox = Mailbox(groups[0], 0, [1, 2], torch.zeros(2, P))
    mailbox.start()
    payload = torch.arange(P, dtype=torch.float32) if kind in (Kind.VALUE, Kind.DELTA) else None
    words = _mutated(encode(kind, 1, 1 if kind != Kind.STOP else 0, payload), how, at, value)
    send(groups[1], 0, words)
    control(groups[2], 0, Kind.NONE, sender=2, step=1)
    try:
        rows = mailbox.values_at(1, timeout=5.0)
    except PeerFailure as failure:
        assert failure.ranks == (1,) and not isinstance(failure, PeerTimeout), failure
        if "malformed" in str(failure):
            assert mailbox.rejected == 1
        else:  # still a well-formed STOP, at its step: no step 1 will ever come
            assert kind == Kind.STOP and "stopped after 0 broadcasts" in str(failure), failure
    else:  # still well-formed: at most a payload word changed
        assert kind in (Kind.VALUE, Kind.NONE) and mailbox.rejected == 0
        expected = payload if kind == Kind.VALUE else torch.zeros(P)
        assert (rows[0] != expected).sum() <= (1 if kind == Kind.VALUE else 0)
        control(groups[1], 0, Kind.STOP, sender=1, step=1)
    control(groups[2], 0, Kind.STOP, sender=2, step=1)
