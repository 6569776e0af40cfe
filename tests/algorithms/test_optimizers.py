"""Local optimizers: each agent's transform is torch.optim's for that agent alone, plain
SGD is left exactly as it was, momentum reaches the least-squares optimum that plain
SGD with the same steps does not, and bad settings are one line."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from small_runs import SMALL_SGD

from murmur.algorithms.asysg import AsysgConfig
from murmur.algorithms.centralized import Centralized, CentralizedConfig
from murmur.algorithms.detsgrad import Detsgrad
from murmur.algorithms.dsgd import Dsgd, DsgdConfig
from murmur.algorithms.optimizers import (
    LocalOptimizer,
    OptimizedState,
    OptimizerState,
    WithOptimizer,
    with_optimizer,
)
from murmur.algorithms.param_server import ParameterServer
from murmur.algorithms.schedules import Decaying
from murmur.cli import main
from murmur.config import build_config, load_experiment
from murmur.data.datasets import synthetic_optimum
from murmur.errors import UsageError
from murmur.experiment import run
from murmur.sim.faults import _field, _rows
from murmur.training.checkpoint import restore_tuple, to_plain
from murmur.training.plan import plan
from murmur.training.setup import prepare

AGENTS, SIZE, STEPS = 3, 7, 25
TORCH = {
    "momentum": lambda params, wd: torch.optim.SGD(params, lr=1.0, momentum=0.8, weight_decay=wd),
    "nesterov": lambda params, wd: torch.optim.SGD(
        params, lr=1.0, momentum=0.8, nesterov=True, weight_decay=wd
    ),
    "adam": lambda params, wd: torch.optim.Adam(
        params, lr=1.0, betas=(0.8, 0.99), eps=1e-6, weight_decay=wd
    ),
}


def _gradient(x: torch.Tensor, k: int) -> torch.Tensor:
    """A gradient that depends on where it is taken and on the step: a noisy quadratic."""
    noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(k), dtype=x.dtype)
    scales = torch.linspace(0.5, 3.0, x.shape[-1], dtype=x.dtype)
    return scales * (x - 1.0) + 0.3 * noise


@pytest.mark.parametrize("weight_decay", [0.0, 0.05])
@pytest.mark.parametrize("kind", list(TORCH))
def test_each_agents_direction_is_torch_optims_step_for_that_agent(kind, weight_decay):
    config = CentralizedConfig(
        a=0.05, d2=0.5, eps=0.1, optimizer=kind, beta1=0.8, beta2=0.99, adam_eps=1e-6
    )
    config = dataclasses.replace(config, weight_decay=weight_decay)
    algorithm = with_optimizer(Centralized(config), config)
    assert isinstance(algorithm, WithOptimizer)
    start = torch.randn(AGENTS, SIZE, generator=torch.Generator().manual_seed(1)).double()
    state = algorithm.init(start)
    own = [start[agent].clone().requires_grad_() for agent in range(AGENTS)]
    optimizers = [TORCH[kind]([param], weight_decay) for param in own]
    schedule = config.gradient_step()
    for k in range(STEPS):
        x = algorithm.params(state)
        grads = torch.stack([_gradient(x[agent], k * AGENTS + agent) for agent in range(AGENTS)])
        state = algorithm.step(state, grads, k, transport=None)  # type: ignore[arg-type]
        for agent, (param, optimizer) in enumerate(zip(own, optimizers, strict=True)):
            optimizer.param_groups[0]["lr"] = schedule(k)
            param.grad = _gradient(param.detach(), k * AGENTS + agent)
            optimizer.step()
    expected = torch.stack([param.detach() for param in own])
    torch.testing.assert_close(algorithm.params(state), expected, rtol=1e-12, atol=1e-12)
    assert not torch.equal(algorithm.params(state), start)


def test_weight_decay_alone_is_torch_sgds():
    config = CentralizedConfig(a=0.1, d2=0.0, weight_decay=0.5)
    algorithm = with_optimizer(Centralized(config), config)
    x = torch.ones(2, 3)
    state = algorithm.init(x)
    grads = torch.full((2, 3), 0.2)
    state = algorithm.step(state, grads, 0, transport=None)  # type: ignore[arg-type]
    torch.testing.assert_close(algorithm.params(state), x - 0.1 * (0.2 + 0.5 * x))
    assert state.optimizer == OptimizerState()  # keeps no buffers


def test_plain_sgd_builds_the_algorithm_itself_and_others_wrap_it():
    def built(*settings: str):
        config = load_experiment("dsgd", [*SMALL_SGD, *settings]).runs[0][1]
        return prepare(config).algorithm

    assert type(built()) is Dsgd
    assert type(built("algorithm.optimizer=sgd", "algorithm.warmup=0")) is Dsgd
    assert type(built("algorithm.warmup=5")) is Dsgd  # the warm-up is in the step schedule
    assert type(built("algorithm.weight_decay=0.01")) is WithOptimizer
    wrapped = built("algorithm.optimizer=momentum")
    assert isinstance(wrapped, WithOptimizer) and type(wrapped.inner) is Dsgd


@pytest.mark.parametrize("preset", ["dsgd", "detsgrad"])
def test_explicit_sgd_gives_the_default_runs_numbers_bit_for_bit(preset):
    default = run(load_experiment(preset, SMALL_SGD).runs[0][1])
    explicit = [
        "algorithm.optimizer=sgd",
        "algorithm.weight_decay=0",
        "algorithm.warmup=0",
        "algorithm.beta1=0.5",  # unused by sgd
    ]
    config = load_experiment(preset, [*SMALL_SGD, *explicit]).runs[0][1]
    assert isinstance(prepare(config).algorithm, Dsgd | Detsgrad)
    same = run(config)
    assert torch.equal(same.parameters, default.parameters)
    assert same.events == default.events
    momentum = run(config.replace(**{"algorithm.optimizer": "momentum"}))
    assert not torch.equal(momentum.parameters, default.parameters)


def test_no_warm_up_computes_todays_floats_and_a_warm_up_ramps_linearly():
    for scale, exponent, eps in [(0.1, 1.0, 1e-5), (0.3, 0.5, 0.01), (1e-3, 2.0, 0.2)]:
        schedule = Decaying(scale, exponent, eps)
        for k in [0, 1, 2, 7, 100, 12345, 10**9]:
            assert schedule(k) == scale / (eps * k + 1.0) ** exponent
            assert Decaying(scale, exponent, eps, warmup=1)(k) == schedule(k)
    warm = Decaying(0.1, 0.0, 0.0, warmup=4)
    assert [warm(k) for k in range(6)] == [0.025, 0.05, 0.1 * 0.75, 0.1, 0.1, 0.1]
    config = DsgdConfig(a=0.2, d2=1.0, eps=0.1, warmup=3)
    assert config.gradient_step()(1) == pytest.approx(0.2 / 1.1 * 2 / 3)


# ---- momentum on least squares -------------------------------------------------------------


def _least_squares(optimizer: str) -> float:
    """Relative distance of centralized SGD's model to the least-squares optimum."""
    config = build_config(
        {
            "run": {"iterations": 300, "eval_every": 300},
            "data": {"dataset": "synthetic", "batch_size": 32},
            "model": {"name": "linear"},
            "topology": {"agents": 4},
            "algorithm": {
                "name": "centralized",
                "a": 0.005,
                "eps": 0.01,
                "optimizer": optimizer,
                "beta1": 0.9,
            },
        }
    )
    result = run(config)
    weight, bias = synthetic_optimum(prepare(config).dataset)
    optimum = torch.cat([weight.reshape(-1), bias]).to(result.parameters.dtype)
    return float(torch.linalg.vector_norm(result.parameters[0] - optimum) / optimum.norm())


def test_momentum_reaches_the_least_squares_optimum_that_plain_sgd_misses():
    plain, momentum, nesterov = (_least_squares(kind) for kind in ("sgd", "momentum", "nesterov"))
    assert momentum < 1e-3, momentum
    assert nesterov < 1e-3, nesterov
    assert plain > 0.1, plain  # the same steps, without momentum, are far from it


# ---- the parameter server -----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["momentum", "adam"])
def test_the_servers_optimizer_is_torch_optims_on_its_one_model(kind):
    config = AsysgConfig(workers=2, a=0.05, d2=0.0, optimizer=kind, beta1=0.8, beta2=0.99)
    config = dataclasses.replace(config, adam_eps=1e-6, weight_decay=0.01)
    start = torch.randn(SIZE, generator=torch.Generator().manual_seed(2)).double()
    server = ParameterServer(config, start, iterations=STEPS, eval_every=STEPS, batch_size=1)
    param = start.clone().requires_grad_()
    optimizer = TORCH[kind]([param], 0.01)
    optimizer.param_groups[0]["lr"] = 0.05
    for k in range(STEPS):
        x, version = server.read()
        server.receive(k % 2, _gradient(x, k), version)
        param.grad = _gradient(param.detach(), k)
        optimizer.step()
    torch.testing.assert_close(server.x, param.detach(), rtol=1e-12, atol=1e-12)
    saved = server.state_dict()
    again = ParameterServer(config, start, iterations=STEPS, eval_every=STEPS, batch_size=1)
    again.load_state_dict(saved)
    assert again.optimizer_state is not None and server.optimizer_state is not None
    assert torch.equal(again.optimizer_state.moment, server.optimizer_state.moment)


def test_a_plain_servers_checkpoint_holds_no_optimizer():
    server = ParameterServer(AsysgConfig(), torch.zeros(3), 5, 5, batch_size=1)
    assert server.optimizer is None and "optimizer" not in server.state_dict()


# ---- state records ------------------------------------------------------------------------


def test_nested_state_records_are_saved_and_rebuilt_from_their_template():
    config = DsgdConfig(optimizer="adam")
    optimizer = LocalOptimizer(config)
    params = torch.randn(3, 4)
    state = OptimizedState(Dsgd(config, _ring()).init(params), optimizer.init(params))
    state.optimizer.moment.add_(2.0)
    state.optimizer.steps.add_(5)
    plain = to_plain(state)
    assert set(plain) == {"inner", "optimizer"} and set(plain["inner"]) == {"x"}
    template = OptimizedState(Dsgd(config, _ring()).init(params * 0), optimizer.init(params))
    restored = restore_tuple(template, plain)
    assert type(restored) is OptimizedState and type(restored.optimizer) is OptimizerState
    assert type(restored.inner) is type(state.inner)
    assert torch.equal(restored.inner.x, state.inner.x)
    assert torch.equal(restored.optimizer.steps, torch.full((3,), 5))
    assert restored.optimizer.moment is not None and bool((restored.optimizer.moment == 2).all())
    with pytest.raises(UsageError, match="fields"):
        restore_tuple(template, {**plain, "optimizer": {"moment": None}})


def test_a_crashed_agents_optimizer_rows_are_found_in_the_nested_state():
    params = torch.randn(4, 3)
    optimizer = LocalOptimizer(DsgdConfig(optimizer="adam"))
    state = OptimizedState(Dsgd(DsgdConfig(), _ring()).init(params), optimizer.init(params))
    crashed = torch.tensor([False, True, False, True])
    kept = _rows(state, crashed)
    assert set(kept) == {(0, 0), (1, 0), (1, 1), (1, 2)}
    assert _field(state, (1, 2)) is state.optimizer.steps


def _ring():
    from murmur.topology import ring

    return ring(4)


# ---- what is refused ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("algorithm.beta1=1.0", "algorithm.beta1 must be in [0, 1), not 1"),
        ("algorithm.beta2=-0.1", "algorithm.beta2 must be in [0, 1), not -0.1"),
        ("algorithm.weight_decay=-0.01", "algorithm.weight_decay must be >= 0, not -0.01"),
        ("algorithm.adam_eps=0", "algorithm.adam_eps must be positive, not 0"),
        ("algorithm.warmup=-3", "algorithm.warmup must be >= 0 iterations, not -3"),
        ("algorithm.milestones=[30, 20]", "algorithm.milestones must increase, not [30, 20]"),
        ("algorithm.milestones=[0]", "algorithm.milestones must be >= 1, not 0"),
        ("algorithm.decay=0", "algorithm.decay must be in (0, 1], not 0"),
        ("algorithm.optimizer=lion", "algorithm.optimizer"),
    ],
)
def test_bad_optimizer_settings_are_one_line_and_exit_2(capsys, setting, message):
    assert main(["run", "dsgd", "--set", setting, "--check"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_a_python_config_with_an_unknown_optimizer_is_refused():
    with pytest.raises(UsageError, match="algorithm.optimizer must be one of sgd, momentum"):
        DsgdConfig(optimizer="lion")  # type: ignore[arg-type]


@pytest.mark.parametrize("setting", ["algorithm.optimizer=adam", "algorithm.weight_decay=0.1"])
def test_hogwild_refuses_an_optimizer_before_anything_is_built(setting):
    config = load_experiment("hogwild", [setting]).runs[0][1]
    with pytest.raises(UsageError, match="hogwild cannot take algorithm.* one shared model"):
        plan(config)


def test_every_other_mini_batch_algorithm_plans_with_an_optimizer():
    for preset in ["dsgd", "detsgrad", "detsgrad-gt", "choco-sgd", "sparq-sgd", "centralized"]:
        plan(load_experiment(preset, [*SMALL_SGD, "algorithm.optimizer=adam"]).runs[0][1])
    for preset in ["asysg-con", "asysg-incon"]:
        plan(load_experiment(preset, ["algorithm.optimizer=nesterov"]).runs[0][1])


def test_the_memory_estimate_counts_the_optimizers_buffers():
    from murmur.data import DATASETS
    from murmur.training.memory import estimate_memory, parameter_count

    def parts(*settings: str) -> dict[str, int]:
        config = load_experiment("dsgd", [*SMALL_SGD, *settings]).runs[0][1]
        return estimate_memory(config, DATASETS["blobs"]).parts

    config = load_experiment("dsgd", SMALL_SGD).runs[0][1]
    size = 6 * parameter_count(config, DATASETS["blobs"]) * 4
    assert "the optimizer's state" not in parts()
    assert parts("algorithm.optimizer=momentum")["the optimizer's state"] == size
    assert parts("algorithm.optimizer=adam")["the optimizer's state"] == 2 * size
    assert parts("algorithm.weight_decay=0.1")["the optimizer's state"] == 0
