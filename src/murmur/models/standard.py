"""The field's standard networks: ResNet-20 and VGG-11 for 32x32 images, and LEAF's
FEMNIST CNN and Shakespeare LSTM.

They follow the code bases that decentralized-learning papers train them with
(Lin et al.'s, shared by CHOCO-SGD and quasi-global momentum; LEAF's), so that
numbers from murmur and from those papers are numbers of the same networks:

- ResNet-20 (He et al. 2016, CIFAR variant): a 3x3 convolution to 16 channels, three
  stages of three basic blocks (16, 32, 64 channels, the last two stages starting
  with stride 2), global average pooling, one linear layer. A block whose shape
  changes takes its shortcut through a 1x1 convolution of stride 2 and a
  normalization (option B of the paper), as in those code bases; the other
  shortcuts are identities. Convolutions have no bias.
- VGG-11 (configuration A of Simonyan and Zisserman 2015) on 32x32 images: eight
  3x3 convolutions with max-pooling, 512 features out of the fifth pooling, then the
  CIFAR classifier of those code bases: dropout, 512 -> 512, ReLU, dropout, 512 ->
  512, ReLU, 512 -> classes.
- LEAF's FEMNIST CNN (Caldas et al. 2018): two 5x5 "same" convolutions (32 and 64
  channels) with ReLU and 2x2 max-pooling, 2048 hidden units, classes.
- LEAF's Shakespeare model: each row holds a sequence of character indices (as
  floats), embedded in 8 dimensions, read by a 2-layer LSTM of 256 units whose output
  at the last character gives the next character's scores. PyTorch's LSTM has two
  bias vectors per layer where LEAF's has one, 2,048 parameters more.

Convolutions of ResNet-20 and VGG-11 start from He's normal initialization over
their fan-out (the code bases' own), biases from zero; everything else from
PyTorch's defaults.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch import nn

Norm = Literal["group", "batch", "none"]
"""The normalization layer after each convolution (``model.norm``)."""

VGG11_STAGES = ((64,), (128,), (256, 256), (512, 512), (512, 512))
"""VGG-11's convolutions (their output channels) in five stages, each followed by a 2x2
max-pooling."""


def normalization(norm: Norm, groups: int) -> Callable[[int], nn.Module]:
    """The layer ``norm`` puts after a convolution of the given channels: GroupNorm of
    ``groups`` groups, BatchNorm2d, or none (an identity)."""
    if norm == "group":
        return lambda channels: nn.GroupNorm(groups, channels)
    if norm == "batch":
        return nn.BatchNorm2d
    return lambda channels: nn.Identity()


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with a normalization each and the block's input added
    before the second ReLU; through a strided 1x1 convolution where the shape changes."""

    def __init__(
        self, inputs: int, outputs: int, stride: int, norm: Callable[[int], nn.Module]
    ) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride=stride, padding=1, bias=False)
        self.norm1 = norm(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, padding=1, bias=False)
        self.norm2 = norm(outputs)
        self.relu = nn.ReLU()
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or inputs != outputs:
            self.shortcut = nn.Sequential(
                nn.Conv2d(inputs, outputs, 1, stride=stride, bias=False), norm(outputs)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.norm1(self.conv1(x)))
        return self.relu(self.norm2(self.conv2(out)) + self.shortcut(x))


def resnet20(
    shape: tuple[int, int, int], outputs: int, norm: Norm = "group", groups: int = 2
) -> nn.Sequential:
    """ResNet-20 for flat rows of ``shape`` (channels, height, width) images (272,474
    parameters for 10 classes with GroupNorm or BatchNorm, 270,906 without)."""
    layer = normalization(norm, groups)
    blocks: list[nn.Module] = []
    width = 16
    for stage, channels in enumerate((16, 32, 64)):
        for block in range(3):
            stride = 2 if stage > 0 and block == 0 else 1
            blocks.append(BasicBlock(width, channels, stride, layer))
            width = channels
    return _he_initialized(
        nn.Sequential(
            nn.Unflatten(1, shape),
            nn.Conv2d(shape[0], 16, 3, padding=1, bias=False),
            layer(16),
            nn.ReLU(),
            *blocks,
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(64, outputs),
        )
    )


def vgg11(
    shape: tuple[int, int, int], outputs: int, norm: Norm = "none", groups: int = 2
) -> nn.Sequential:
    """VGG-11 for flat rows of ``shape`` images of 32x32 pixels (9,750,922 parameters
    for 10 classes without normalization)."""
    layer = normalization(norm, groups)
    features: list[nn.Module] = []
    channels = shape[0]
    for stage in VGG11_STAGES:
        for width in stage:
            features += [nn.Conv2d(channels, width, 3, padding=1), layer(width), nn.ReLU()]
            channels = width
        features.append(nn.MaxPool2d(2))
    return _he_initialized(
        nn.Sequential(
            nn.Unflatten(1, shape),
            *features,
            nn.Flatten(),
            nn.Dropout(),
            nn.Linear(512, 512),
            nn.ReLU(),
            nn.Dropout(),
            nn.Linear(512, 512),
            nn.ReLU(),
            nn.Linear(512, outputs),
        )
    )


def _he_initialized(module: nn.Sequential) -> nn.Sequential:
    """``module`` with its convolutions' weights drawn from N(0, 2 / (k * k * out)),
    their biases zero."""
    for layer in module.modules():
        if isinstance(layer, nn.Conv2d):
            nn.init.kaiming_normal_(layer.weight, mode="fan_out", nonlinearity="relu")
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)
    return module


def femnist_cnn(shape: tuple[int, int, int], outputs: int) -> nn.Sequential:
    """LEAF's FEMNIST CNN for flat rows of ``shape`` images (6,603,710 parameters for
    the 62 classes of 28x28 FEMNIST)."""
    channels, height, width = shape
    return nn.Sequential(
        nn.Unflatten(1, shape),
        nn.Conv2d(channels, 32, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * (height // 4) * (width // 4), 2048),
        nn.ReLU(),
        nn.Linear(2048, outputs),
    )


class CharacterLSTM(nn.Module):
    """LEAF's Shakespeare model: the scores of the character after each row's sequence
    of ``vocabulary`` character indices (819,920 parameters for 80 characters)."""

    def __init__(
        self, vocabulary: int, embedding: int = 8, hidden: int = 256, layers: int = 2
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocabulary, embedding)
        self.lstm = nn.LSTM(embedding, hidden, layers, batch_first=True)
        self.output = nn.Linear(hidden, vocabulary)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sequence, _ = self.lstm(self.embedding(x.long()))
        return self.output(sequence[:, -1])
