"""Batch norm on the agent axis: each agent's running statistics follow its own
mini-batches exactly as one module's would, its evaluations use them, and the
average model uses their mean."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.func import functional_call

from murmur.models.stacked import StackedModel
from murmur.models.statistics import AgentStatistics


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))


def _cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Unflatten(1, (1, 4, 4)),
        nn.Conv2d(1, 2, 3),
        nn.BatchNorm2d(2),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(8, 3),
    )


def _alone(module: nn.Module, row: torch.Tensor, model: StackedModel) -> nn.Module:
    """A plain copy of ``module`` holding the parameter ``row``."""
    plain = copy.deepcopy(module)
    pieces = model.layout.unflatten(row[None]).values()
    for tensor, piece in zip(plain.parameters(), pieces, strict=True):
        tensor.data.copy_(piece[0])
    return plain


@pytest.mark.parametrize("build", [_mlp, _cnn], ids=["vmapped", "agent-by-agent"])
def test_each_agent_keeps_the_statistics_one_module_would_on_its_batches(build):
    module = build()
    model = StackedModel(copy.deepcopy(module), "classification")
    generator = torch.Generator().manual_seed(1)
    flat = model.initial().repeat(3, 1) + 0.05 * torch.randn(
        3, model.layout.total, generator=generator
    )
    plains = [_alone(module, flat[agent], model).train() for agent in range(3)]
    for _ in range(2):  # two steps: the count and the momentum average move on
        x = torch.randn(3, 5, 16 if build is _cnn else 6, generator=generator)
        y = torch.randint(0, 3, (3, 5), generator=generator)
        _, grads = model.loss_and_grad(flat, x, y)
        for agent, plain in enumerate(plains):
            plain.zero_grad()
            nn.functional.cross_entropy(plain(x[agent]), y[agent]).backward()
            expected = torch.cat([p.grad.reshape(-1) for p in plain.parameters()])
            torch.testing.assert_close(grads[agent], expected)
    kept = model.statistics
    assert kept is not None and kept.per_agent is not None
    for agent, plain in enumerate(plains):
        for name, buffer in plain.named_buffers():
            torch.testing.assert_close(kept.per_agent[name][agent], buffer, rtol=0, atol=1e-6)
    assert (
        int(
            kept.per_agent["2.num_batches_tracked" if build is _cnn else "1.num_batches_tracked"][0]
        )
        == 2
    )


def test_evaluations_use_each_agents_statistics_and_the_average_their_mean():
    module = _mlp()
    model = StackedModel(copy.deepcopy(module), "classification")
    generator = torch.Generator().manual_seed(2)
    flat = model.initial().repeat(2, 1)
    model.loss_and_grad(
        flat, 3 * torch.randn(2, 7, 6, generator=generator), torch.zeros(2, 7, dtype=torch.long)
    )
    kept = model.statistics
    assert kept is not None and kept.per_agent is not None
    mean_first = kept.per_agent["1.running_mean"].mean(dim=0)
    assert not torch.equal(kept.per_agent["1.running_mean"][0], kept.per_agent["1.running_mean"][1])
    x, y = torch.randn(9, 6, generator=generator), torch.randint(0, 3, (9,), generator=generator)
    _, losses = model.evaluate(flat, x, y)
    _, average = model.evaluate(flat[:1], x, y)
    plain = _alone(module, flat[0], model).eval()
    params = dict(plain.named_parameters())
    for agent in range(2):
        buffers = {name: tensor[agent] for name, tensor in kept.per_agent.items()}
        outputs = functional_call(plain, {**params, **buffers}, (x,))
        torch.testing.assert_close(losses[agent], nn.functional.cross_entropy(outputs, y))
    assert not torch.allclose(losses[0], losses[1])
    torch.testing.assert_close(kept.mean()["1.running_mean"], mean_first)
    outputs = functional_call(plain, {**params, **kept.mean()}, (x,))
    torch.testing.assert_close(average[0], nn.functional.cross_entropy(outputs, y))


def test_statistics_round_trip_through_a_checkpoint_and_refuse_another_networks():
    model = StackedModel(_mlp(), "classification")
    flat = model.initial().repeat(3, 1)
    assert model.statistics is not None and model.statistics.state_dict() == {}
    model.loss_and_grad(flat, torch.randn(3, 4, 6), torch.zeros(3, 4, dtype=torch.long))
    saved = model.statistics.state_dict()
    again = AgentStatistics(_mlp())
    again.load_state_dict(saved)
    assert again.per_agent is not None
    for name, tensor in saved.items():
        assert (
            torch.equal(again.per_agent[name], tensor)
            and again.per_agent[name].dtype == tensor.dtype
        )
    assert torch.equal(again.flat(), model.statistics.flat())
    assert torch.equal(
        again.stacked(again.flat())["1.num_batches_tracked"], saved["1.num_batches_tracked"]
    )
    with pytest.raises(ValueError, match="saved statistics"):
        again.load_state_dict({"other": torch.zeros(3)})
    with pytest.raises(ValueError, match="statistics of 3 agents, not 2"):
        model.loss_and_grad(flat[:2], torch.randn(2, 4, 6), torch.zeros(2, 4, dtype=torch.long))


def test_a_network_without_running_statistics_keeps_none():
    plain = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3, track_running_stats=False))
    model = StackedModel(plain, "classification")
    assert model.statistics is None and model.layout.total == 4 * 3 + 3 + 3 + 3
