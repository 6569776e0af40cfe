"""Every algorithm config refuses out-of-range values with its own message, at the boundary."""

from __future__ import annotations

import re

import pytest

from murmur.algorithms.arock import DssfnAsyncConfig
from murmur.algorithms.asysg import AsysgConfig, AsysgInconConfig, WorkersConfig
from murmur.algorithms.centralized import CentralizedConfig
from murmur.algorithms.detsgrad import Detsgrad, DetsgradConfig
from murmur.algorithms.dsgd import DsgdConfig
from murmur.algorithms.dssfn import DssfnConfig
from murmur.algorithms.hogwild import HogwildConfig
from murmur.algorithms.ssfn import LayerwiseConfig, SsfnConfig
from murmur.errors import UsageError
from murmur.topology import complete


def _refused(factory, message: str, **values) -> None:
    with pytest.raises(UsageError, match=f"^{re.escape(message)}$"):
        factory(**values)


def test_the_gradient_step_needs_a_positive_scale_and_non_negative_decay():
    """a > 0; eps and d2 are each >= 0, checked separately, with 0 allowed."""
    _refused(CentralizedConfig, "algorithm.a must be positive, not 0.0", a=0.0)
    both = "algorithm.eps and algorithm.d2 must be >= 0"
    _refused(CentralizedConfig, both, eps=-1e-9)
    _refused(CentralizedConfig, both, d2=-0.5)
    CentralizedConfig(eps=0.0, d2=0.0)


def test_consensus_steps_must_be_positive_and_detsgrad_thresholds_non_negative():
    """DSGD and DETSGRAD refuse b = 0; DETSGRAD takes v0 = 0 and d1 = 0 but no less."""
    _refused(DsgdConfig, "algorithm.b must be positive or 'auto', not 0.0", b=0.0)
    _refused(DetsgradConfig, "algorithm.b must be positive or 'auto', not 0.0", b=0.0)
    _refused(DetsgradConfig, "algorithm.v0 must be >= 0, not -0.5", v0=-0.5)
    _refused(DetsgradConfig, "algorithm.d1 must be >= 0", d1=-0.1)
    DetsgradConfig(v0=0.0, d1=0.0)


def test_detsgrad_names_algorithm_b_when_the_consensus_step_is_too_large():
    """b * lambda_max(L) >= 2 on the graph is refused under the config key algorithm.b."""
    message = (
        "algorithm.b=1 is too large for complete with 4 agents: "
        'b * lambda_max(L) = 4 must be < 2; use b < 0.5 or b = "auto"'
    )
    with pytest.raises(UsageError, match=f"^{re.escape(message)}$"):
        Detsgrad(DetsgradConfig(b=1), complete(4))  # lambda_max = 4


def test_worker_configs_refuse_no_workers_negative_targets_and_delays():
    """W >= 1, target_loss >= 0, 1 <= M <= W and T >= 0, each with its own message."""
    _refused(WorkersConfig, "algorithm.workers must be at least 1, not 0", workers=0)
    _refused(WorkersConfig, "algorithm.target_loss must be >= 0, not -1.0", target_loss=-1.0)
    _refused(
        AsysgConfig,
        "algorithm.group (M = 3) must be between 1 and algorithm.workers (W = 2)",
        workers=2,
        group=3,
    )
    _refused(AsysgInconConfig, "algorithm.max_delay must be >= 0, not -1", max_delay=-1)
    _refused(HogwildConfig, "algorithm.workers must be at least 1, not 0", workers=0)
    WorkersConfig(workers=1, target_loss=0.0)
    AsysgInconConfig(max_delay=0)
    HogwildConfig(workers=1)


def test_layerwise_configs_name_the_key_and_accept_the_smallest_valid_sizes():
    """lam, mu, alpha > 0; layers >= 0; nodes, admm_iterations, node_step >= 1."""
    _refused(LayerwiseConfig, "algorithm.lam (lambda) must be positive, not 0.0", lam=0.0)
    _refused(LayerwiseConfig, "algorithm.mu must be positive, not 0.0", mu=0.0)
    _refused(LayerwiseConfig, "algorithm.alpha must be positive, not 0.0", alpha=0.0)
    _refused(LayerwiseConfig, "algorithm.layers must be >= 0, not -1", layers=-1)
    _refused(LayerwiseConfig, "algorithm.nodes must be at least 1, not 0", nodes=0)
    _refused(LayerwiseConfig, "algorithm.admm_iterations must be at least 1", admm_iterations=0)
    LayerwiseConfig(layers=0, nodes=1, admm_iterations=1)
    _refused(SsfnConfig, "algorithm.node_step must be at least 1", node_step=0)
    both = "algorithm.node_tolerance and layer_tolerance must be >= 0"
    _refused(SsfnConfig, both, node_tolerance=-0.1)
    _refused(SsfnConfig, both, layer_tolerance=-0.1)
    SsfnConfig(node_step=1, node_tolerance=0.0, layer_tolerance=0.0)


def test_gossip_rounds_and_the_relaxation_step_have_inclusive_bounds():
    """gossip_rounds >= 1 (1 allowed) or "auto"; eta in (0, 1] (1 allowed, 0 and above 1
    refused); the tolerances and the gossip cap likewise."""
    _refused(
        DssfnConfig, 'algorithm.gossip_rounds must be at least 1 or "auto", not 0', gossip_rounds=0
    )
    DssfnConfig(gossip_rounds=1)
    DssfnConfig(gossip_rounds="auto", tolerance=0.0)
    _refused(
        DssfnConfig,
        "algorithm.consensus_tolerance must be in (0, 1), not 0.0",
        consensus_tolerance=0.0,
    )
    _refused(DssfnConfig, "algorithm.gossip_cap must be at least 1, not 0", gossip_cap=0)
    _refused(SsfnConfig, "algorithm.tolerance must be in [0, 1), not -1e-05", tolerance=-1e-5)
    _refused(DssfnAsyncConfig, "algorithm.eta must be in (0, 1], not 0.0", eta=0.0)
    _refused(DssfnAsyncConfig, "algorithm.eta must be in (0, 1], not 1.5", eta=1.5)
    DssfnAsyncConfig(eta=1.0)
