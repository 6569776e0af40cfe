"""The parameter server's rule on its own, without a clock or a wire.

Steps of 0.5 and integer gradients: every number below is exact in float32.
"""

from __future__ import annotations

import pytest
import torch

from murmur.algorithms.asysg import (
    AsysgConfig,
    AsysgInconConfig,
    SyncPsConfig,
    inconsistent_read,
)
from murmur.algorithms.param_server import Arrival, ParameterServer, model_metrics
from murmur.config import ModelConfig
from murmur.models import build_model
from murmur.models.stacked import StackedModel

STEP = {"a": 0.5, "d2": 0.0}


def _server(config, iterations=10, eval_every=100, **options) -> ParameterServer:
    return ParameterServer(config, torch.zeros(2), iterations, eval_every, batch_size=3, **options)


def _g(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def test_asysg_con_applies_the_mean_of_m_gradients_and_answers_the_pusher():
    server = _server(AsysgConfig(workers=3, group=2, **STEP))
    assert server.receive(1, _g(2, 4), 0) == Arrival(applied=False, evaluate=False, answer=(1,))
    assert server.receive(0, _g(4, 0), 0) == Arrival(applied=True, evaluate=False, answer=(0,))
    assert torch.equal(server.x, _g(-1.5, -1.0)) and server.version == 1
    server.receive(2, _g(0, 0), 0)  # read before the update: staleness 1
    server.receive(1, _g(0, 0), 1)
    assert server.staleness() == {"mean": 0.25, "max": 1, "histogram": [3, 1]}
    assert server.pushes == [1, 2, 1] and server.gradients == 4


def test_sync_ps_holds_every_answer_until_the_update():
    server = _server(SyncPsConfig(workers=3, **STEP))
    assert server.receive(2, _g(1, 1), 0).answer == ()
    assert server.receive(0, _g(1, 1), 0).answer == ()
    arrival = server.receive(1, _g(1, 1), 0)
    assert arrival.applied and arrival.answer == (2, 0, 1)
    assert torch.equal(server.x, _g(-0.5, -0.5))


def test_gradients_are_stacked_in_arrival_order_or_in_worker_order():
    """Three gradients whose float32 sum depends on the order of addition."""
    big, small = 2.0**24, 1.0
    gradients = {0: _g(small, 0), 1: _g(big, 0), 2: _g(-big, 0)}
    sums = {}
    for ordered in (False, True):
        server = _server(SyncPsConfig(workers=3, a=1.0, d2=0.0), order_by_worker=ordered)
        for worker in (1, 2, 0):
            server.receive(worker, gradients[worker], 0)
        sums[ordered] = server.x.clone()
    by_arrival = -torch.stack([gradients[1], gradients[2], gradients[0]]).mean(dim=0)
    by_worker = -torch.stack([gradients[0], gradients[1], gradients[2]]).mean(dim=0)
    assert torch.equal(sums[False], by_arrival) and torch.equal(sums[True], by_worker)
    assert not torch.equal(by_arrival, by_worker)


def test_evaluations_the_target_and_the_end():
    server = _server(AsysgConfig(workers=1, target_loss=0.5, **STEP), iterations=5, eval_every=2)
    due = [server.receive(0, _g(1, 1), v).evaluate for v in range(3)]
    assert due == [False, True, False] and not server.done
    record = server.record({"wall_seconds": 1.0}, {"train_loss": 0.7})
    assert not server.reached(record) and not server.done
    arrival = server.receive(0, _g(1, 1), 3)
    record = server.record({"wall_seconds": 2.0}, {"train_loss": 0.4})
    assert server.answers(arrival, lambda: record) == () and server.done
    assert server.receive(0, _g(1, 1), 4) == Arrival(False, False, ())  # ignored
    extra = server.extra("wall_seconds")
    assert extra["iterations_to_target"] == 4 and extra["wall_seconds_to_target"] == 2.0
    assert record["samples"] == 4 * 3 and record["events_per_agent"] == [4]


def test_the_last_update_is_evaluated_and_ends_the_run():
    server = _server(AsysgConfig(workers=2, **STEP), iterations=3, eval_every=100)
    arrivals = [server.receive(0, _g(0, 0), v) for v in range(3)]
    assert [a.evaluate for a in arrivals] == [False, False, True] and server.done


def test_a_read_of_a_version_the_server_never_had_is_refused():
    server = _server(AsysgConfig(workers=2, **STEP))
    with pytest.raises(ValueError, match="a gradient of version 1 of 0"):
        server.receive(0, _g(1, 1), 1)
    assert server.gradients == 0 and server.pushes == [0, 0]


def test_messages_and_bytes_count_pushes_and_models_sent():
    server = _server(AsysgConfig(workers=2, **STEP))
    server.receive(0, _g(1, 1), 0)
    server.sent()
    record = server.record({}, {})
    assert (record["events"], record["messages"], record["bytes"]) == (1, 2, 2 * 2 * 4)


def test_asysg_incon_sends_nothing_and_reads_mix_versions():
    reads = torch.Generator().manual_seed(0)
    server = _server(AsysgInconConfig(workers=2, max_delay=2, **STEP), reads=reads)
    for version in range(3):
        assert server.receive(0, _g(1, 1), version).answer == ()
    assert len(server.history) == 3  # the last T + 1 versions: -0.5, -1.0, -1.5
    record = server.record({}, {})
    assert record["messages"] == 0 and record["events_per_agent"] == [0, 0]
    seen = set()
    for _ in range(20):
        model, version = server.read()
        assert version == 3
        seen |= set(model.tolist())
    assert seen <= {-0.5, -1.0, -1.5} and len(seen) > 1


def test_staleness_of_no_update_is_zero_and_the_mean_weights_each_tau_by_its_count():
    """No gradient applied: mean 0, max 0, histogram [0]; taus 0, 1, 2, 2 have mean 5/4."""
    server = _server(AsysgConfig(workers=3, **STEP))
    assert server.staleness() == {"mean": 0.0, "max": 0, "histogram": [0]}
    for worker, read in ((0, 0), (1, 0), (2, 0), (0, 1)):
        server.receive(worker, _g(0, 0), read)
    assert server.staleness() == {"mean": 1.25, "max": 2, "histogram": [1, 1, 2]}


def test_a_record_holds_exactly_the_counts_the_clock_and_the_metrics():
    """The record's keys and values after one applied push and one model sent."""
    server = _server(AsysgConfig(workers=2, **STEP))
    server.receive(1, _g(1, 1), 0)
    server.sent()
    record = server.record({"wall_seconds": 1.5}, {"train_loss": 0.25})
    assert record == {
        "iteration": 1,
        "samples": 3,
        "wall_seconds": 1.5,
        "train_loss": 0.25,
        "events": 1,
        "messages": 2,
        "bytes": 2 * 2 * 4,
        "events_per_agent": [0, 1],
        "staleness_mean": 0.0,
    }
    assert server.last_record is record


def test_the_extra_summary_names_every_field_and_the_clock_to_target():
    """workers, group, staleness, losses, the target's iteration and time, models sent."""
    server = _server(AsysgConfig(workers=2, group=2, target_loss=0.5, **STEP), eval_every=1)
    server.receive(0, _g(1, 1), 0)
    arrival = server.receive(1, _g(1, 1), 0)
    server.answers(arrival, lambda: server.record({"virtual_seconds": 4.0}, {"train_loss": 0.5}))
    server.sent(3)
    assert server.extra("virtual_seconds") == {
        "workers": 2,
        "group": 2,
        "staleness": {"mean": 0.0, "max": 0, "histogram": [2]},
        "train_loss": 0.5,
        "target_loss": 0.5,
        "iterations_to_target": 1,
        "virtual_seconds_to_target": 4.0,
        "server_messages": 3,
    }


def test_the_target_is_reached_at_equality_and_a_zero_target_never_ends_the_run():
    """train_loss <= target ends the run (True once); target 0 means no target, even at loss 0."""
    server = _server(AsysgConfig(workers=1, target_loss=0.5, **STEP))
    assert server.reached({"train_loss": 0.5}) is True and server.done
    assert server.reached({"train_loss": 0.1}) is False
    assert server.target_record == {"train_loss": 0.5}
    untargeted = _server(AsysgConfig(workers=1, **STEP))
    assert untargeted.reached({"train_loss": 0.0}) is False and not untargeted.done


def test_the_outcome_names_the_topology_and_counts_agents_bytes_and_samples():
    """A parameter server or shared memory; samples = gradients x batch size."""
    server = _server(SyncPsConfig(workers=2, **STEP))
    server.receive(0, _g(1, 1), 0)
    server.receive(1, _g(1, 1), 0)
    server.sent(2)
    server.record({}, {"train_loss": 1.0})
    outcome = server.outcome(0.5, {"k": 1})
    assert (outcome.agents, outcome.topology) == (2, "parameter server")
    assert (outcome.messages, outcome.bytes, outcome.samples) == (4, 4 * 2 * 4, 2 * 3)
    assert outcome.iterations == 1 and outcome.extra == {"k": 1}
    incon = _server(AsysgInconConfig(workers=2, **STEP), reads=torch.Generator())
    incon.record({}, {"train_loss": 1.0})
    assert incon.outcome(0.5, {}).topology == "shared memory"


def test_gradients_are_stacked_in_arrival_order_unless_asked_otherwise():
    """Without order_by_worker, the float32 mean is that of the arrival order."""
    big = 2.0**24
    server = _server(SyncPsConfig(workers=3, a=1.0, d2=0.0))
    for worker, gradient in ((1, _g(big, 0)), (2, _g(-big, 0)), (0, _g(1, 0))):
        server.receive(worker, gradient, 0)
    expected = -torch.stack([_g(big, 0), _g(-big, 0), _g(1, 0)]).mean(dim=0)
    assert torch.equal(server.x, expected)


def test_ordering_by_worker_keeps_two_gradients_of_one_worker_in_arrival_order():
    """The sort looks at the worker only, so one worker's two gradients in a group are fine."""
    server = _server(AsysgConfig(workers=2, group=2, **STEP), order_by_worker=True)
    server.receive(1, _g(2, 0), 0)
    server.receive(1, _g(0, 2), 0)
    assert torch.equal(server.x, _g(-0.5, -0.5))


def test_a_float64_gradient_is_rounded_to_the_models_dtype_before_the_step():
    """1 - (-(2^-24 + 2^-50)): rounded first, the float32 sum is a tie and stays 1.0."""
    server = ParameterServer(
        AsysgConfig(workers=1, a=1.0, d2=0.0), torch.ones(1), 5, 100, batch_size=1
    )
    server.receive(0, torch.tensor([-(2.0**-24 + 2.0**-50)], dtype=torch.float64), 0)
    assert server.x.dtype == torch.float32 and server.x.item() == 1.0


def test_shared_memory_reads_draw_from_the_servers_generator():
    """Mixed reads are those of inconsistent_read with the generator handed in."""
    config = AsysgInconConfig(workers=1, max_delay=2, **STEP)
    server = ParameterServer(
        config, torch.zeros(64), 5, 100, batch_size=1, reads=torch.Generator().manual_seed(9)
    )
    for version in range(2):
        server.receive(0, torch.arange(64.0), version)
    expected = inconsistent_read(list(server.history), torch.Generator().manual_seed(9))
    assert torch.equal(server.read()[0], expected)


def test_shared_memory_without_a_generator_is_refused_and_a_fresh_server_needs_an_evaluation():
    """asysg-incon needs its reads' generator; nothing is evaluated before the first record."""
    with pytest.raises(ValueError, match="^asysg-incon needs a generator for its mixed reads$"):
        _server(AsysgInconConfig(workers=1, **STEP))
    assert _server(AsysgConfig(workers=1, **STEP)).final_evaluation_due


def test_the_gradient_norm_is_that_of_the_mean_training_loss_and_changes_nothing():
    torch.manual_seed(0)
    module = build_model(ModelConfig(hidden=(5,)), 4, 3, seed=0)
    model = StackedModel(module, "classification")
    x = model.initial()
    inputs, targets = torch.randn(12, 4), torch.randint(0, 3, (12,))
    loss = torch.nn.functional.cross_entropy(module(inputs), targets)
    expected = sum(float(g.square().sum()) for g in torch.autograd.grad(loss, module.parameters()))
    before = x.clone()
    data = (inputs, targets)
    metrics = model_metrics(model, x, data, data, gradient_norm=True)
    assert metrics["gradient_norm_squared"] == pytest.approx(expected, rel=1e-5)
    assert expected > 0 and torch.equal(x, before)
    assert "gradient_norm_squared" not in model_metrics(model, x, data, data)
