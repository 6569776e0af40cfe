"""What the simulator's training steps read back from their tensors, per step: the
calls that are a device-to-host transfer (and a wait for the device) when the
tensors live on a GPU.

Runs each algorithm (``--algorithms``, default DSGD and DETSGRAD on the default
experiment's model and data with ``--agents`` agents on a ring) in the simulator on
the CPU for ``--iterations`` steps, with every ``Tensor.item``, ``tolist``,
``numpy``, ``__bool__``, ``__int__``, ``__float__``, ``__index__`` and ``nonzero``
call, and every indexing by a boolean mask, counted while a training step runs
(evaluations left out), and prints the reads per step with the place in murmur that
makes each (the innermost frame under ``src/murmur``).
On the CPU these reads are free; on a GPU each one stops the host until the device
has caught up, which is why a step that is to stay on the device must make none.
Runs on any machine: it needs no GPU. It does not see the reads torch makes inside
its own functions (``torch.nonzero`` called as a function, ``masked_select``).
The batch sampler's reads (``murmur/data/batches.py``) are listed apart and left out
of the total: the sampler computes on CPU tensors whatever ``run.device`` is, and its
indices cross to the device once per step without waiting for it, so its reads never
wait for a device.
The steps take the path a GPU takes (row writes through a mask,
``murmur.sim.transport.INDEXED_DEVICES`` emptied); ``--cpu-path`` counts the CPU's
own path, which reads its masks to touch fewer rows. ``--faults`` runs on the
per-edge transport, whose mailboxes stay on the device too. Server runs
(``asysg-con``, ``sync-ps``, ``asysg-incon``) are counted per event: a worker's read
arriving, or its gradient.

    python benchmarks/host_syncs.py                          # seconds
    python benchmarks/host_syncs.py --algorithms choco-sgd --agents 16
    python benchmarks/host_syncs.py --faults                 # with faults.drop = 0.1
    python benchmarks/host_syncs.py --algorithms asysg-con sync-ps asysg-incon
"""

from __future__ import annotations

import argparse
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

import murmur
from murmur import load_experiment, run
from murmur.sim import server
from murmur.sim import transport as sim_transport
from murmur.training import sgd_loop

READS = ("item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__", "nonzero")
"""The Tensor methods that hand a tensor's numbers to Python, or (``nonzero``) make a
tensor whose size depends on them, which the host must wait to know."""

SERVER_RUNS = ("asysg-con", "sync-ps", "asysg-incon")
"""Server runs step by events (a worker's read arriving, or its gradient): their reads
are counted per event, evaluations left out."""
SOURCE = Path(murmur.__file__).parent
HOST_SIDE = ("murmur/data/batches.py",)
"""Code that computes on CPU tensors whatever ``run.device`` is."""


class Reads:
    """Counts of the reads made while ``active``, by the murmur line that made them."""

    def __init__(self) -> None:
        self.active = False
        self.places: Counter[str] = Counter()
        self.steps = 0

    def note(self) -> None:
        if not self.active:
            return
        for frame in reversed(traceback.extract_stack()[:-2]):
            path = Path(frame.filename)
            if SOURCE in path.parents:
                self.places[f"{path.relative_to(SOURCE.parent)}:{frame.lineno}"] += 1
                return
        self.places["(outside murmur)"] += 1


@contextmanager
def counted(reads: Reads) -> Iterator[None]:
    """Every read counted while a training step runs."""
    originals: dict[str, Any] = {name: getattr(torch.Tensor, name) for name in READS}

    def wrapped(original: Callable[..., Any]) -> Callable[..., Any]:
        def read(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            reads.note()
            return original(self, *args, **kwargs)

        return read

    def masked(original: Callable[..., Any]) -> Callable[..., Any]:
        def index(self: torch.Tensor, key: Any, *args: Any) -> Any:
            keys = key if isinstance(key, tuple) else (key,)
            if any(isinstance(k, torch.Tensor) and k.dtype == torch.bool for k in keys):
                reads.note()  # a boolean mask: the result's size depends on its numbers
            return original(self, key, *args)

        return index

    for name in ("__getitem__", "__setitem__"):
        originals[name] = getattr(torch.Tensor, name)

    step, fire, evaluate = sgd_loop._step, server._ServerRun._fire, server._ServerRun._evaluate

    def timed(original: Callable[..., Any]) -> Callable[..., Any]:
        def counted_step(*args: Any, **kwargs: Any) -> Any:
            reads.active, reads.steps = True, reads.steps + 1
            try:
                return original(*args, **kwargs)
            finally:
                reads.active = False

        return counted_step

    def unseen(*args: Any, **kwargs: Any) -> Any:  # a server run's evaluation
        active, reads.active = reads.active, False
        try:
            return evaluate(*args, **kwargs)
        finally:
            reads.active = active

    for name, original in originals.items():
        setattr(
            torch.Tensor,
            name,
            (masked if name in ("__getitem__", "__setitem__") else wrapped)(original),
        )
    sgd_loop._step = timed(step)  # type: ignore[assignment]
    server._ServerRun._fire = timed(fire)  # type: ignore[method-assign]
    server._ServerRun._evaluate = unseen  # type: ignore[method-assign]
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
        sgd_loop._step = step  # type: ignore[assignment]
        server._ServerRun._fire = fire  # type: ignore[method-assign]
        server._ServerRun._evaluate = evaluate  # type: ignore[method-assign]


def count(algorithm: str, args: argparse.Namespace) -> Reads:
    settings = [
        f"topology.agents={args.agents}",
        "topology.graph=ring",
        f"run.iterations={args.iterations}",
        f"run.eval_every={args.iterations}",
        f"data.dataset={args.dataset}",
        *(["faults.drop=0.1"] if args.faults else []),
    ]
    ((_, config),) = load_experiment(algorithm, settings).runs
    reads = Reads()
    indexed = sim_transport.INDEXED_DEVICES
    if not args.cpu_path:
        sim_transport.INDEXED_DEVICES = set()
    try:
        with counted(reads):
            run(config)
    finally:
        sim_transport.INDEXED_DEVICES = indexed
    return reads


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", nargs="+", default=["dsgd", "detsgrad"])
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--dataset", default="mnist5k")
    parser.add_argument("--faults", action="store_true", help="faults.drop = 0.1")
    parser.add_argument("--quick", action="store_true", help="digits, 4 iterations")
    parser.add_argument(
        "--cpu-path", action="store_true", help="the CPU's indexed row writes, not a GPU's"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.dataset, args.iterations = "digits", 4
    torch.set_num_threads(1)
    for algorithm in args.algorithms:
        reads = count(algorithm, args)
        steps = max(reads.steps, 1)
        host = {p: c for p, c in reads.places.items() if p.startswith(HOST_SIDE)}
        device = {p: c for p, c in reads.places.items() if p not in host}
        total = sum(device.values())
        unit = "event" if algorithm in SERVER_RUNS else "step"
        print(f"{algorithm}: {total / steps:.1f} reads per {unit} ({reads.steps} {unit}s)")
        for place, calls in sorted(device.items(), key=lambda item: -item[1]):
            print(f"  {calls / steps:6.1f}  {place}")
        if host:
            print(f"  host-side, not counted: {sum(host.values()) / steps:.1f} (batch sampler)")


if __name__ == "__main__":
    main()
