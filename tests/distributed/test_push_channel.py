"""Asynchronous pushes between neighbours, on gloo ranks held by threads of this process:
the newest block arrives and replaces older ones, layers do not mix, and a
neighbour that misbehaves or goes silent is dropped (never waited for forever).
"""

from __future__ import annotations

import time

import pytest
import torch
from gloo import gloo_groups

from murmur.distributed.push_channel import Neighbourhood, channel_tag
from murmur.distributed.wire import HEADER_WORDS, MAGIC, Kind, encode
from murmur.metrics.counters import MessageCounters

Q, N = 2, 3
"""Blocks are (Q, N) float64: 2 * Q * N float32 on the wire."""


def neighbourhood(group, rank: int, neighbours: list[int], timeout: float = 5.0):
    return Neighbourhood(group, rank, neighbours, timeout, MessageCounters(1))


def block(fill: float) -> torch.Tensor:
    return torch.full((Q, N), fill, dtype=torch.float64)


def say_stop(group, sender: int, to: int, phase: int = 0) -> None:
    """``sender``'s STOP for layer ``phase``: the receiving thread for it ends."""
    group.send([encode(Kind.STOP, sender, 0)], to, channel_tag(phase)).wait()


def receivers_done(end: Neighbourhood) -> None:
    """Wait for every receiving thread to end: a process that exits while one is
    inside gloo aborts."""
    for _, thread in end._threads:
        if "-from-" in thread.name:
            thread.join(timeout=5.0)
            assert not thread.is_alive(), thread.name


def news_within(channel, seconds: float = 5.0) -> dict:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        channel.wait(needed=list(channel.neighbours))
        news = channel.news()
        if news:
            return news
    raise AssertionError("nothing arrived")


def test_pushes_arrive_with_their_update_number_and_both_ends_finish():
    groups = gloo_groups(2)
    ends = [neighbourhood(groups[0], 0, [1]), neighbourhood(groups[1], 1, [0])]
    channels = [end.channel(Q * N, torch.float64) for end in ends]
    channels[0].push({1: block(1.5)}, stamp=0)
    ((sender, (stamp, value)),) = news_within(channels[1]).items()
    assert (sender, stamp) == (0, 0)
    torch.testing.assert_close(value.view(Q, N), block(1.5), rtol=0, atol=0)  # float64 bits
    channels[1].push({0: block(-2.0)}, stamp=0)
    channels[1].push({0: block(-3.0)}, stamp=1)
    stamps = []
    while not stamps or stamps[-1] < 1:
        stamps += [s for s, _ in news_within(channels[0]).values()]
    assert stamps == sorted(stamps) and stamps[-1] == 1
    for wrong in (torch.ones(Q * N + 1, dtype=torch.float64), block(1.0).float()):
        with pytest.raises(ValueError, match="a channel of 12 float32 words of torch.float64"):
            channels[0].push({1: wrong}, stamp=1)
    assert ends[0].counters.events_per_agent[0] == 1  # the refused pushes sent nothing
    for channel in channels:
        channel.close()
    for end in ends:
        end.finish()
        assert (end.failures, end.rejected, end.control_messages) == ({}, 0, 1)
    assert ends[0].counters.events == 1 and ends[1].counters.events == 2
    assert ends[0].counters.bytes == Q * N * 8


def test_a_newer_push_replaces_one_not_yet_on_the_wire():
    """Rank 1 has no channel yet, so rank 0's first send cannot complete; the four
    pushes after it wait in one slot, and only the newest of them goes out."""
    groups = gloo_groups(2)
    ends = [neighbourhood(groups[0], 0, [1]), neighbourhood(groups[1], 1, [0])]
    sending = ends[0].channel(Q * N, torch.float64)
    for stamp in range(5):
        sending.push({1: block(float(stamp))}, stamp)
        time.sleep(0.05)
    receiving = ends[1].channel(Q * N, torch.float64)
    seen = []
    while not seen or seen[-1][0] < 4:
        seen += list(news_within(receiving).values())
    assert seen[-1][1].view(Q, N)[0, 0].item() == 4.0
    sending.close()
    receiving.close()
    for end in ends:
        end.finish()
    counters = ends[0].counters
    assert counters.events == 5
    # The first push went out (or, on a slow machine, was itself replaced): 2 or 1 sent.
    assert counters.messages + ends[0].superseded == 5 and counters.messages <= 2


def test_layers_have_their_own_tags_and_do_not_mix():
    groups = gloo_groups(2)
    ends = [neighbourhood(groups[0], 0, [1]), neighbourhood(groups[1], 1, [0])]
    first = [end.channel(Q * N, torch.float64) for end in ends]
    second = [end.channel(2 * Q * N, torch.float64) for end in ends]  # another width
    second[0].push({1: torch.ones(2 * Q * N, dtype=torch.float64)}, stamp=0)
    first[0].push({1: block(7.0)}, stamp=0)
    ((_, (_, early)),) = news_within(first[1]).items()
    ((_, (_, late)),) = news_within(second[1]).items()
    assert (early.numel(), early[0].item()) == (Q * N, 7.0)
    assert (late.numel(), late[0].item()) == (2 * Q * N, 1.0)
    assert channel_tag(0) != channel_tag(1)
    for channel in [*first, *second]:
        channel.close()
    for end in ends:
        end.finish()
        assert end.failures == {}


def update(sender: int, step: int, kind: Kind = Kind.UPDATE) -> torch.Tensor:
    return encode(kind, sender, step, torch.ones(2 * Q * N))


def bad_magic() -> torch.Tensor:
    words = update(1, 1)
    words[:HEADER_WORDS].view(torch.int64)[0] = MAGIC + 1
    return words


@pytest.mark.parametrize(
    ("words", "reason"),
    [
        (bad_magic(), "bad magic"),
        (encode(Kind.UPDATE, 1, 1, length=10**12), "UPDATE of 1000000000000 floats"),
        (update(2, 1), "claims sender 2"),
        (update(1, 0), "update 0 after update 0"),
        (update(1, 1, Kind.VALUE), "unexpected message kind 1"),
        (update(1, 1)[:-1], "shorter than the 12 floats announced"),
    ],
)
def test_a_malformed_message_drops_its_sender_at_once_and_is_counted(words, reason):
    groups = gloo_groups(3)
    end = neighbourhood(groups[0], 0, [1, 2], timeout=30.0)
    channel = end.channel(Q * N, torch.float64)
    groups[1].send([words], 0, channel_tag(0)).wait()
    started = time.monotonic()
    channel.wait(needed=[1, 2])
    assert time.monotonic() - started < 5.0, "a known-bad sender must not be waited for"
    assert channel.failed() == [1] and channel.failed() == []  # reported once
    assert end.rejected == 1
    assert end.failures[1].startswith("sent a malformed message") and reason in end.failures[1]
    assert end.live == [2]
    say_stop(groups[2], 2, 0)
    receivers_done(end)


def test_a_neighbour_silent_past_the_timeout_is_dropped_only_when_needed():
    groups = gloo_groups(3)
    started = time.monotonic()
    end = neighbourhood(groups[0], 0, [1, 2], timeout=0.3)  # last heard: now
    channel = end.channel(Q * N, torch.float64)
    channel.wait(needed=[2])
    assert 0.3 <= time.monotonic() - started < 2.0
    assert channel.failed() == [2]
    assert end.failures == {2: "sent nothing for 0.3 s"}
    assert end.live == [1]  # silent too, but not needed: still there
    assert end.channel(Q * N, torch.float64).neighbours == [1]  # the next layer leaves 2 out
    say_stop(groups[1], 1, 0, phase=0)
    say_stop(groups[2], 2, 0, phase=0)
    say_stop(groups[1], 1, 0, phase=1)
    receivers_done(end)
