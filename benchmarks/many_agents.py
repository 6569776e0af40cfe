"""Many agents on one machine: time per agent-step, memory and the estimate, by size.

DSGD trains the 16-10-26 MLP (456 parameters per agent) with 32 samples per agent
and step on an i.i.d. split, for each number of agents N in ``--agents`` (default
1,000, 10,000 and 100,000), one child process per size so that each peak resident
memory is its own. The data is one ``.npz`` written to a temporary folder: letter's
16,000 training rows drawn again with small Gaussian noise to ``--samples`` rows
(default 200,000, two per agent at 100,000), and letter's 4,000 test rows, so that
every size trains on the same file.

For each size it prints the simulator's training seconds per agent-step (evaluation
excluded) and that over the first size's, the samples per second, the peak resident
memory (``ru_maxrss``) of the child, murmur's memory estimate for the run and the
estimate over the peak; then centralized SGD on the same total batch (N x 32 samples
per step, one model) in the same child, and the agents' samples per second over its.

    python benchmarks/many_agents.py                          # minutes
    python benchmarks/many_agents.py --agents 1000 10000 --graph ring
    python benchmarks/many_agents.py --quick                  # 100 and 1,000 agents, seconds
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from murmur.config import Config, build_config
from murmur.data import load_dataset
from murmur.data.datasets import Dataset
from murmur.data.user_arrays import save_npz

BATCH = 32


def write_data(path: Path, samples: int) -> Path:
    """letter's training rows drawn ``samples`` times with noise, and its test rows."""
    letter = load_dataset("letter")
    stream = torch.Generator().manual_seed(0)
    rows = torch.randint(letter.x_train.shape[0], (samples,), generator=stream)
    noise = 0.05 * torch.randn(samples, letter.x_train.shape[1], generator=stream)
    grown = Dataset(
        name="letter-grown",
        x_train=letter.x_train[rows] + noise,
        y_train=letter.y_train[rows],
        x_test=letter.x_test,
        y_test=letter.y_test,
        task=letter.task,
        num_classes=letter.num_classes,
    )
    return save_npz(grown, path)


def config(algorithm: str, agents: int, data: Path, graph: str, iterations: int) -> Config:
    """The benchmark's run of ``algorithm`` with ``agents`` agents."""
    topology: dict[str, object] = {"agents": agents, "graph": graph}
    if graph == "one_peer":
        topology = {"agents": agents, "graph": "exponential", "varying": "one_peer"}
    return build_config(
        {
            "algorithm": {"name": algorithm},
            "data": {"dataset": "file", "path": str(data), "partition": "iid", "batch_size": BATCH},
            "model": {"name": "mlp", "hidden": [10]},
            "topology": topology,
            "run": {"iterations": iterations, "eval_every": iterations},
        }
    )


def child(agents: int, data: Path, graph: str, iterations: int) -> dict[str, float]:
    """One size's figures, measured in this process."""
    from murmur import run
    from murmur.training.plan import plan

    torch.set_num_threads(1)
    decentralized = plan(config("dsgd", agents, data, graph, iterations))
    result = run(decentralized)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    central = run(config("centralized", agents, data, "ring", max(2, iterations // 5)))
    return {
        "agents": agents,
        "per_agent_step_ms": 1000 * result.train_seconds / (agents * iterations),
        "samples_per_second": result.samples_per_second,
        "centralized_samples_per_second": central.samples_per_second,
        "peak_bytes": peak,
        "estimate_bytes": decentralized.memory,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--samples", type=int, default=200_000)
    parser.add_argument("--graph", default="one_peer", help="ring, exponential or one_peer")
    parser.add_argument("--quick", action="store_true", help="100 and 1,000 agents")
    parser.add_argument("--child", nargs=2, metavar=("AGENTS", "DATA"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        figures = child(int(args.child[0]), Path(args.child[1]), args.graph, args.iterations)
        print(json.dumps(figures))
        return
    if args.quick:
        args.agents, args.iterations, args.samples = [100, 1000], 5, 20_000
    with tempfile.TemporaryDirectory() as folder:
        data = write_data(Path(folder) / "grown.npz", args.samples)
        rows = [_measure(agents, data, args) for agents in args.agents]
    _print(rows, args)


def _measure(agents: int, data: Path, args: argparse.Namespace) -> dict[str, float]:
    command = [
        sys.executable,
        __file__,
        "--child",
        str(agents),
        str(data),
        "--graph",
        args.graph,
        "--iterations",
        str(args.iterations),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{agents} agents failed: {done.stderr.strip().splitlines()[-1:]}")
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def _print(rows: list[dict[str, float]], args: argparse.Namespace) -> None:
    first = rows[0]["per_agent_step_ms"]
    print(
        f"DSGD, {args.graph}, MLP 16-10-26, batch {BATCH}, {args.iterations} iterations, "
        f"{args.samples} training samples"
    )
    print(
        f"{'agents':>8}  {'ms/agent-step':>13}  {'vs first':>8}  {'samples/s':>10}  "
        f"{'vs central':>10}  {'peak RSS':>9}  {'estimate':>9}  {'est/peak':>8}"
    )
    for row in rows:
        print(
            f"{int(row['agents']):>8}  {row['per_agent_step_ms']:>13.4f}  "
            f"{row['per_agent_step_ms'] / first:>8.2f}  {row['samples_per_second']:>10.0f}  "
            f"{row['samples_per_second'] / row['centralized_samples_per_second']:>10.2f}  "
            f"{row['peak_bytes'] / 2**30:>7.2f}GB  {row['estimate_bytes'] / 2**30:>7.2f}GB  "
            f"{row['estimate_bytes'] / row['peak_bytes']:>8.2f}"
        )


if __name__ == "__main__":
    main()
