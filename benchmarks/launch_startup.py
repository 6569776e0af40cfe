"""How long ``murmur launch`` takes to start its ranks, and where the seconds go.

Runs ``murmur launch --nproc N PRESET`` (``--preset``, default dsgd on mnist5k with
``topology.agents = N``) ``--repeats`` times as a child process, and times:

- ``first``: from starting the command to rank 0's first record (iteration 0) in
  ``metrics.jsonl``, polled every 10 ms: every rank has started, read its data,
  built its graph and joined the group;
- ``total``: to the command's end;
- ``train``: the run's own ``train_seconds`` (summary.json);

and, for scale, one ``python -c "import torch"`` and one ``python -c "import
murmur.cli"`` (what every process started afresh pays before it computes). The
rows are the fastest of the repeats.

    python benchmarks/launch_startup.py                 # about a minute
    python benchmarks/launch_startup.py --nproc 2 --iterations 200
    python benchmarks/launch_startup.py --quick         # smoke run, seconds
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def seconds_of(code: str) -> float:
    """Wall seconds of ``python -c CODE``."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - started


def one_launch(args: argparse.Namespace, folder: Path) -> tuple[float, float, float]:
    """(first record, total, train) seconds of one ``murmur launch``."""
    out = folder / f"run-{time.monotonic_ns()}"
    settings = [
        f"topology.agents={args.nproc}",
        f"run.iterations={args.iterations}",
        f"run.eval_every={args.iterations}",
        f"data.dataset={args.dataset}",
        "data.allow_missing_classes=true",
    ]
    command = [sys.executable, "-m", "murmur", "launch", "--nproc", str(args.nproc), args.preset]
    command += [item for setting in settings for item in ("--set", setting)]
    command += ["--out", str(out), "--quiet", "--port", str(free_port())]
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    first = None
    records = out / "metrics.jsonl"
    while child.poll() is None:
        if first is None and records.exists() and records.stat().st_size > 0:
            first = time.perf_counter() - started
        time.sleep(0.01)
    total = time.perf_counter() - started
    if child.returncode != 0:
        raise SystemExit(f"murmur launch failed ({child.returncode}): {child.stderr.read()}")
    train = float(json.loads((out / "summary.json").read_text())["train_seconds"])
    return (first if first is not None else total), total, train


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--preset", default="dsgd")
    parser.add_argument("--dataset", default="mnist5k")
    parser.add_argument("--iterations", type=int, default=600)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="2 ranks, digits, 20 iterations")
    args = parser.parse_args(argv)
    if args.quick:
        args.nproc, args.dataset, args.iterations, args.repeats = 2, "digits", 20, 1
    torch_import = min(seconds_of("import torch") for _ in range(args.repeats))
    murmur_import = min(seconds_of("import murmur.cli") for _ in range(args.repeats))
    with tempfile.TemporaryDirectory(prefix="murmur-launch-bench-") as folder:
        runs = [one_launch(args, Path(folder)) for _ in range(args.repeats)]
    first, total, train = (min(run[k] for run in runs) for k in range(3))
    print(
        f"murmur launch --nproc {args.nproc} {args.preset}, {args.dataset}, "
        f"{args.iterations} iterations, fastest of {args.repeats}"
    )
    print(f"{'import torch':<26} {torch_import:7.2f} s")
    print(f"{'import murmur.cli':<26} {murmur_import:7.2f} s")
    print(f"{'first iteration':<26} {first:7.2f} s")
    print(f"{'train':<26} {train:7.2f} s")
    print(f"{'total':<26} {total:7.2f} s")


if __name__ == "__main__":
    main()
