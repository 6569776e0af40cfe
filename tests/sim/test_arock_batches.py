"""Asynchronous dSSFN's updates made many at a time give the run the one-at-a-time
event loop gives: the same events in the same order, and every number the same, bit
for bit (each node's update reads what had arrived when it began, and its arithmetic
does not depend on which other nodes share the batch).

Bit for bit needs products whose rounding does not depend on where their operands lie
in memory: MKL's own code path on some CPUs (AVX-512 AMD EPYC) rounds a product by its
operands' alignment, which a batch changes. The runs are compared in a child process
with portable numbers (``MURMUR_PORTABLE=1``: MKL_CBWR=COMPATIBLE, one code path)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from murmur import load_experiment, run
from murmur.algorithms import arock
from murmur.algorithms.ssfn import Ball
from murmur.sim.layer_network import SimulatedNetwork

SMALL = [
    "algorithm.layers=2",
    "algorithm.nodes=40",
    "algorithm.tolerance=1e-3",
    "topology.agents=6",
]
RELAX = arock.relax


def _run(batched: bool, settings: list[str]) -> tuple[dict, list[int]]:
    """The run's summary without its wall times, and the size of every batch made."""
    SimulatedNetwork.batched = batched
    sizes: list[int] = []

    def recorded(updates):
        sizes.append(len(updates))
        RELAX(updates)

    arock.relax = recorded
    try:
        ((_, config),) = load_experiment("dssfn-async-vowel", [*SMALL, *settings]).runs
        summary = run(config).to_dict()
    finally:
        arock.relax, SimulatedNetwork.batched = RELAX, True
    for key in ("wall_seconds", "train_seconds", "samples_per_second", "machine"):
        summary.pop(key, None)  # type: ignore[misc]
    return dict(summary), sizes


def _compare(settings: list[str]) -> dict:
    """Both runs' summaries and batch sizes, as the child process prints them."""
    alone, single = _run(False, settings)
    together, batches = _run(True, settings)
    return {"alone": alone, "together": together, "single": single, "batches": batches}


@pytest.mark.parametrize(
    "settings",
    [
        [],
        ["faults.drop=0.2"],
        ["topology.graph=erdos_renyi", "topology.probability=0.5"],
    ],
    ids=["ring", "lossy", "erdos-renyi"],
)
def test_batched_updates_give_the_one_at_a_time_run_bit_for_bit(settings):
    done = subprocess.run(
        [sys.executable, __file__, json.dumps(settings)],
        env=os.environ | {"MURMUR_PORTABLE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    runs = json.loads(done.stdout.splitlines()[-1])
    alone, together = runs["alone"], runs["together"]
    single, batches = runs["single"], runs["batches"]
    assert together == alone
    assert set(single) == {1} and sum(batches) == sum(single)
    if not settings:
        assert sum(batches) == alone["events"]  # every update, and only they, sent
    assert sum(batches) / len(batches) > 3  # updates were made together, on average


def test_a_node_s_update_is_the_same_whoever_shares_its_batch():
    """Nodes of different ranks padded to one, updated alone and together."""
    stream = torch.Generator().manual_seed(3)
    nodes = []
    for index, samples in enumerate((4, 7, 5)):
        features = torch.rand(samples, 12, generator=stream, dtype=torch.float64)
        targets = torch.rand(3, samples, generator=stream, dtype=torch.float64)
        node = arock.ArockNode(
            index,
            features.T @ features,
            targets @ features,
            [(index + 1) % 3, (index + 2) % 3],
            Ball(0.3),
            3,
            arock.ArockRule(2.0, 0.8, cap=100),
        )
        for j in node.inbox:
            node.inbox[j] = torch.rand(3, 12, generator=stream, dtype=torch.float64)
        node.pad_rank(7)
        nodes.append(node)
    copies = [_copy(node) for node in nodes]
    arock.relax([node.begin_update() for node in nodes])
    for copy in copies:
        arock.relax([copy.begin_update()])
    for node, copy in zip(nodes, copies, strict=True):
        assert torch.equal(node.solution, copy.solution) and node.shift == copy.shift
        assert node.residual == copy.residual and node.stamp == copy.stamp
        assert all(torch.equal(node.own[j], copy.own[j]) for j in node.own)


def _copy(node: arock.ArockNode) -> arock.ArockNode:
    made = object.__new__(arock.ArockNode)
    made.__dict__.update(node.__dict__)
    made.own, made.inbox, made.stamps = dict(node.own), dict(node.inbox), dict(node.stamps)
    return made


if __name__ == "__main__":  # the child process of the bit-for-bit test
    print(json.dumps(_compare(json.loads(sys.argv[1]))))
