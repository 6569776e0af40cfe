"""Synchronous dSSFN in the distributed runtime: one node per rank on loopback gloo,
its gossip through a DistributedTransport, gives the simulator's output matrices
and messages.

The ranks are forked by one driver process (torch imported once); the driver
and every rank have deadlines, and the driver kills what is left at its own.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import torch

from murmur.config import load_experiment
from murmur.experiment import run

DRIVER = r"""
import json, multiprocessing, os, sys, time
from datetime import timedelta
spec = json.loads(sys.argv[1])
import torch
import torch.distributed as dist
from murmur.config import load_experiment
from murmur.experiment import prepare
from murmur.registry import ALGORITHMS
from murmur.runtime.distributed import loopback_interface
from murmur.runtime.distributed_layerwise import train_layerwise_rank


def rank_main(rank):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback_interface() or "lo")
    ((_, config),) = load_experiment(spec["config"]).runs
    setup = prepare(config)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{spec['port']}", rank=rank,
        world_size=spec["world"], timeout=timedelta(seconds=30),
    )
    solver = ALGORITHMS[config.algorithm.name].build(config.algorithm, setup.graph)
    trained, counters = train_layerwise_rank(setup, solver, rank, timeout=20.0)
    torch.save(
        {"outputs": trained.outputs,
         "events": counters.events, "messages": counters.messages, "bytes": counters.bytes},
        os.path.join(spec["out"], f"rank{rank}.pt"),
    )
    dist.destroy_process_group()


context = multiprocessing.get_context("fork")
ranks = [context.Process(target=rank_main, args=(rank,)) for rank in range(spec["world"])]
for process in ranks:
    process.start()
deadline = time.monotonic() + spec["limit"]
while time.monotonic() < deadline and any(p.exitcode is None for p in ranks):
    if any(p.exitcode not in (None, 0) for p in ranks):
        break
    time.sleep(0.02)
codes = []
for process in ranks:
    if process.exitcode is None:
        process.kill()
    process.join()
    codes.append(process.exitcode)
print(json.dumps(codes))
"""

TOML = """
[run]
seed = 5
[data]
dataset = "blobs"
[topology]
graph = "ring"
agents = 4
[algorithm]
name = "dssfn"
lam = 1e2
mu = 1.0
layers = 2
nodes = 12
admm_iterations = 6
gossip_rounds = 3
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_sync_dssfn_on_four_ranks_gives_the_simulators_outputs_and_messages(tmp_path: Path):
    config_path = tmp_path / "config.toml"
    config_path.write_text(TOML)
    out = tmp_path / "ranks"
    out.mkdir()
    spec = {
        "config": str(config_path),
        "port": free_port(),
        "world": 4,
        "out": str(out),
        "limit": 60.0,
    }
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [0, 0, 0, 0], done.stderr

    ((_, config),) = load_experiment(str(config_path)).runs
    simulated = run(config, None)
    ranks = [torch.load(out / f"rank{rank}.pt") for rank in range(4)]
    outputs = torch.cat([rank["outputs"] for rank in ranks])
    assert outputs.shape == simulated.parameters.shape
    torch.testing.assert_close(outputs, simulated.parameters, rtol=1e-9, atol=1e-12)
    spread = (outputs - outputs.mean(dim=0)).abs().max()
    assert spread > 1e-6  # the nodes disagree: each rank's matrices are its own node's
    assert simulated.messages > 0
    assert sum(rank["messages"] for rank in ranks) == simulated.messages
    assert sum(rank["bytes"] for rank in ranks) == simulated.bytes
    assert [rank["events"] for rank in ranks] == simulated.events_per_agent
