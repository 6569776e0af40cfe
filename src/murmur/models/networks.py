"""The networks ``model.name`` names, built for the data's shape: every agent trains a
copy of one."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator

import torch
from torch import nn

from murmur.errors import UsageError
from murmur.models import standard
from murmur.sections import ModelConfig

IMAGE_SHAPES: dict[int, tuple[int, int, int]] = {
    784: (1, 28, 28),
    3072: (3, 32, 32),
    64: (1, 8, 8),
}
"""The image (channels, height, width) the image networks read from each row's feature
count: 784 for mnist5k, mnist, fashion-mnist and femnist, 3072 for cifar10 and
cifar100, 64 for digits."""

IMAGE_DATASETS = {
    784: "mnist5k, mnist, fashion-mnist, femnist",
    3072: "cifar10, cifar100",
    64: "digits",
}
"""The datasets of each image size, to name in a refusal."""

IMAGE_NETWORKS: dict[str, tuple[int, ...]] = {
    "cnn": (784, 3072, 64),
    "resnet20": (784, 3072, 64),
    "vgg11": (3072,),
    "femnist-cnn": (784, 3072, 64),
}
"""The image networks of ``model.name`` and the feature counts (of :data:`IMAGE_SHAPES`)
each reads: VGG-11's five poolings need 32x32 images."""

GROUP_NORM_WIDTHS = {"resnet20": 16, "vgg11": 64}
"""The narrowest layer of each network ``model.norm`` applies to: ``model.groups``
must divide it (and with it every wider layer)."""

FACTORIES: dict[str, Callable[..., object]] = {}
"""The functions of ``model.factory``, by that setting, once their plugins are imported
(:mod:`murmur.plugins`)."""


def build_model(config: ModelConfig, features: int, outputs: int, seed: int) -> nn.Module:
    """The network of ``config`` for ``features`` inputs and ``outputs`` outputs.

    The initial weights depend only on ``seed`` (the global torch generator is
    left as it was). An image network needs rows of an image size it reads (see
    :data:`IMAGE_NETWORKS`); UsageError otherwise.
    """
    if config.name == "custom":
        raise UsageError(
            "model.name = custom stands for a torch.nn.Module given from Python "
            "(murmur.run(config, model=module)); a config alone cannot build it: "
            "pass the module again, or use another model.name (mlp, linear, cnn, ...)"
        )
    _check_input(config, features)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if config.name == "factory":
            return _from_factory(config, features, outputs)
        if config.name == "linear":
            return nn.Linear(features, outputs)
        if config.name == "char-lstm":
            return standard.CharacterLSTM(outputs)
        if config.name in IMAGE_NETWORKS:
            return _image_network(config, IMAGE_SHAPES[features], outputs)
        layers: list[nn.Module] = []
        width = features
        for hidden in config.hidden:
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        layers.append(nn.Linear(width, outputs))
        return nn.Sequential(*layers)


def _check_input(config: ModelConfig, features: int) -> None:
    """UsageError (one line) where ``config``'s network cannot read rows of ``features``
    or its GroupNorm cannot split its layers into ``model.groups`` groups."""
    reads = IMAGE_NETWORKS.get(config.name)
    if reads is not None and features not in reads:
        supported = [f"{IMAGE_DATASETS[size]} ({_shape_text(size)})" for size in reads]
        listed = supported[-1]
        if len(supported) > 1:
            listed = f"{', '.join(supported[:-1])} and {listed}"
        raise UsageError(
            f"model.name = {config.name} reads images, and a dataset with {features} "
            f"features holds none of the sizes it reads; {config.name} supports {listed}"
        )
    width = GROUP_NORM_WIDTHS.get(config.name)
    if width is not None and config.normalization == "group" and width % config.groups:
        raise UsageError(
            f"model.groups = {config.groups} does not divide the {width} channels of "
            f"{config.name}'s narrowest layers; use a divisor of {width}"
        )


def _shape_text(features: int) -> str:
    """The image of ``features`` values as CHANNELSxHEIGHTxWIDTH."""
    return "x".join(str(side) for side in IMAGE_SHAPES[features])


def _image_network(config: ModelConfig, shape: tuple[int, int, int], outputs: int) -> nn.Module:
    """The image network ``config.name`` for images of ``shape``."""
    if config.name == "resnet20":
        return standard.resnet20(shape, outputs, config.normalization, config.groups)
    if config.name == "vgg11":
        return standard.vgg11(shape, outputs, config.normalization, config.groups)
    if config.name == "femnist-cnn":
        return standard.femnist_cnn(shape, outputs)
    return lenet(shape, outputs)


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
    (61,706 parameters for 10 classes). 32x32 images get the same without padding,
    the original LeNet-5 (62,006 parameters for 3 channels and 10 classes); smaller
    images (8x8) get 3x3 convolutions with padding 1 (16 x 2 x 2 = 64 features before
    the fully connected layers). The first layer turns each (features,) row into the
    image.
    """
    channels, height, width = shape
    kernel, padding = 5, (0, 0)  # 32x32
    if height < 32:
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
        elif isinstance(output, tuple):  # an LSTM's outputs and states
            for part in output:
                count(_module, _inputs, part)

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
