"""Small networks every agent trains a copy of."""

from __future__ import annotations

import torch
from torch import nn

from murmur.sections import ModelConfig


def build_model(config: ModelConfig, features: int, outputs: int, seed: int) -> nn.Module:
    """The network of ``config`` for ``features`` inputs and ``outputs`` outputs.

    The initial weights depend only on ``seed`` (the global torch generator is
    left as it was).
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if config.name == "linear":
            return nn.Linear(features, outputs)
        layers: list[nn.Module] = []
        width = features
        for hidden in config.hidden:
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        layers.append(nn.Linear(width, outputs))
        return nn.Sequential(*layers)
