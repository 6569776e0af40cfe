"""Small networks every agent trains a copy of."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator

import torch
from torch import nn

from murmur.errors import UsageError
from murmur.sections import ModelConfig

IMAGE_SHAPES: dict[int, tuple[int, int, int]] = {784: (1, 28, 28), 64: (1, 8, 8)}
"""The image (channels, height, width) the ``cnn`` model reads from each row's feature
count: 784 for mnist5k, mnist and fashion-mnist, 64 for digits."""

CNN_DATASETS = "mnist5k, mnist, fashion-mnist (28x28) and digits (8x8)"


FACTORIES: dict[str, Callable[..., object]] = {}
"""The functions of ``model.factory``, by that setting, once their plugins are imported
(:mod:`murmur.plugins`)."""


def build_model(config: ModelConfig, features: int, outputs: int, seed: int) -> nn.Module:
    """The network of ``config`` for ``features`` inputs and ``outputs`` outputs.

    The initial weights depend only on ``seed`` (the global torch generator is
    left as it was). ``cnn`` needs image rows (see :data:`IMAGE_SHAPES`);
    UsageError otherwise.
    """
    if config.name == "custom":
        raise UsageError(
            "model.name = custom stands for a torch.nn.Module given from Python "
            "(murmur.run(config, model=module)); a config alone cannot build it: "
            "pass the module again, or use model.name = mlp, linear or cnn"
        )
    if config.name == "cnn" and features not in IMAGE_SHAPES:
        raise UsageError(
            f"model.name = cnn reads images, and a dataset with {features} features is "
            f"not one; cnn supports {CNN_DATASETS}"
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if config.name == "factory":
            return _from_factory(config, features, outputs)
        if config.name == "linear":
            return nn.Linear(features, outputs)
        if config.name == "cnn":
            return lenet(IMAGE_SHAPES[features], outputs)
        layers: list[nn.Module] = []
        width = features
        for hidden in config.hidden:
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        layers.append(nn.Linear(width, outputs))
        return nn.Sequential(*layers)


def _from_factory(config: ModelConfig, features: int, outputs: int) -> nn.Module:
    """The module ``config.factory`` returns for ``features`` and ``outputs``, called
    with ``config.options``; UsageError where it takes no such arguments or returns no
    ``torch.nn.Module``."""
    function = FACTORIES.get(config.factory)
    if function is None:
        raise UsageError(
            f"model.factory {config.factory} was not imported: build the config with "
            "murmur.build_config or load_experiment, which import it"
        )
    keywords = config.keywords()
    try:
        inspect.signature(function).bind(features, outputs, **keywords)
    except TypeError as error:
        raise UsageError(
            f"model.factory {config.factory} cannot be called as FUNCTION(features, outputs"
            f"{''.join(f', {key}=...' for key in keywords)}): {error}"
        ) from None
    except ValueError:
        pass  # a callable without a signature to check: called as it is
    module = function(features, outputs, **keywords)
    if not isinstance(module, nn.Module):
        raise UsageError(
            f"model.factory {config.factory} returned an object of type "
            f"{type(module).__name__}, not a torch.nn.Module"
        )
    return module


def lenet(shape: tuple[int, int, int], outputs: int) -> nn.Sequential:
    """A LeNet-5 for flat rows of ``shape`` (channels, height, width) images.

    28x28: conv 5x5 (padding 2) to 6 channels, ReLU, max-pool 2, conv 5x5 to 16,
    ReLU, max-pool 2, then 400 -> 120 -> 84 -> ``outputs`` with ReLUs between
    (61,706 parameters for 10 classes). Smaller images (8x8) get 3x3 convolutions
    with padding 1 (16 x 2 x 2 = 64 features before the fully connected layers).
    The first layer turns each (features,) row into the image.
    """
    channels, height, width = shape
    kernel, padding = (5, (2, 0)) if height >= 28 else (3, (1, 1))
    side_h, side_w = height, width
    for pad in padding:
        side_h, side_w = (side_h + 2 * pad - kernel + 1) // 2, (side_w + 2 * pad - kernel + 1) // 2
    return nn.Sequential(
        nn.Unflatten(1, shape),
        nn.Conv2d(channels, 6, kernel, padding=padding[0]),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 16, kernel, padding=padding[1]),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * side_h * side_w, 120),
        nn.ReLU(),
        nn.Linear(120, 84),
        nn.ReLU(),
        nn.Linear(84, outputs),
    )


def layer_outputs(module: nn.Module, features: int) -> int:
    """Values all of ``module``'s innermost layers output for one sample of ``features``
    (an estimate of its activations per sample), from one forward pass on CPU zeros."""
    sizes: list[int] = []

    def count(_module: nn.Module, _inputs: object, output: object) -> None:
        if isinstance(output, torch.Tensor):
            sizes.append(output.numel())

    leaves = [child for child in module.modules() if not list(child.children())]
    hooks = [leaf.register_forward_hook(count) for leaf in leaves]
    try:
        with evaluating(module):
            module(torch.zeros(1, features, device=_device(module)))
    finally:
        for hook in hooks:
            hook.remove()
    return max(1, sum(sizes))


@contextlib.contextmanager
def evaluating(module: nn.Module) -> Iterator[None]:
    """``module`` in evaluation mode without gradients, its mode put back after: a probe
    of its shape neither draws dropout masks nor moves batch norm's running statistics."""
    training = module.training
    module.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        module.train(training)


def _device(module: nn.Module) -> torch.device:
    first = next(module.parameters(), None)
    return first.device if first is not None else torch.device("cpu")
