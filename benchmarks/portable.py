"""Portable numbers (``run.portable``): the same seed's numbers under other CPU
kernels, and what pinning them costs.

One run (by default the ``detsgrad`` preset, mnist5k, MLP 784-100-10, ring of 10
agents, shortened to 300 iterations) is trained by ``murmur run`` in a child process
per setting, each with other kernels forced through the environment the child starts
with:

- ``default``: nothing forced: the widest kernels of this CPU, MKL's own code path;
- ``avx2``: ``ATEN_CPU_CAPABILITY=avx2``, torch's kernels of an AVX2 machine;
- ``avx2+cbwr``: that and ``MKL_CBWR=COMPATIBLE``, by hand;
- ``portable``: ``murmur run --portable`` (the reference);
- ``portable, X forced``: ``--portable`` in an environment that asks for the other
  kernels, ``ATEN_CPU_CAPABILITY=X`` (avx512 where the CPU has it, else default) and
  ``MKL_CBWR=AUTO``, which the pin overrides.

Each row gives the kernels the run's summary.json says it computed with, its final
test loss, whether its numbers are those of the ``portable`` row (summary.json but
for its times and ``machine``, every record of metrics.jsonl but for its
``wall_seconds``, the bytes of model.pt and agents.pt) and where not, the first
record that differs; then what the run took, the fastest of ``--repeats`` rounds,
the settings taken in turn: its training seconds (the summary's ``train_seconds``,
wall time) and the CPU seconds of the whole command in the child (planning, data,
training, evaluation and files; not Python's imports), which other processes on the
machine disturb less, with their ratio to ``default``'s: the cost of each setting.
``noise`` is the largest spread between one setting's rounds of CPU seconds.

    python benchmarks/portable.py                       # about a minute on 2 cores
    python benchmarks/portable.py --iterations 1000 --repeats 5
    python benchmarks/portable.py --preset dsgd --set topology.agents=20
    python benchmarks/portable.py --quick               # smoke run: blobs, seconds
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

QUICK_SET = (
    "data.dataset=blobs",
    "model.hidden=[8]",
    "topology.agents=4",
    "data.batch_size=8",
    "run.eval_every=20",
)
TIMES = ("wall_seconds", "train_seconds", "samples_per_second", "wall_seconds_to_target")
"""The summary's keys that time the run rather than say what it computed."""
CLEARED = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")
CLEARED += ("MURMUR_PORTABLE",)
"""Settings of the parent's environment that no child inherits unless its row sets them."""
CPU_TIMED = """
import sys, time
from murmur.cli import main
start = time.process_time()
code = main(sys.argv[1:])
print(f"cpu-seconds {time.process_time() - start!r}", file=sys.stderr)
sys.exit(code)
"""
"""``murmur ARGV`` (as ``python -m murmur`` runs it) and the CPU time it took."""


@dataclass(frozen=True)
class Setting:
    """One row: the environment a child starts with, and whether it runs --portable."""

    label: str
    environment: dict[str, str]
    portable: bool


@dataclass
class Row:
    setting: Setting
    seconds: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    numbers: str = ""
    """A digest of everything the run computed (:func:`numbers`)."""
    records: list[dict[str, object]] = field(default_factory=list)
    summary: dict[str, object] = field(default_factory=dict)


def settings() -> list[Setting]:
    """The rows, in the order of the table."""
    forced = "avx512" if "avx512f" in cpu_flags() else "default"
    other = {"ATEN_CPU_CAPABILITY": forced, "MKL_CBWR": "AUTO"}
    return [
        Setting("default", {}, False),
        Setting("avx2", {"ATEN_CPU_CAPABILITY": "avx2"}, False),
        Setting("avx2+cbwr", {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"}, False),
        Setting("portable", {}, True),
        Setting(f"portable, {forced} forced", other, True),
    ]


def cpu_flags() -> set[str]:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return set()
    flags = (line.split(":", 1)[1] for line in lines if line.startswith("flags"))
    return set(next(flags, "").split())


def train(setting: Setting, argv: list[str], folder: Path) -> float:
    """``murmur run ARGV`` in a child process with ``setting``'s environment; the CPU
    seconds it took."""
    environment = {k: v for k, v in os.environ.items() if k not in CLEARED}
    environment |= setting.environment
    command = [sys.executable, "-c", CPU_TIMED, "run", *argv, "--quiet", "--out", str(folder)]
    command += ["--portable"] if setting.portable else []
    done = subprocess.run(command, env=environment, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{setting.label}: murmur run failed: {done.stderr.strip()}")
    return float(done.stderr.split()[-1])


def numbers(folder: Path) -> tuple[str, dict[str, object], list[dict[str, object]]]:
    """A digest of what the run in ``folder`` computed, its summary and its records."""
    summary = json.loads((folder / "summary.json").read_text())
    kept = {k: v for k, v in summary.items() if k not in (*TIMES, "machine", "run_dir")}
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    for record in records:
        record.pop("wall_seconds", None)
    digest = hashlib.sha256(json.dumps([kept, records], sort_keys=True).encode())
    for name in ("model.pt", "agents.pt"):
        if (folder / name).is_file():
            digest.update((folder / name).read_bytes())
    return digest.hexdigest(), summary, records


def measure(rows: list[Row], argv: list[str], repeats: int) -> None:
    """Train every row ``repeats`` times, the rows in turn; keep each round's seconds and
    check that a row computes the same numbers every round."""
    with tempfile.TemporaryDirectory(prefix="murmur-portable-") as scratch:
        for round_ in range(repeats):
            for index, row in enumerate(rows):
                folder = Path(scratch) / f"{index}-{round_}"
                row.cpu.append(train(row.setting, argv, folder))
                digest, row.summary, row.records = numbers(folder)
                if row.numbers and digest != row.numbers:
                    sys.exit(f"{row.setting.label}: two rounds computed different numbers")
                row.numbers = digest
                row.seconds.append(float(row.summary["train_seconds"]))  # type: ignore[arg-type]


def first_difference(records: list[dict[str, object]], reference: list[dict[str, object]]) -> str:
    """The iteration of the first record that differs from ``reference``'s."""
    for mine, theirs in zip(records, reference, strict=False):
        if mine != theirs:
            return str(mine.get("iteration"))
    return "-" if len(records) == len(reference) else "length"


def table(rows: list[Row]) -> list[str]:
    reference = next(row for row in rows if row.setting.label == "portable")
    fastest = min(rows[0].cpu)
    lines = [
        f"{'setting':<24} {'kernels':<18} {'test loss':<20} {'= default':<9} "
        f"{'= portable':<10} {'differs at':<10} {'train s':>8} {'cpu s':>6} "
        f"{'/default':>8} {'noise':>6}"
    ]
    for row in rows:
        machine = row.summary["machine"]
        assert isinstance(machine, dict)
        kernels = f"{machine['cpu_capability']}, {machine['mkl_cbwr']}"
        same = row.numbers == reference.numbers
        difference = "-" if same else first_difference(row.records, reference.records)
        best = min(row.cpu)
        noise = (max(row.cpu) - best) / best
        lines.append(
            f"{row.setting.label:<24} {kernels:<18} {row.summary['test_loss']!r:<20} "
            f"{'yes' if row.numbers == rows[0].numbers else 'no':<9} "
            f"{'yes' if same else 'no':<10} {difference:<10} {min(row.seconds):>8.2f} "
            f"{best:>6.2f} "
            f"{best / fastest:>8.2f} {noise:>6.0%}"
        )
    return lines


def verdict(rows: list[Row]) -> str:
    """Whether the portable rows agree, and how the others differ from them."""
    pinned = {row.numbers for row in rows if row.setting.portable}
    others = [row for row in rows if not row.setting.portable]
    same = [row.setting.label for row in others if row.numbers in pinned]
    return (
        f"portable runs identical: {'yes' if len(pinned) == 1 else 'NO'}; the "
        f"{len(others)} runs without --portable ({', '.join(r.setting.label for r in others)}) "
        f"give {len({row.numbers for row in others})} different results, the portable "
        f"one for: {', '.join(same) or 'none'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="detsgrad", help="the run (default: detsgrad)")
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds of every row")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--quick", action="store_true", help="smoke run: blobs, 60 iterations")
    args = parser.parse_args()
    overrides = [f"run.iterations={args.iterations}", f"run.eval_every={args.eval_every}"]
    if args.quick:
        args.preset, args.repeats = "detsgrad", 1
        overrides = ["run.iterations=60", *QUICK_SET]
    argv = [args.preset, *(f"--set={item}" for item in [*overrides, *args.set])]
    rows = [Row(setting) for setting in settings()]
    print(f"murmur run {' '.join(argv)}: {len(rows)} settings x {args.repeats} rounds")
    measure(rows, argv, args.repeats)
    print("\n".join(["", *table(rows), "", verdict(rows)]))


if __name__ == "__main__":
    main()
