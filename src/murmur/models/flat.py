"""Flat parameter vectors: stacked models as one (agents, P) tensor.

Algorithms see every agent's model as a row of one tensor; ``torch.func``
needs a dict of named tensors. :class:`ParamLayout` converts between the two
without copying on the way in (views) and with one copy on the way out.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class ParamLayout:
    """Names, shapes and offsets of a module's parameters in a flat vector."""

    names: tuple[str, ...]
    shapes: tuple[torch.Size, ...]
    sizes: tuple[int, ...]

    @classmethod
    def of(cls, module: nn.Module) -> ParamLayout:
        named = list(module.named_parameters())
        return cls(
            names=tuple(name for name, _ in named),
            shapes=tuple(p.shape for _, p in named),
            sizes=tuple(p.numel() for _, p in named),
        )

    @property
    def total(self) -> int:
        """P, the number of parameters of one model."""
        return sum(self.sizes)

    def flatten(self, module: nn.Module) -> torch.Tensor:
        """The module's parameters as one vector (P,)."""
        params = dict(module.named_parameters())
        return torch.cat([params[name].detach().reshape(-1) for name in self.names])

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """(agents, P) -> {name: (agents, *shape)} as views of ``flat``."""
        agents = flat.shape[0]
        pieces = torch.split(flat, list(self.sizes), dim=1)
        return {
            name: piece.view(agents, *shape)
            for name, shape, piece in zip(self.names, self.shapes, pieces, strict=True)
        }

    def stack(self, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
        """{name: (agents, *shape)} -> (agents, P), one copy."""
        first = tensors[self.names[0]]
        return torch.cat([tensors[name].reshape(first.shape[0], -1) for name in self.names], dim=1)
