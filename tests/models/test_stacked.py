"""The vectorized gradients equal a plain loop of per-model autograd."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional

from murmur.config import ModelConfig
from murmur.models import build_model
from murmur.models.stacked import StackedModel


def _loop_gradients(module: nn.Module, stacked: StackedModel, flat, x, y):
    grads, losses = [], []
    for agent in range(flat.shape[0]):
        copy = build_model(ModelConfig(hidden=(7, 5)), 6, 3, seed=0)
        with torch.no_grad():
            for param, value in zip(
                copy.parameters(),
                stacked.layout.unflatten(flat[agent : agent + 1]).values(),
                strict=True,
            ):
                param.copy_(value[0])
        loss = functional.cross_entropy(copy(x[agent]), y[agent])
        loss.backward()
        grads.append(torch.cat([p.grad.reshape(-1) for p in copy.parameters()]))
        losses.append(loss.detach())
    return torch.stack(losses), torch.stack(grads)


def test_stacked_gradients_match_a_loop_over_separate_models():
    module = build_model(ModelConfig(hidden=(7, 5)), 6, 3, seed=0)
    stacked = StackedModel(module, "classification")
    generator = torch.Generator().manual_seed(1)
    flat = torch.randn(4, stacked.layout.total, generator=generator)
    x = torch.randn(4, 9, 6, generator=generator)
    y = torch.randint(0, 3, (4, 9), generator=generator)
    losses, grads = stacked.loss_and_grad(flat, x, y)
    expected_losses, expected_grads = _loop_gradients(module, stacked, flat, x, y)
    torch.testing.assert_close(losses, expected_losses)
    torch.testing.assert_close(grads, expected_grads)


def test_evaluate_gives_each_rows_accuracy_on_the_shared_test_set():
    module = nn.Linear(2, 2)
    stacked = StackedModel(module, "classification")
    # Row 0 predicts class = argmax(x); row 1 the opposite.
    identity = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0])
    flipped = torch.tensor([0.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    x = torch.tensor([[2.0, 0.0], [0.0, 3.0], [1.0, 0.5]])
    y = torch.tensor([0, 1, 1])
    accuracy, _ = stacked.evaluate(torch.stack([identity, flipped]), x, y, chunk=1)
    torch.testing.assert_close(accuracy, torch.tensor([2 / 3, 1 / 3], dtype=torch.float64))


def test_flat_layout_round_trips():
    module = build_model(ModelConfig(hidden=(4,)), 3, 2, seed=5)
    stacked = StackedModel(module, "classification")
    flat = stacked.initial()
    assert flat.shape == (3 * 4 + 4 + 4 * 2 + 2,)
    views = stacked.layout.unflatten(flat.expand(2, -1).contiguous())
    torch.testing.assert_close(stacked.layout.stack(views)[1], flat)
    torch.testing.assert_close(views["0.weight"][0], module[0].weight.detach())


def _vmap_only(module: nn.Module, task) -> StackedModel:
    stacked = StackedModel(module, task)
    stacked._fast = None
    return stacked


def test_linear_relu_stacks_take_the_hand_derived_path():
    assert StackedModel(build_model(ModelConfig(hidden=(7, 5)), 6, 3, seed=0), "regression")._fast
    assert StackedModel(nn.Linear(4, 2, bias=False), "classification")._fast
    assert (
        StackedModel(nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2)), "regression")._fast
        is None
    )
    assert StackedModel(nn.Sequential(nn.Linear(4, 3), nn.ReLU()), "regression")._fast is None


def test_hand_derived_gradients_equal_torch_func_for_both_tasks():
    generator = torch.Generator().manual_seed(3)
    cases = [
        (build_model(ModelConfig(hidden=(7, 5)), 6, 3, seed=0), "classification"),
        (build_model(ModelConfig(hidden=(8,)), 6, 2, seed=1), "regression"),
        (nn.Linear(6, 3, bias=False), "regression"),
    ]
    for module, task in cases:
        fast, reference = StackedModel(module, task), _vmap_only(module, task)
        flat = torch.randn(5, fast.layout.total, generator=generator)
        x = torch.randn(5, 11, 6, generator=generator)
        if task == "classification":
            y = torch.randint(0, 3, (5, 11), generator=generator)
        else:
            y = torch.randn(5, 11, module(x[0]).shape[-1], generator=generator)
        losses, grads = fast.loss_and_grad(flat, x, y)
        expected_losses, expected_grads = reference.loss_and_grad(flat, x, y)
        torch.testing.assert_close(losses, expected_losses)
        torch.testing.assert_close(grads, expected_grads)


def test_hand_derived_path_reuses_its_gradient_buffer():
    stacked = StackedModel(build_model(ModelConfig(hidden=(4,)), 3, 2, seed=5), "classification")
    flat = torch.randn(2, stacked.layout.total)
    x, y = torch.randn(2, 4, 3), torch.tensor([[0, 1, 1, 0], [1, 1, 0, 0]])
    _, first = stacked.loss_and_grad(flat, x, y)
    _, second = stacked.loss_and_grad(flat + 1, x, y)
    assert first.data_ptr() == second.data_ptr()
