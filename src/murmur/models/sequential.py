"""Hand-derived gradients of N stacked Linear/ReLU networks, written into one buffer.

``torch.func`` handles any module but builds a fresh gradient per parameter and
then a fresh (agents, P) tensor to hold them all. For the networks murmur
builds itself (``nn.Linear`` alone, or ``nn.Sequential`` of ``nn.Linear`` and
``nn.ReLU``) the backward pass is three batched matrix products per layer, and
each product can write straight into its slice of a gradient buffer that is
reused from step to step. :class:`StackedModel` uses this path when it applies
and ``torch.func`` otherwise; tests check that both give the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from murmur.models.flat import ParamLayout


@dataclass(frozen=True)
class _Linear:
    """Where one ``nn.Linear``'s weight and bias sit in the flat vector."""

    weight: int
    """Offset of the (out, in) weight."""
    bias: int | None
    """Offset of the (out,) bias, or None."""
    inputs: int
    outputs: int
    relu: bool
    """Whether a ReLU follows this layer."""


class SequentialGradient:
    """Loss and gradient of N copies of a Linear/ReLU stack, per agent, in place."""

    def __init__(self, layers: list[_Linear], total: int, classification: bool) -> None:
        self.layers = layers
        self.total = total
        self.classification = classification
        self._buffer: torch.Tensor | None = None

    @classmethod
    def of(
        cls, module: nn.Module, layout: ParamLayout, classification: bool
    ) -> SequentialGradient | None:
        """The fast path for ``module``, or None when it is not a plain Linear/ReLU stack."""
        children: list[nn.Module] | None = [module] if isinstance(module, nn.Linear) else None
        if isinstance(module, nn.Sequential):
            children = list(module)
            prefixes = [f"{index}." for index in range(len(children))]
        else:
            prefixes = [""]
        if not children or not isinstance(children[-1], nn.Linear):
            return None
        offsets = dict(zip(layout.names, _offsets(layout.sizes), strict=True))
        layers: list[_Linear] = []
        for prefix, child in zip(prefixes, children, strict=True):
            if isinstance(child, nn.ReLU) and layers and not layers[-1].relu:
                layers[-1] = _Linear(
                    layers[-1].weight, layers[-1].bias, layers[-1].inputs, layers[-1].outputs, True
                )
            elif isinstance(child, nn.Linear) and (not layers or layers[-1].relu):
                bias = offsets.get(prefix + "bias") if child.bias is not None else None
                layers.append(
                    _Linear(
                        offsets[prefix + "weight"],
                        bias,
                        child.in_features,
                        child.out_features,
                        False,
                    )
                )
            else:
                return None
        if len(offsets) != sum(1 + (layer.bias is not None) for layer in layers):
            return None
        return cls(layers, layout.total, classification)

    def __call__(
        self,
        flat: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        out: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Losses (agents,) and gradients (agents, P), or None when the inputs don't fit.

        The gradient tensor is ``out`` where given (rows of a larger buffer), else reused
        by the next call: copy it to keep it.
        """
        agents, batch = x.shape[0], x.shape[1]
        hidden = x.reshape(agents, batch, -1).to(flat.dtype)
        if hidden.shape[2] != self.layers[0].inputs:
            return None
        grads = out if out is not None else self._grads(flat)
        inputs: list[torch.Tensor] = []
        for layer in self.layers:
            inputs.append(hidden)
            weight = self._weight(flat, layer)
            if layer.bias is None:
                hidden = torch.bmm(hidden, weight.transpose(1, 2))
            else:
                bias = flat[:, layer.bias : layer.bias + layer.outputs].unsqueeze(1)
                hidden = torch.baddbmm(bias, hidden, weight.transpose(1, 2))
            if layer.relu:
                hidden.clamp_(min=0)
        output = hidden
        if self.classification:
            if y.shape != (agents, batch):
                return None
            log_probs = torch.log_softmax(output, dim=2)
            losses = -log_probs.gather(2, y.unsqueeze(2)).squeeze(2).mean(dim=1)
            delta = log_probs.exp_()
            delta.scatter_add_(
                2, y.unsqueeze(2), torch.full_like(y, -1, dtype=delta.dtype).unsqueeze(2)
            )
            delta.mul_(1.0 / batch)
        else:
            if y.shape != output.shape:
                return None
            delta = output.sub_(y)
            losses = delta.square().flatten(1).mean(dim=1)
            delta.mul_(2.0 / delta[0].numel())
        for index in range(len(self.layers) - 1, -1, -1):
            layer = self.layers[index]
            below = inputs[index]
            weight_grad = grads[:, layer.weight : layer.weight + layer.inputs * layer.outputs]
            torch.bmm(delta.transpose(1, 2), below, out=weight_grad.view(agents, layer.outputs, -1))
            if layer.bias is not None:
                torch.sum(delta, dim=1, out=grads[:, layer.bias : layer.bias + layer.outputs])
            if index > 0:
                delta = torch.bmm(delta, self._weight(flat, layer))
                delta.mul_(below > 0)
        return losses, grads

    def _weight(self, flat: torch.Tensor, layer: _Linear) -> torch.Tensor:
        size = layer.inputs * layer.outputs
        return flat[:, layer.weight : layer.weight + size].view(-1, layer.outputs, layer.inputs)

    def grads_buffer(self, flat: torch.Tensor) -> torch.Tensor:
        """The reused (agents, P) gradient buffer for parameters like ``flat``."""
        return self._grads(flat)

    def _grads(self, flat: torch.Tensor) -> torch.Tensor:
        buffer = self._buffer
        if buffer is None or buffer.shape != flat.shape or buffer.dtype != flat.dtype:
            buffer = self._buffer = torch.empty_like(flat)
        return buffer


def _offsets(sizes: tuple[int, ...]) -> list[int]:
    offsets, position = [], 0
    for size in sizes:
        offsets.append(position)
        position += size
    return offsets
