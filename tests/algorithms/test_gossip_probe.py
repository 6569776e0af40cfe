"""The measured check of compressed-gossip steps that the automatic steps use."""

from __future__ import annotations

import math

import pytest
import torch

from murmur.algorithms import gossip_probe
from murmur.algorithms.choco import ChocoConfig, auto_gamma
from murmur.algorithms.compressors import LowRank, NoCompression, RandK, TopK, kept_share
from murmur.algorithms.estimates import Segments
from murmur.algorithms.protocols import BuildContext
from murmur.topology import (
    consensus_step,
    erdos_renyi,
    metropolis_weights,
    mixing_matrix,
    mixing_operator,
    ring,
    torus,
)


def _choco_gossip_distance(mixing: torch.Tensor, fraction: float, gamma: float) -> float:
    """CHOCO's gossip under a fixed heterogeneous pull, written out by hand."""
    generator = torch.Generator().manual_seed(3)
    agents, entries = mixing.shape[0], 500
    pull = torch.randn(agents, entries, generator=generator)
    pull -= pull.mean(0)
    difference = mixing.float() - torch.eye(agents)
    x, estimates = torch.zeros(agents, entries), torch.zeros(agents, entries)
    k = math.ceil(fraction * entries)
    for _ in range(1500):
        x -= 0.01 * pull
        error = x - estimates
        top = error.abs().topk(k, dim=1).indices
        estimates += torch.zeros_like(error).scatter_(1, top, error.gather(1, top))
        x += gamma * (difference @ estimates)
    return float((x - x.mean(0)).norm(dim=1).mean())


def test_the_probe_rejects_the_rule_where_compressed_gossip_grows_and_keeps_it_where_not():
    graph = erdos_renyi(20, 0.3, 7)
    mixing = metropolis_weights(graph)
    rule = 0.0833  # 1 / lambda_max(I - W) times sqrt(0.01) on this graph
    assert not gossip_probe.bounded(mixing, TopK(0.01), 7510, rule)
    chosen = auto_gamma(mixing, TopK(0.01), 7510)
    assert chosen < 0.05
    assert gossip_probe.bounded(mixing, TopK(0.01), 7510, chosen)
    # the written-out gossip agrees: it blows up at the rule, settles at the chosen step
    assert _choco_gossip_distance(mixing, 0.01, rule) > 100 * _choco_gossip_distance(
        mixing, 0.01, chosen
    )
    # on the ring of 10 the rule's 0.075 is near the edge (growth 1.44): one shrink
    ring_mixing = metropolis_weights(ring(10))
    assert gossip_probe.growth(ring_mixing, TopK(0.01), 79510, 0.075) > gossip_probe.GROWTH
    assert abs(auto_gamma(ring_mixing, TopK(0.01), 79510) - 0.075 * 2**-0.25) < 1e-3


def test_the_probe_rejects_the_step_at_which_training_on_a_torus_drifted_apart():
    """CHOCO-SGD with top-k 1 % on letter, 4 x 4 torus, gamma 0.053: its consensus
    distance grew from 1.8 to 27 in 3,000 iterations; one shrink (0.0446) settles."""
    mixing = metropolis_weights(torus(16))
    assert not gossip_probe.bounded(mixing, TopK(0.01), 2048, 0.053)
    assert gossip_probe.growth(mixing, TopK(0.01), 2048, 0.0446) < 1.05


def test_exact_gossip_is_never_shrunk_and_random_sparsification_is_shrunk_more():
    mixing = metropolis_weights(ring(10))
    assert abs(auto_gamma(mixing, NoCompression(), 1000) - 0.75) < 1e-12
    # the step top-k keeps makes rand-k's gossip grow, so rand-k's is shrunk below it
    topk = auto_gamma(mixing, TopK(0.01), 1000)
    assert gossip_probe.bounded(mixing, TopK(0.01), 1000, topk)
    assert not gossip_probe.bounded(mixing, RandK(0.01), 1000, topk)
    assert gossip_probe.growth(mixing, NoCompression(), 100, 0.75) <= 1.0 + 1e-6


def test_the_probe_size_is_small_for_share_only_compressors():
    assert gossip_probe.probe_size(TopK(0.01), 79510) == gossip_probe.PROBE_ENTRIES
    assert gossip_probe.probe_size(TopK(0.01), 100) == 100


def test_a_small_step_still_settling_is_not_taken_for_divergence():
    """Rank-1 messages at a tiny gamma: the distance still rises at step 1,500, but ever
    more slowly; shrinking gamma would only slow it down more."""
    mixing = metropolis_weights(ring(10))
    compressor = LowRank(1, ((20, 50),))
    first, middle, last = gossip_probe.distances(mixing, compressor, 1000, 0.002)
    assert last / first > gossip_probe.GROWTH and last - middle < middle - first
    assert gossip_probe.bounded(mixing, compressor, 1000, 0.002)
    # the rule's step, 0.75 x sqrt((1 / 20)^2 / 4), is kept rather than shrunk 16 times
    assert abs(auto_gamma(mixing, compressor, 1000) - 0.75 * (1 / 20) / 2) < 1e-9


def test_above_the_dense_limit_gamma_comes_from_the_sparse_spectrum_without_the_probe():
    graph = ring(12)
    dense = mixing_matrix(graph, "metropolis")
    sparse = mixing_operator(graph, "metropolis", dtype=torch.float64)
    assert auto_gamma(sparse, NoCompression(), 1000) == pytest.approx(
        auto_gamma(dense, NoCompression(), 1000), rel=1e-9
    )
    largest = float(torch.linalg.eigvalsh(torch.eye(12, dtype=torch.float64) - dense)[-1])
    rule = min(1.0, 1.0 / largest) * kept_share(TopK(0.01), 1000) ** 0.5
    assert auto_gamma(sparse, TopK(0.01), 1000) == pytest.approx(rule, rel=1e-9)


def test_choco_on_many_agents_builds_no_dense_matrix(monkeypatch):
    import murmur.algorithms.choco as choco

    monkeypatch.setattr(choco, "DENSE_LIMIT", 8)
    monkeypatch.setattr(choco, "mixing_matrix", lambda *args: pytest.fail("a dense W"))
    context = BuildContext(seed=0, segments=Segments((40,)))
    setup = choco.gossip_setup(ChocoConfig(a=0.1), ring(12), context)
    assert setup.operator.layout == torch.sparse_csr and 0 < setup.gamma <= 1
    expected = mixing_operator(ring(12), "metropolis", minus_identity=True).to_dense()
    assert torch.equal(setup.operator.to_dense(), expected)


def test_compressed_detsgrad_gt_on_many_agents_takes_the_rule_without_the_dense_probe(
    monkeypatch,
):
    import murmur.algorithms.detsgrad_gt as gt

    context = BuildContext(seed=0, segments=Segments((40,)))
    config = gt.DetsgradGtConfig(a=0.1, compress="topk")
    probed = gt.DetsgradGt(config, ring(12), context).chosen_steps()["b"]
    monkeypatch.setattr(gt, "DENSE_LIMIT", 8)
    monkeypatch.setattr(gt.gossip_probe, "supported_step", lambda *a: pytest.fail("a probe"))
    rule = gt.DetsgradGt(config, ring(12), context).chosen_steps()["b"]
    expected = consensus_step(ring(12), "auto") / 2 * kept_share(TopK(0.01), 40) ** 0.5
    assert rule == pytest.approx(expected, rel=1e-12)
    assert probed <= rule  # the probe only shrinks the rule's step
