"""Whether a run gives the same numbers in the simulator and in real processes: the
check murmur's own tests make of every algorithm, for a user's test of their own.

:func:`assert_runtimes_agree` trains one config twice, in the simulator (this process)
and with ``murmur launch`` (forked ranks on 127.0.0.1, bounded in time), and compares
their ``summary.json`` and ``metrics.jsonl``: the counts (events, messages, bytes, per
agent too) and the final accuracies exactly, the measurements of every evaluation to
float tolerance, relative or absolute (the ranks sum their agents' losses in another
order).
"""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from murmur.config import Config
from murmur.experiment import run

EXACT = ("iterations", "events", "messages", "bytes", "events_per_agent", "accuracy")
"""Summary fields both runtimes must give exactly."""
RECORD_EXACT = ("iteration", "samples", "events", "messages", "bytes", "events_per_agent")
RECORD_CLOSE = ("test_loss", "test_accuracy", "consensus_distance", "model_loss")


def assert_runtimes_agree(
    config: Config,
    folder: str | Path,
    *,
    nproc: int | None = None,
    agents_per_rank: int = 1,
    timeout: float = 300.0,
    tolerance: float = 1e-5,
) -> None:
    """Train ``config`` in the simulator and in ``nproc`` processes (default: one per
    agent, or ``agents_per_rank`` agents each) into ``folder``/``simulator`` and
    ``folder``/``launched``; AssertionError listing every difference. Plugins in
    ``config.run.plugins`` are imported by every rank, as ``murmur launch`` does."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    ranks = nproc if nproc is not None else config.topology.agents // agents_per_rank
    run(config, folder / "simulator")
    launched = _launch(config, folder, ranks, agents_per_rank, timeout)
    differences = _differences(folder / "simulator", launched, tolerance)
    if differences:
        raise AssertionError(
            "the simulator and the distributed runtime differ: " + "; ".join(differences)
        )


def _launch(config: Config, folder: Path, nproc: int, agents_per_rank: int, timeout: float) -> Path:
    """``murmur launch`` of ``config`` into ``folder``/``launched``."""
    file = folder / "config.toml"
    file.write_text(config.to_toml())
    out = folder / "launched"
    argv = [sys.executable, "-m", "murmur", "launch", "--nproc", str(nproc), str(file)]
    argv += ["--agents-per-rank", str(agents_per_rank), "--out", str(out), "--quiet"]
    argv += ["--port", str(_free_port())]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"murmur launch failed ({done.returncode}): {done.stderr.strip()}")
    return out


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _differences(simulated: Path, launched: Path, tolerance: float) -> list[str]:
    """What differs between the two run folders."""
    first, second = _summary(simulated), _summary(launched)
    differences = [
        f"{key}: {first.get(key)!r} against {second.get(key)!r}"
        for key in EXACT
        if first.get(key) != second.get(key)
    ]
    ours, theirs = _records(simulated), _records(launched)
    if len(ours) != len(theirs):
        return [*differences, f"{len(ours)} records against {len(theirs)}"]
    for want, got in zip(ours, theirs, strict=True):
        at = f"record of iteration {want.get('iteration')}"
        differences += [
            f"{at}: {key} {want.get(key)!r} against {got.get(key)!r}"
            for key in RECORD_EXACT
            if want.get(key) != got.get(key)
        ]
        differences += [
            f"{at}: {key} {want.get(key)!r} against {got.get(key)!r}"
            for key in RECORD_CLOSE
            if not _close(want.get(key), got.get(key), tolerance)
        ]
    return differences


def _close(first: Any, second: Any, tolerance: float) -> bool:
    if isinstance(first, list) and isinstance(second, list):
        return len(first) == len(second) and all(
            _close(a, b, tolerance) for a, b in zip(first, second, strict=True)
        )
    if isinstance(first, int | float) and isinstance(second, int | float):
        # relative for large values (a consensus distance of 98 sums float32 terms),
        # absolute near zero
        return math.isclose(first, second, rel_tol=tolerance, abs_tol=tolerance)
    return bool(first == second)


def _summary(folder: Path) -> Mapping[str, Any]:
    return dict(json.loads((folder / "summary.json").read_text()))


def _records(folder: Path) -> list[Mapping[str, Any]]:
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]
