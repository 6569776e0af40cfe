"""Training throughput of murmur's simulator on a CUDA GPU against the CPU.

For each model (the 784-100-10 MLP, the LeNet-5 ``cnn``) and each number of
agents N, a DETSGRAD run on mnist5k (ring, i.i.d. split, 32 samples per agent
and step) is trained for ``--steps`` iterations with ``run.device = "cpu"`` and
``"cuda"``, and the simulator's training samples per second compared (its own
``train_seconds``: evaluations are left out). On the GPU the model, the data, the
agents' stacked parameters, the algorithm's state and the counters live on the
device, and only the batch indices go up each step. One untimed warm-up run per
model and device comes first (CUDA's and torch.func's start-up). Needs a CUDA GPU:
without one it says so and exits with status 2.

    python benchmarks/gpu_throughput.py                        # N = 64, 256, 1024
    python benchmarks/gpu_throughput.py --agents 500 --models cnn --no-cpu
    python benchmarks/gpu_throughput.py --quick                # smoke run, seconds
"""

from __future__ import annotations

import argparse
import sys

import torch

from murmur.config import load_experiment
from murmur.experiment import run


def measure(model: str, agents: int, device: str, steps: int, threads: int) -> tuple[float, float]:
    """Samples per second and milliseconds per step of one simulator run."""
    settings = [
        f"model.name={model}",
        "data.partition=iid",
        f"topology.agents={agents}",
        f"run.iterations={steps}",
        f"run.eval_every={steps}",
        f"run.threads={threads}",
        f"run.device={device}",
    ]
    ((_, config),) = load_experiment("detsgrad", settings).runs
    result = run(config)
    return result.samples_per_second, 1000 * result.train_seconds / steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--models", nargs="+", default=["mlp", "cnn"], choices=["mlp", "cnn"])
    parser.add_argument("--steps", type=int, default=50, help="timed iterations per run")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--no-cpu", action="store_true", help="time the GPU only")
    parser.add_argument("--quick", action="store_true", help="smoke run: N = 4, 5 steps")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print(
            f"gpu_throughput: torch {torch.__version__} finds no CUDA GPU on this machine; "
            "run it where torch.cuda.is_available() is True",
            file=sys.stderr,
        )
        return 2
    if args.quick:
        args.agents, args.steps = [4], 5
    devices = ["cuda"] if args.no_cpu else ["cpu", "cuda"]
    print(f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}")
    print(f"DETSGRAD on mnist5k, ring, 32 samples per agent and step, {args.steps} steps")
    print(f"{'model':<6} {'N':>5} {'device':<6} {'samples/s':>11} {'ms/step':>9} {'speed-up':>9}")
    for model in args.models:
        for device in devices:
            measure(model, 2, device, 2, args.threads)  # warm-up, untimed
        for agents in args.agents:
            rates = {}
            for device in devices:
                rate, step_ms = measure(model, agents, device, args.steps, args.threads)
                rates[device] = rate
                speedup = f"{rate / rates['cpu']:.2f}" if "cpu" in rates else "-"
                cells = f"{model:<6} {agents:>5} {device:<6} {rate:>11,.0f} {step_ms:>9.2f}"
                print(f"{cells} {speedup:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
