"""Virtual time of the synchronous mini-batch algorithms in the simulator."""

from __future__ import annotations

import math

import pytest

from murmur.config import build_config
from murmur.experiment import run
from murmur.training.setup import prepare


def _config(name: str, **timing):
    return build_config(
        {
            "run": {"iterations": 20, "eval_every": 10},
            "data": {"dataset": "blobs", "batch_size": 8},
            "model": {"name": "mlp", "hidden": [6]},
            "topology": {"graph": "ring", "agents": 4},
            "timing": timing,
            "algorithm": {"name": name},
        }
    )


def test_dsgd_pays_one_compute_and_one_message_time_per_iteration():
    config = _config("dsgd", flops_per_second=1e6, latency=1e-3, bandwidth=1e6, stragglers=1)
    parameters = prepare(config).initial.shape[1]
    result = run(config)
    compute = 6 * parameters * 8 / 1e6 * config.timing.straggler_factor  # the straggler sets it
    message = 1e-3 + parameters * 4 / 1e6
    assert result.extra["virtual_seconds"] == pytest.approx(20 * (compute + message))


def test_an_iteration_without_events_costs_no_message_time():
    # v0 so large that no agent ever fires: only compute time.
    config = _config("detsgrad", flops_per_second=1e6).replace(**{"algorithm.v0": "1e9"})
    parameters = prepare(config).initial.shape[1]
    result = run(config)
    assert result.events == 0
    assert result.extra["virtual_seconds"] == pytest.approx(20 * 6 * parameters * 8 / 1e6)


def test_centralized_computes_all_agents_samples_and_sends_nothing():
    config = _config("centralized", flops_per_second=1e6)
    parameters = prepare(config).initial.shape[1]
    result = run(config)
    assert result.extra["virtual_seconds"] == pytest.approx(20 * 6 * parameters * 8 * 4 / 1e6)


def test_a_compressed_message_costs_the_time_of_its_encoded_size():
    """CHOCO-SGD with topk: ceil(0.1 P) values and int32 indices per message."""
    config = _config("choco-sgd", flops_per_second=1e6, latency=1e-3, bandwidth=1e6).replace(
        **{"algorithm.compress": "topk", "algorithm.fraction": "0.1"}
    )
    parameters = prepare(config).initial.shape[1]
    result = run(config)
    compute = 6 * parameters * 8 / 1e6
    message = 1e-3 + math.ceil(0.1 * parameters) * 8 / 1e6
    assert result.extra["virtual_seconds"] == pytest.approx(20 * (compute + message))
