"""Gradients and evaluation of N copies of one network in one call (torch.func).

The copies' parameters are the rows of a flat (agents, P) tensor. Gradients use
``vmap(grad_and_value(loss))`` over ``functional_call``, so any ``nn.Module``
without buffers works and no Python loop runs over agents; plain Linear/ReLU
stacks take the faster hand-derived path of :mod:`murmur.models.sequential`.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn
from torch.func import functional_call, grad_and_value, vmap
from torch.nn import functional

from murmur.models.flat import ParamLayout
from murmur.models.sequential import SequentialGradient

Task = Literal["classification", "regression"]


class StackedModel:
    """One network architecture, evaluated for many parameter rows at once."""

    def __init__(self, module: nn.Module, task: Task) -> None:
        if any(True for _ in module.buffers()):
            raise ValueError("models with buffers (e.g. batch norm) are not supported")
        self.module = module
        self.layout = ParamLayout.of(module)
        self.task = task
        self._loss_fn = (
            functional.cross_entropy if task == "classification" else functional.mse_loss
        )
        self._grad = vmap(grad_and_value(self._loss))
        self._outputs = vmap(self._forward, in_dims=(0, None))
        self._fast = SequentialGradient.of(module, self.layout, task == "classification")

    def _forward(self, params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.module, params, (x,))

    def _loss(
        self, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor
    ) -> torch.Tensor:
        return self._loss_fn(self._forward(params, x), y)

    def initial(self) -> torch.Tensor:
        """The module's own parameters as one flat vector (P,)."""
        return self.layout.flatten(self.module)

    def loss_and_grad(
        self, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Mini-batch losses (agents,) and gradients (agents, P); x is (agents, batch, ...).

        Linear/ReLU stacks take a hand-derived path whose gradient tensor is
        reused by the next call (callers may overwrite it; copy it to keep it).
        """
        if self._fast is not None:
            result = self._fast(flat, x, y)
            if result is not None:
                return result
        grads, losses = self._grad(self.layout.unflatten(flat), x, y)
        return losses, self.layout.stack(grads)

    @torch.no_grad()
    def evaluate(
        self, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor, chunk: int = 32
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """Per-row accuracy (None for regression) and mean loss on one shared data set."""
        accuracies, losses = [], []
        for start in range(0, flat.shape[0], chunk):
            outputs = self._outputs(self.layout.unflatten(flat[start : start + chunk]), x)
            if self.task == "classification":
                accuracies.append((outputs.argmax(dim=-1) == y).to(torch.float64).mean(dim=1))
                flat_outputs = outputs.reshape(-1, outputs.shape[-1])
                loss = functional.cross_entropy(
                    flat_outputs, y.repeat(outputs.shape[0]), reduction="none"
                )
                losses.append(loss.view(outputs.shape[0], -1).mean(dim=1))
            else:
                losses.append(((outputs - y) ** 2).flatten(1).mean(dim=1))
        accuracy = torch.cat(accuracies) if accuracies else None
        return accuracy, torch.cat(losses)
