"""Wall-clock cost of the distributed runtime's transport on this machine.

Two measurements, each in processes forked by this script (torch is imported
once) on loopback gloo:

- iterations: for each N in ``--agents`` (default 2, 4, 8), N ranks run the
  ``detsgrad`` preset (mnist5k, MLP 784-100-10, batch 32) on a ring of N
  agents, one agent per rank, exactly as ``murmur run --runtime distributed``
  steps them: batch sampling, ``StackedModel.loss_and_grad`` and
  ``Detsgrad.step`` through a ``DistributedTransport``. After ``--warmup``
  untimed iterations come ``--rounds`` timed rounds of ``--iterations`` each;
  no evaluation. A round's time is the slowest rank's (the ranks run in
  lockstep), its messages are the VALUE messages of all ranks (what the
  simulator counts) and its headers the NONE messages ("nothing to send this
  step") that keep the ranks in lockstep. The table gives the fastest round:
  ms per iteration, messages and headers per iteration, and the time per
  message (round time / messages, and / messages + headers).
- point to point: for each size in ``--floats`` (default: the MLP's 79,510
  parameters, 1,000,000 and 10,000,000 float32, i.e. 318 kB, 4 MB and 40 MB),
  two ranks play ping-pong with one message of that many float32, three ways
  taken in turn each round: ``bare`` (``dist.send`` / ``dist.recv`` of the
  tensor), ``bare+header`` (the same with a 5-int64 header sent first as a
  message of its own: the wire traffic of a header-then-payload format) and
  ``transport`` (what a ``DistributedTransport`` does for each broadcast and
  mix: ``Outbox.wait`` for the previous send, ``Outbox.post_each`` of a VALUE
  in an ``Envelope``, and ``Mailbox.values_at`` on the other side, which hands
  over the receive buffer the receiving thread checked). The payload is
  written into its buffer once, before timing, for every method: the
  transport keeps a rank's last broadcast in the envelope that carries it,
  as ``bare`` keeps its tensor. ``--repeats`` round trips per round for the
  MLP's size, fewer for larger ones (the same bytes); one-way time = round
  trip / 2, fastest round, and MB/s = payload bytes / one-way time. The
  ratio ``transport/bare`` is the transport's overhead on one send. ``delta``
  is the same through the same path as a DELTA, the kind that carries
  compressed differences, of as many words (the mailbox hands them to an
  ``add`` that does nothing here: decoding them is the algorithm's work).

- breakdown (``--breakdown``): where the time of one transport send of the
  MLP's size goes. Both ranks stamp ``time.perf_counter_ns`` (one clock for
  every process of the machine) at each step of the ping-pong: the sender
  before and after ``Outbox.post_each``; the receiver when gloo's receive
  completes in its receiving thread (measured from the start of the post: gloo
  may deliver the message before ``post_each`` has returned), when the thread
  has checked the message and hands it over, when the hand-over is done, and
  when ``values_at`` returns in the caller's thread. The table gives the median of each step
  over ``--repeats`` sends each way, beside the median one-way time of a bare
  ``dist.send``.

``noise`` is the largest spread between rounds (slowest / fastest - 1): re-run
when it is large. With more ranks than cores the processes take turns on the
cores, and the iteration times say so.

Every rank and the whole job have deadlines (``--timeout`` per wait, ``--limit``
per job); a job that fails or overruns is killed, and the script exits non-zero.

    python benchmarks/distributed_transport.py             # about 15 s on 2 cores
    python benchmarks/distributed_transport.py --agents 2 4 --iterations 200
    python benchmarks/distributed_transport.py --quick     # smoke run, seconds
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import queue
import socket
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

import torch
import torch.distributed as dist

from murmur.config import Config, apply_overrides, build_config, read_preset
from murmur.distributed.group import loopback_interface
from murmur.distributed.mailbox import Mailbox
from murmur.distributed.outbox import Outbox
from murmur.distributed.transport import DistributedTransport
from murmur.distributed.wire import HEADER_FIELDS, MAGIC, Envelope, Kind
from murmur.registry import ALGORITHMS
from murmur.training.setup import build_context, prepare

PRESET = "detsgrad"
LOOPBACK = "127.0.0.1"
BARE_TAG = 11
"""The bare sends' tag: not the mailbox's header (0) or payload (1) tag."""
BARE_HEADER_TAG = 12
P2P_METHODS = ("bare", "bare+header", "transport", "delta")
MLP_FLOATS = 79_510
LARGE_FLOATS = (1_000_000, 10_000_000)


def benchmark_config(agents: int) -> Config:
    """The DETSGRAD preset on a ring of ``agents``, one torch thread per rank."""
    _, raw = read_preset(PRESET)
    raw.pop("description", None)
    overrides = [f"topology.agents={agents}", "topology.graph=ring", "run.threads=1"]
    overrides.append("data.allow_missing_classes=true")  # timing only: N < 10 leaves digits out
    return build_config(apply_overrides(raw, overrides))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return probe.getsockname()[1]


def join_group(rank: int, world: int, port: int, timeout: float) -> None:
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{LOOPBACK}:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=timeout),
    )


def gather_rows(rows: list[list[float]]) -> torch.Tensor:
    """Every rank's ``rows`` (same shape on all), (world, rows, columns); after the
    transport has finished, so no collective runs beside the mailbox threads."""
    local = torch.tensor(rows, dtype=torch.float64)
    parts = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, local)
    return torch.stack(parts)


# ---------------------------------------------------------------- the ranks


def iteration_rank(
    rank: int, world: int, port: int, args: argparse.Namespace, results: Any
) -> None:
    """One agent of the ring: warm up, then time ``rounds`` x ``iterations`` DETSGRAD steps."""
    config = benchmark_config(world)
    setup = prepare(config)
    join_group(rank, world, port, args.timeout)
    try:
        algorithm = ALGORITHMS[config.algorithm.name].build(
            config.algorithm, setup.graph, build_context(setup)
        )
        transport = DistributedTransport(
            dist.group.WORLD, setup.graph, rank, setup.initial, args.timeout
        )
        transport.start()
        problem = setup.problem
        state = algorithm.init(setup.initial[rank : rank + 1])
        iteration = 0

        def steps(count: int) -> None:
            nonlocal state, iteration
            for _ in range(count):
                indices = problem.sampler.next_for(rank)
                _, grads = problem.model.loss_and_grad(
                    algorithm.params(state),
                    problem.x_train[indices][None],
                    problem.y_train[indices][None],
                )
                state = algorithm.step(state, grads, iteration, transport)
                iteration += 1

        steps(args.warmup)
        rows = []
        for _ in range(args.rounds):
            messages, headers = transport.counters.messages, transport.control_messages
            started = time.perf_counter()
            steps(args.iterations)
            seconds = time.perf_counter() - started
            rows.append(
                [
                    seconds,
                    transport.counters.messages - messages,
                    transport.control_messages - headers,
                ]
            )
        transport.finish()
        gathered = gather_rows(rows)
        if rank == 0:
            results.put({"rows": gathered.tolist()})
    finally:
        dist.destroy_process_group()


def repeats_for(floats: int, repeats: int) -> int:
    """Round trips per round for messages of ``floats``: ``repeats`` for the MLP's
    size, fewer for larger ones (as many bytes in all), at least 5."""
    return max(5, repeats * MLP_FLOATS // max(floats, MLP_FLOATS))


def p2p_rank(rank: int, world: int, port: int, args: argparse.Namespace, results: Any) -> None:
    """Rank 0 sends a P-float message to rank 1, which sends it back; three ways."""
    torch.set_num_threads(1)
    join_group(rank, world, port, args.timeout)
    try:
        peer = 1 - rank
        floats = args.size
        repeats = repeats_for(floats, args.repeats)
        payload = torch.randn(floats, generator=torch.Generator().manual_seed(rank))
        buffer = torch.empty(floats)
        header = torch.tensor([MAGIC, int(Kind.VALUE), rank, 0, floats], dtype=torch.int64)
        header_buffer = torch.empty(HEADER_FIELDS, dtype=torch.int64)
        mailbox = Mailbox(
            dist.group.WORLD, rank, [peer], torch.zeros(1, floats), delta_words=floats
        )
        outbox = Outbox(dist.group.WORLD, rank, [peer])
        envelope = Envelope(floats)
        envelope.payload.copy_(payload)
        mailbox.start()
        outbox.start()
        step = 0

        def bare(repeats: int) -> None:
            for _ in range(repeats):
                if rank == 0:
                    dist.send(payload, peer, tag=BARE_TAG)
                    dist.recv(buffer, peer, tag=BARE_TAG)
                else:
                    dist.recv(buffer, peer, tag=BARE_TAG)
                    dist.send(payload, peer, tag=BARE_TAG)

        def bare_header(repeats: int) -> None:
            def send() -> None:
                dist.send(header, peer, tag=BARE_HEADER_TAG)
                dist.send(payload, peer, tag=BARE_TAG)

            def receive() -> None:
                dist.recv(header_buffer, peer, tag=BARE_HEADER_TAG)
                dist.recv(buffer, peer, tag=BARE_TAG)

            for _ in range(repeats):
                if rank == 0:
                    send()
                    receive()
                else:
                    receive()
                    send()

        def through_transport(repeats: int, kind: Kind = Kind.VALUE) -> None:
            nonlocal step

            def send() -> None:
                outbox.wait(args.timeout)  # the envelope is free once the last send is taken
                outbox.post_each(step, {peer: (kind, envelope)})

            def receive() -> None:
                mailbox.values_at(step, args.timeout, add=lambda row, words: None)

            for _ in range(repeats):
                step += 1
                if rank == 0:
                    send()
                    receive()
                else:
                    receive()
                    send()

        methods: dict[str, Callable[[int], None]] = {
            "bare": bare,
            "bare+header": bare_header,
            "transport": through_transport,
            "delta": partial(through_transport, kind=Kind.DELTA),
        }
        for method in methods.values():
            method(max(1, repeats // 3))  # warm-up
        rows = []
        for _ in range(args.rounds):
            row = []
            for method in methods.values():
                started = time.perf_counter()
                method(repeats)
                row.append((time.perf_counter() - started) / (2 * repeats))
            rows.append(row)
        outbox.send(Kind.STOP, step, [peer], args.timeout)
        mailbox.wait_stopped(args.timeout)
        outbox.close()
        if rank == 0:  # rank 0's clock spans each whole round trip
            results.put({"rows": rows})
    finally:
        dist.destroy_process_group()


class _StampedWork:
    """A gloo work whose ``wait`` notes when it returned."""

    def __init__(self, work: Any, stamps: list[int]) -> None:
        self._work, self._stamps = work, stamps

    def wait(self, timeout: Any = None) -> Any:
        done = self._work.wait(timeout)
        self._stamps.append(time.perf_counter_ns())
        return done


class _StampedGroup:
    """A process group whose receives note when they complete."""

    def __init__(self, group: Any, stamps: list[int]) -> None:
        self._group, self._stamps = group, stamps

    def size(self) -> int:
        return self._group.size()

    def recv(self, tensors: list[torch.Tensor], source: int, tag: int) -> _StampedWork:
        return _StampedWork(self._group.recv(tensors, source, tag), self._stamps)


class _StampedMailbox(Mailbox):
    """A mailbox that notes when its receiving thread hands a message over, and when
    the hand-over is done."""

    def __init__(self, *args: Any, handed: list[tuple[int, int]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._handed = handed

    def _deliver(self, *args: Any) -> bool:
        began = time.perf_counter_ns()
        more = super()._deliver(*args)
        self._handed.append((began, time.perf_counter_ns()))
        return more


def breakdown_rank(
    rank: int, world: int, port: int, args: argparse.Namespace, results: Any
) -> None:
    """Ping-pong of the MLP's size, bare then through the transport, every step stamped."""
    torch.set_num_threads(1)
    join_group(rank, world, port, args.timeout)
    try:
        peer, floats, repeats = 1 - rank, MLP_FLOATS, args.repeats
        payload, buffer = torch.randn(floats), torch.empty(floats)
        bare_sent: list[int] = []  # when this rank's sends began
        bare_read: list[int] = []  # when this rank's receives ended
        for _ in range(repeats + 10):  # round trips: rank 0 sends first
            for sends in (rank == 0, rank == 1):
                if sends:
                    bare_sent.append(time.perf_counter_ns())
                    dist.send(payload, peer, tag=BARE_TAG)
                else:
                    dist.recv(buffer, peer, tag=BARE_TAG)
                    bare_read.append(time.perf_counter_ns())
        received: list[int] = []
        handed: list[tuple[int, int]] = []
        group = _StampedGroup(dist.group.WORLD, received)
        mailbox = _StampedMailbox(group, rank, [peer], torch.zeros(1, floats), handed=handed)
        outbox = Outbox(dist.group.WORLD, rank, [peer])
        envelope = Envelope(floats)
        envelope.payload.copy_(payload)
        mailbox.start()
        outbox.start()
        posted: list[tuple[int, int]] = []
        read: list[int] = []

        def send(step: int) -> None:
            outbox.wait(args.timeout)
            began = time.perf_counter_ns()
            outbox.post_each(step, {peer: (Kind.VALUE, envelope)})
            posted.append((began, time.perf_counter_ns()))

        def receive(step: int) -> None:
            mailbox.values_at(step, args.timeout)
            read.append(time.perf_counter_ns())

        for step in range(1, repeats + 11):  # round trips: rank 0 sends first
            first, second = (send, receive) if rank == 0 else (receive, send)
            first(step)
            second(step)
        outbox.send(Kind.STOP, repeats + 10, [peer], args.timeout)
        mailbox.wait_stopped(args.timeout)
        outbox.close()
        results.put(
            {
                "rank": rank,
                "bare_sent": bare_sent[10:],
                "bare_read": bare_read[10:],
                "posted": posted[10:],
                "received": received[10 : 10 + repeats],
                "handed": handed[10 : 10 + repeats],
                "read": read[10:],
            }
        )
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run_breakdown(args: argparse.Namespace) -> None:
    """Run ``breakdown_rank`` on two ranks and print the median of every step."""
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    port = free_port()
    ranks = [
        context.Process(target=breakdown_rank, args=(rank, 2, port, args, results), daemon=True)
        for rank in range(2)
    ]
    for process in ranks:
        process.start()
    try:
        got = {}
        for _ in ranks:
            result = results.get(timeout=args.limit)
            got[result["rank"]] = result
    finally:
        for process in ranks:
            process.join(timeout=args.timeout)
            if process.exitcode is None:
                process.kill()
    steps: dict[str, list[float]] = {name: [] for name in BREAKDOWN_STEPS}
    for sender in (0, 1):
        mine, theirs = got[sender], got[1 - sender]
        for began, done in zip(mine["bare_sent"], theirs["bare_read"], strict=True):
            steps["bare dist.send, one way"].append(done - began)
        sends = zip(
            mine["posted"], theirs["received"], theirs["handed"], theirs["read"], strict=False
        )
        for (began, posted), received, (handing, handed), read in sends:
            steps["post (header, check word, gloo send)"].append(posted - began)
            steps["post began -> receive done"].append(received - began)
            steps["receiving thread: wake, check"].append(handing - received)
            steps["hand-over to the caller's queue"].append(handed - handing)
            steps["caller wakes, values_at returns"].append(read - handed)
            steps["transport, one way"].append(read - began)
    print(f"{'step of one send of 79510 float32':<40} {'median us':>10}")
    for name, values in steps.items():
        print(f"{name:<40} {float(torch.tensor(values).median()) / 1e3:>10.1f}")


BREAKDOWN_STEPS = (
    "bare dist.send, one way",
    "post (header, check word, gloo send)",
    "post began -> receive done",
    "receiving thread: wake, check",
    "hand-over to the caller's queue",
    "caller wakes, values_at returns",
    "transport, one way",
)


# ---------------------------------------------------------------- running a job


def run_job(target: Callable[..., None], world: int, args: argparse.Namespace) -> dict:
    """Fork ``world`` ranks of ``target``; rank 0's result, or SystemExit once a rank
    fails or ``args.limit`` seconds pass. Every rank is gone when this returns."""
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    port = free_port()
    ranks = [
        context.Process(target=target, args=(rank, world, port, args, results), daemon=True)
        for rank in range(world)
    ]
    deadline = time.monotonic() + args.limit
    result = None
    problem = None
    try:
        for process in ranks:
            process.start()
        while problem is None:
            if result is None:
                try:
                    result = results.get(timeout=0.2)
                except queue.Empty:
                    pass
            codes = [process.exitcode for process in ranks]
            failed = [rank for rank, code in enumerate(codes) if code not in (None, 0)]
            if failed:
                problem = f"rank {failed[0]} exited with status {codes[failed[0]]}"
            elif result is not None and all(code == 0 for code in codes):
                return result
            elif time.monotonic() > deadline:
                problem = f"did not finish within {args.limit:g} s"
            elif result is not None:
                time.sleep(0.05)
    finally:
        for process in ranks:
            if process.exitcode is None:
                process.kill()
            process.join()
        results.close()
    raise SystemExit(f"{target.__name__} with {world} ranks: {problem}")


# ---------------------------------------------------------------- the tables


def spread(values: list[float]) -> float:
    return max(values) / min(values) - 1.0


def print_iteration_table(rows: dict[int, list], iterations: int) -> None:
    print(
        f"{'N':>3} {'ms/iter':>9} {'messages/iter':>14} {'headers/iter':>13} "
        f"{'us/message':>11} {'us/(msg+hdr)':>13} {'noise':>7}"
    )
    for agents, gathered in rows.items():
        rounds = torch.tensor(gathered, dtype=torch.float64)  # (world, rounds, 3)
        seconds = rounds[:, :, 0].max(dim=0).values  # the slowest rank, per round
        messages = rounds[:, :, 1].sum(dim=0)
        headers = rounds[:, :, 2].sum(dim=0)
        best = int(seconds.argmin())
        time_, sent, control = float(seconds[best]), float(messages[best]), float(headers[best])
        per_message = 1e6 * time_ / sent if sent else float("nan")
        print(
            f"{agents:>3} {1e3 * time_ / iterations:>9.2f} {sent / iterations:>14.2f} "
            f"{control / iterations:>13.2f} {per_message:>11.1f} "
            f"{1e6 * time_ / (sent + control):>13.1f} {spread(seconds.tolist()):>7.1%}"
        )


def print_p2p_table(results: dict[int, list[list[float]]]) -> None:
    print(
        f"{'method':<12} {'floats':>10} {'us one-way':>11} {'MB/s':>8} {'x bare':>7} {'noise':>7}"
    )
    overheads = []
    for floats, rows in results.items():
        columns = list(zip(*rows, strict=True))
        bare = min(columns[0])
        for name, times in zip(P2P_METHODS, columns, strict=True):
            best = min(times)
            print(
                f"{name:<12} {floats:>10} {1e6 * best:>11.1f} {4 * floats / best / 1e6:>8.0f} "
                f"{best / bare:>7.2f} {spread(list(times)):>7.1%}"
            )
        overheads.append(f"{min(columns[2]) / bare:.2f} at {floats}")
    print(f"transport overhead (transport/bare): {', '.join(overheads)} floats")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--warmup", type=int, default=20, help="untimed iterations")
    parser.add_argument("--iterations", type=int, default=80, help="timed iterations per round")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds of each measurement")
    parser.add_argument("--repeats", type=int, default=300, help="ping-pongs per round")
    parser.add_argument(
        "--floats",
        type=int,
        nargs="+",
        default=None,
        help="message sizes in float32 (default: the MLP's size, 1e6, 1e7)",
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per wait in a rank")
    parser.add_argument("--limit", type=float, default=300.0, help="seconds per job")
    parser.add_argument("--quick", action="store_true", help="smoke run: N = 2, 4; seconds")
    parser.add_argument(
        "--breakdown", action="store_true", help="only the steps of one send, stamped"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.agents, args.warmup, args.iterations = [2, 4], 3, 10
        args.rounds, args.repeats, args.limit = 2, 20, 60.0
        args.floats = args.floats or [MLP_FLOATS, LARGE_FLOATS[0]]
    if min(args.agents) < 2 or min(args.iterations, args.rounds, args.repeats) < 1:
        parser.error("--agents must be at least 2; --iterations, --rounds, --repeats positive")
    if args.floats is not None and min(args.floats) < 1:
        parser.error("--floats must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    interface = loopback_interface()
    if interface is not None:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", interface)
    if args.breakdown:
        run_breakdown(args)
        return 0
    print(
        f"DETSGRAD ({PRESET} preset) on a ring, one rank per agent, gloo on loopback; "
        f"{os.cpu_count()} cores; {args.warmup} warm-up + {args.rounds} x {args.iterations} "
        "iterations",
        flush=True,
    )
    iteration_rows = {}
    for agents in args.agents:
        result = run_job(iteration_rank, agents, args)
        iteration_rows[agents] = result["rows"]
    print()
    print_iteration_table(iteration_rows, args.iterations)
    sizes = args.floats or [MLP_FLOATS, *LARGE_FLOATS]
    print()
    print(
        f"one send between 2 ranks (ping-pong, {args.rounds} rounds of {args.repeats} round "
        f"trips per method for {MLP_FLOATS} floats, as many bytes for larger ones)",
        flush=True,
    )
    p2p = {}
    for floats in sizes:
        args.size = floats
        p2p[floats] = run_job(p2p_rank, 2, args)["rows"]
    print_p2p_table(p2p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
