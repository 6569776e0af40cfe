"""Real gloo ranks held by threads of the test process, on loopback."""

from __future__ import annotations

import threading
from datetime import timedelta

import torch.distributed as dist


def gloo_groups(world: int) -> list:
    """``world`` gloo ranks of one group, all in this process, on loopback."""
    store = dist.HashStore()
    groups: dict[int, object] = {}

    def join(rank: int) -> None:
        options = dist.ProcessGroupGloo._Options()
        options._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
        options._timeout = timedelta(seconds=10)
        groups[rank] = dist.ProcessGroupGloo(store, rank, world, options)

    threads = [threading.Thread(target=join, args=(rank,)) for rank in range(world)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert len(groups) == world, "gloo ranks did not connect"
    return [groups[rank] for rank in range(world)]


def run_rank_threads(ranks: int, rank_main, timeout: float = 30.0) -> None:
    """``rank_main(rank)`` for every rank, each in its own thread, joined within
    ``timeout`` seconds each."""
    threads = [threading.Thread(target=rank_main, args=(rank,)) for rank in range(ranks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
