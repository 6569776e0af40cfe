"""The LeNet-5 of ``model.name = "cnn"``: its shapes, the datasets it reads, and its
stacked gradients and evaluation against separate modules trained with autograd."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional

from murmur.errors import UsageError
from murmur.models import build_model
from murmur.models import stacked as stacked_module
from murmur.models.stacked import StackedModel
from murmur.sections import ModelConfig

CNN = ModelConfig(name="cnn")


@pytest.mark.parametrize(("features", "parameters"), [(784, 61706), (64, 19754)])
def test_the_cnn_reads_flat_image_rows(features, parameters):
    module = build_model(CNN, features, 10, seed=0)
    assert sum(p.numel() for p in module.parameters()) == parameters
    assert [type(layer) for layer in module[:4]] == [nn.Unflatten, nn.Conv2d, nn.ReLU, nn.MaxPool2d]
    assert module(torch.zeros(3, features)).shape == (3, 10)
    assert StackedModel(module, "classification")._fast is None  # not a Linear/ReLU stack


def test_the_cnn_of_mnist_is_lenet_5():
    module = build_model(CNN, 784, 10, seed=0)
    convolutions = [layer for layer in module if isinstance(layer, nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size, c.padding) for c in convolutions] == [
        (1, 6, (5, 5), (2, 2)),
        (6, 16, (5, 5), (0, 0)),
    ]
    linears = [layer for layer in module if isinstance(layer, nn.Linear)]
    assert [(f.in_features, f.out_features) for f in linears] == [(400, 120), (120, 84), (84, 10)]


def test_the_cnn_depends_on_the_seed_only():
    first, again, other = (build_model(CNN, 64, 10, seed=s) for s in (3, 3, 4))
    torch.testing.assert_close(first[1].weight, again[1].weight)
    assert not torch.equal(first[1].weight, other[1].weight)


@pytest.mark.parametrize("features", [10, 36, 785])
def test_the_cnn_refuses_rows_that_are_not_its_images(features):
    with pytest.raises(UsageError, match="cnn supports mnist5k, mnist, fashion-mnist") as error:
        build_model(CNN, features, 3, seed=0)
    assert "\n" not in str(error.value)


def _separate(module: nn.Module, stacked: StackedModel, flat, x, y):
    """Losses and gradients of one copy of ``module`` per row of ``flat``, by autograd."""
    losses, grads = [], []
    for row, values in enumerate(flat):
        copy = build_model(CNN, x.shape[2], 10, seed=1)
        with torch.no_grad():
            for param, value in zip(
                copy.parameters(), stacked.layout.unflatten(values[None]).values(), strict=True
            ):
                param.copy_(value[0])
        loss = functional.cross_entropy(copy(x[row]), y[row])
        loss.backward()
        losses.append(loss.detach())
        grads.append(torch.cat([p.grad.reshape(-1) for p in copy.parameters()]))
    return torch.stack(losses), torch.stack(grads)


@pytest.mark.parametrize("per_agent", [True, False], ids=["agent-by-agent", "vmap"])
@pytest.mark.parametrize(("features", "agents", "batch"), [(64, 4, 6), (784, 2, 3)])
def test_stacked_cnn_gradients_equal_separate_modules(features, agents, batch, per_agent):
    module = build_model(CNN, features, 10, seed=1)
    stacked = StackedModel(module, "classification")
    assert stacked.per_agent  # convolutions on the CPU go agent by agent unless told
    stacked.per_agent = per_agent
    generator = torch.Generator().manual_seed(2)
    flat = stacked.initial() + 0.05 * torch.randn(agents, stacked.layout.total, generator=generator)
    x = torch.randn(agents, batch, features, generator=generator)
    y = torch.randint(0, 10, (agents, batch), generator=generator)
    losses, grads = stacked.loss_and_grad(flat, x, y)
    expected_losses, expected_grads = _separate(module, stacked, flat, x, y)
    torch.testing.assert_close(losses, expected_losses)
    torch.testing.assert_close(grads, expected_grads, rtol=1e-4, atol=1e-6)
    assert grads.shape == (agents, stacked.layout.total) and bool(grads.abs().sum(dim=1).min())


def test_evaluation_in_slices_equals_separate_modules(monkeypatch):
    module = build_model(CNN, 64, 10, seed=1)
    stacked = StackedModel(module, "classification")
    generator = torch.Generator().manual_seed(3)
    flat = stacked.initial() + 0.3 * torch.randn(5, stacked.layout.total, generator=generator)
    x = torch.randn(40, 64, generator=generator)
    y = torch.randint(0, 10, (40,), generator=generator)
    whole = stacked.evaluate(flat, x, y)
    expected_accuracy, expected_loss = [], []
    for values in flat:
        params = {name: value[0] for name, value in stacked.layout.unflatten(values[None]).items()}
        outputs = torch.func.functional_call(module, params, x)
        expected_accuracy.append((outputs.argmax(dim=1) == y).double().mean())
        expected_loss.append(functional.cross_entropy(outputs, y))
    # Room for 2 agents on 7 samples per call: 3 agent chunks of 6 sample slices.
    units = stacked._activations(x)
    monkeypatch.setattr(stacked_module, "EVAL_FLOATS", 14 * units)
    sliced = StackedModel(module, "classification").evaluate(flat, x, y, chunk=2)
    for accuracy, loss in (whole, sliced):
        torch.testing.assert_close(accuracy, torch.stack(expected_accuracy))
        torch.testing.assert_close(loss, torch.stack(expected_loss))


def test_evaluation_keeps_one_call_of_the_mnist_cnn_small():
    stacked = StackedModel(build_model(CNN, 784, 10, seed=0), "classification")
    units = stacked._activations(torch.zeros(1, 784))
    # conv + ReLU outputs of 6 x 28 x 28 each dominate: over 15,000 values a sample,
    # so a test set of 1,000 samples takes one agent per call, 64 MB of activations.
    assert units > 15_000
    assert stacked_module.EVAL_FLOATS // (units * 1000) < 2


def test_a_model_on_a_device_takes_rows_from_anywhere_and_gives_them_back_there():
    module = build_model(CNN, 64, 10, seed=1)
    generator = torch.Generator().manual_seed(4)
    flat = StackedModel(module, "classification").initial().expand(3, -1).contiguous()
    x = torch.randn(3, 5, 64, generator=generator)
    y = torch.randint(0, 10, (3, 5), generator=generator)
    here = StackedModel(module, "classification")
    there = StackedModel(module, "classification", device="cpu")
    assert there.device == torch.device("cpu")
    pairs = [
        (there.loss_and_grad(flat, x, y), here.loss_and_grad(flat, x, y)),
        (there.evaluate(flat, x[0], y[0]), here.evaluate(flat, x[0], y[0])),
    ]
    for got, want in pairs:
        torch.testing.assert_close(got, want)
