"""Gradients and evaluation of N copies of one network in one call (torch.func).

The copies' parameters are the rows of a flat (agents, P) tensor. Gradients use
``vmap(grad_and_value(loss))`` over ``functional_call``, so any ``nn.Module``
works and no Python loop runs over agents; plain Linear/ReLU stacks take the faster
hand-derived path of :mod:`murmur.models.sequential`. Convolutional networks on the CPU,
modules that draw random numbers and recurrent ones (which vmap cannot batch) take
their gradients agent by agent instead, and recurrent ones their evaluations too. A
module with buffers (BatchNorm) keeps a copy of them per agent
(:mod:`murmur.models.statistics`), updated by each agent's own training steps and used
by its evaluations.

A model on a ``device`` (a GPU) keeps its module there; the data should be there
too, and the parameter rows may live anywhere: they cross to the device for
each call and the results come back to the rows' device.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import nn
from torch.func import functional_call, grad_and_value, vmap
from torch.nn import functional

from murmur.models.flat import ParamLayout
from murmur.models.networks import layer_outputs
from murmur.models.sequential import SequentialGradient
from murmur.models.statistics import AgentStatistics, Stacked
from murmur.seeding import derive_seed

Task = Literal["classification", "regression"]

TRAIN_BLOCK = 1024
"""Agents whose gradients the hand-derived path works out at once: above it, in blocks,
whose activations stay in cache (at 10,000 agents a step is then faster than in one
pass)."""
EVAL_FLOATS = 2**24
"""Most activation values one evaluation call computes at a time (64 MB of float32):
``evaluate`` takes as many agents and test samples per call as fit in it."""
EVAL_AGENTS = 32
"""Most agents ``evaluate`` takes per call."""


RANDOM_LAYERS = (
    nn.Dropout,
    nn.Dropout1d,
    nn.Dropout2d,
    nn.Dropout3d,
    nn.AlphaDropout,
    nn.FeatureAlphaDropout,
)
"""Layers that draw random numbers while training: their modules' gradients are taken
agent by agent, each agent drawing from its own key."""

CONVOLUTIONS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
"""Layers that make :class:`StackedModel` take gradients agent by agent on the CPU."""

RECURRENT = (nn.RNNBase,)
"""Layers (LSTM, GRU, RNN) that ``vmap`` has no batching rule for: their modules'
gradients and evaluations are taken agent by agent on every device."""

UNBATCHED = "Batching rule not implemented"
"""How ``vmap`` says that an operation of the module has no batching rule."""


def takes_agents_in_turn(module: nn.Module, device: torch.device | str | None = None) -> bool:
    """Whether :class:`StackedModel` takes ``module``'s gradients one agent after another
    on ``device`` (None: the CPU), holding one agent's activations at a time: a module
    with convolutions on the CPU, recurrent layers or random layers."""
    on_cpu = device is None or torch.device(device).type == "cpu"
    kinds = (*RANDOM_LAYERS, *RECURRENT, *(CONVOLUTIONS if on_cpu else ()))
    return any(isinstance(layer, kinds) for layer in module.modules())


class StackedModel:
    """One network architecture, evaluated for many parameter rows at once."""

    def __init__(
        self,
        module: nn.Module,
        task: Task,
        device: torch.device | str | None = None,
        seed: int = 0,
    ) -> None:
        self.seed = seed
        """The run's seed, from which each agent's random draws (dropout) are keyed."""
        self.random = any(isinstance(layer, RANDOM_LAYERS) for layer in module.modules())
        """Whether the module draws random numbers while training (found when it does)."""
        self._training: bool | None = None
        self.device = torch.device(device) if device is not None else None
        self.module = module if self.device is None else module.to(self.device)
        self.statistics = AgentStatistics.of(self.module)
        """Each agent's running statistics (None: the module has no buffers)."""
        self.layout = ParamLayout.of(module)
        self.task = task
        self._units: int | None = None
        self._loss_fn = (
            functional.cross_entropy if task == "classification" else functional.mse_loss
        )
        self._grad = vmap(grad_and_value(self._loss))
        self._vmapped_outputs = vmap(self._forward, in_dims=(0, 0, None))
        self._fast = (
            SequentialGradient.of(module, self.layout, task == "classification")
            if self.statistics is None
            else None
        )
        layers = list(module.modules())
        self.unbatched = any(isinstance(layer, RECURRENT) for layer in layers)
        """Whether vmap has no batching rule for one of the module's operations (a
        recurrent layer's, or found when vmap fails): its gradients and evaluations go
        agent by agent."""
        on_cpu = self.device is None or self.device.type == "cpu"
        convolutions = on_cpu and any(isinstance(layer, CONVOLUTIONS) for layer in layers)
        self.per_agent = convolutions or self.unbatched
        """Whether gradients are taken one agent after another rather than vmapped: on
        the CPU, vmap turns N agents' convolutions into one grouped convolution, which
        is slower than N ordinary ones (1.5 times, for 64 LeNet-5s); recurrent layers
        have no batching rule."""
        self._buffer: torch.Tensor | None = None

    def _forward(self, params: Stacked, buffers: Stacked, x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.module, {**params, **buffers}, (x,))

    def _loss(
        self, params: Stacked, buffers: Stacked, x: torch.Tensor, y: torch.Tensor
    ) -> torch.Tensor:
        return self._loss_fn(self._forward(params, buffers, x), y)

    def initial(self) -> torch.Tensor:
        """The module's own parameters as one flat vector (P,)."""
        return self.layout.flatten(self.module)

    def loss_and_grad(
        self,
        flat: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        draws: tuple[Sequence[int], int] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Mini-batch losses (agents,) and gradients (agents, P); x is (agents, batch, ...).

        Linear/ReLU stacks take a hand-derived path whose gradient tensor is
        reused by the next call (callers may overwrite it; copy it to keep it).
        ``draws``: the rows' agents and the iteration, from which a module that draws
        random numbers (dropout) keys each agent's, so that an agent draws the same
        numbers alone or among others; None: from torch's generator.
        A module with buffers updates the running statistics of the rows' agents (the
        same agents, in the same order, at every call).
        """
        home = flat.device
        self._mode(training=True)
        flat, x, y = self._to_device(flat), self._to_device(x), self._to_device(y)
        if self._fast is not None:
            result = self._fast_in_blocks(flat, x, y)
            if result is not None:
                return result[0].to(home), result[1].to(home)
        if self.per_agent or self.random:
            return self._agent_by_agent(flat, x, y, draws)
        buffers = self.statistics.ensure(flat.shape[0]) if self.statistics is not None else {}
        try:
            grads, losses = self._grad(self.layout.unflatten(flat), buffers, x, y)
        except RuntimeError as error:
            if "randomness" in str(error):
                self.random = True  # a random operation of the module's own
            elif UNBATCHED in str(error):
                self.unbatched = self.per_agent = True
            else:
                raise
            return self._agent_by_agent(flat, x, y, draws)
        return losses.to(home), self.layout.stack(grads).to(home)

    def _mode(self, training: bool) -> None:
        """The module in training mode for gradients, in evaluation mode (dropout off)
        for evaluations."""
        if self._training != training:
            self.module.train(training)
            self._training = training

    def _fast_in_blocks(
        self, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The hand-derived path over blocks of :data:`TRAIN_BLOCK` agents, each block's
        activations small enough to stay in cache, written into one gradient buffer.
        Every agent's numbers are those of one call over all agents: no product or sum
        mixes agents."""
        fast = self._fast
        assert fast is not None
        rows = flat.shape[0]
        if rows <= TRAIN_BLOCK:
            return fast(flat, x, y)
        grads = fast.grads_buffer(flat)
        losses = flat.new_empty(rows)
        for start in range(0, rows, TRAIN_BLOCK):
            end = min(start + TRAIN_BLOCK, rows)
            part = fast(flat[start:end], x[start:end], y[start:end], out=grads[start:end])
            if part is None:
                return None
            losses[start:end] = part[0]
        return losses, grads

    def _agent_by_agent(
        self,
        flat: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        draws: tuple[Sequence[int], int] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each agent's loss and gradient in turn, written into a reused (agents, P)
        buffer; a random module's draws keyed by ``draws`` (see :meth:`loss_and_grad`)."""
        buffer = self._buffer
        if buffer is None or buffer.shape != flat.shape or buffer.dtype != flat.dtype:
            buffer = self._buffer = torch.empty_like(flat)
        losses = flat.new_empty(flat.shape[0])
        stacked = self.statistics.ensure(flat.shape[0]) if self.statistics is not None else {}
        keyed = self.random and draws is not None
        devices = [flat.device] if flat.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices, enabled=keyed):
            for row in range(flat.shape[0]):
                if keyed and draws is not None:
                    torch.manual_seed(self._key(draws[0][row], draws[1]))
                buffers = {name: tensor[row] for name, tensor in stacked.items()}
                losses[row] = self._one_agent(
                    flat[row : row + 1], buffers, x[row], y[row], buffer[row]
                )
        return losses, buffer

    def _one_agent(
        self,
        row: torch.Tensor,
        buffers: Stacked,
        x: torch.Tensor,
        y: torch.Tensor,
        out: torch.Tensor,
    ) -> torch.Tensor:
        """One agent's loss; its gradient written into ``out``, its ``buffers`` (views of
        its running statistics) updated in place."""
        params = {
            name: piece.squeeze(0).detach().requires_grad_()
            for name, piece in self.layout.unflatten(row).items()
        }
        with torch.enable_grad():
            loss = self._loss(params, buffers, x, y)
            grads = torch.autograd.grad(loss, list(params.values()))
        torch.cat([grad.reshape(-1) for grad in grads], out=out)
        return loss.detach()

    def _key(self, agent: int, iteration: int) -> int:
        """The seed of agent ``agent``'s random draws at ``iteration``."""
        return derive_seed(derive_seed(self.seed, "draws", agent), "iteration", iteration)

    def _to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor if self.device is None else tensor.to(self.device, non_blocking=True)

    def _activations(self, x: torch.Tensor) -> int:
        """Values the module's layers output for one sample of ``x`` (once, then kept)."""
        if self._units is None:
            self._units = layer_outputs(self.module, x[0].numel())
        return self._units

    @torch.no_grad()
    def evaluate(
        self,
        flat: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        chunk: int | None = None,
        statistics: Stacked | None = None,
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """Per-row accuracy (None for regression) and mean loss on one shared data set.

        A module with buffers evaluates each row with ``statistics`` (one per row), or
        else with the agents' own running statistics when the rows are the agents, their
        mean for one row (the average model), the initial ones before any step.

        ``chunk`` agents per call (default: as many as keep one call's activations
        under :data:`EVAL_FLOATS`, at most :data:`EVAL_AGENTS`); a model too large for
        one agent on the whole set at once takes the samples in slices too.
        """
        home = flat.device
        self._mode(training=False)
        x, y = self._to_device(x), self._to_device(y)
        pairs = max(1, EVAL_FLOATS // self._activations(x))
        samples = x.shape[0]
        if chunk is None:
            chunk = max(1, min(EVAL_AGENTS, pairs // max(samples, 1)))
        step = samples if chunk * samples <= pairs else max(1, pairs // chunk)
        # Written in place: small results kept between the chunks' large temporaries
        # would pin those in the heap, and the heap would grow with every chunk.
        rows = flat.shape[0]
        accuracies: torch.Tensor | None = None
        losses: torch.Tensor | None = None
        for start in range(0, rows, chunk):
            params = self.layout.unflatten(self._to_device(flat[start : start + chunk]))
            buffers = self._buffers(rows, start, start + chunk, statistics)
            if step >= samples:
                accuracy, loss = self._measure(params, buffers, x, y)
            else:  # sums over slices of the samples, then the means
                parts = [
                    self._measure(params, buffers, x[at : at + step], y[at : at + step], True)
                    for at in range(0, samples, step)
                ]
                loss = torch.stack([part[1] for part in parts]).sum(dim=0) / samples
                correct = [part[0] for part in parts if part[0] is not None]
                accuracy = None
                if self.task == "classification":
                    accuracy = torch.stack(correct).sum(dim=0) / samples
            if losses is None:
                losses = loss.new_empty(rows)
                accuracies = accuracy.new_empty(rows) if accuracy is not None else None
            if accuracies is not None and accuracy is not None:
                accuracies[start : start + chunk] = accuracy
            losses[start : start + chunk] = loss
            del accuracy, loss
        assert losses is not None  # flat has at least one row
        return (accuracies.to(home) if accuracies is not None else None), losses.to(home)

    def _buffers(self, rows: int, start: int, stop: int, given: Stacked | None) -> Stacked:
        """The statistics rows ``start:stop`` of ``rows`` are evaluated with (see
        :meth:`evaluate`), on the module's device."""
        if self.statistics is None:
            return {}
        if given is None:
            return self.statistics.for_rows(rows, start, stop)
        return {name: self._to_device(tensor[start:stop]) for name, tensor in given.items()}

    def _measure(
        self,
        params: Stacked,
        buffers: Stacked,
        x: torch.Tensor,
        y: torch.Tensor,
        total: bool = False,
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """Per-row accuracy and mean loss on (x, y); with ``total`` their sums instead."""
        outputs = self._outputs(params, buffers, x)
        reduce = (lambda t: t.sum(dim=1)) if total else (lambda t: t.mean(dim=1))
        if self.task == "regression":
            squares = (outputs - y) ** 2
            if total:
                return None, squares.flatten(2).mean(dim=2).sum(dim=1)
            return None, squares.flatten(1).mean(dim=1)
        correct = reduce((outputs.argmax(dim=-1) == y).to(torch.float64))
        flat_outputs = outputs.reshape(-1, outputs.shape[-1])
        loss = functional.cross_entropy(flat_outputs, y.repeat(outputs.shape[0]), reduction="none")
        return correct, reduce(loss.view(outputs.shape[0], -1))

    def _outputs(self, params: Stacked, buffers: Stacked, x: torch.Tensor) -> torch.Tensor:
        """Every row's outputs on the shared ``x``, (rows, samples, ...): vmapped, or one
        row after another for a module vmap cannot batch."""
        if not self.unbatched:
            try:
                return self._vmapped_outputs(params, buffers, x)
            except RuntimeError as error:
                if UNBATCHED not in str(error):
                    raise
                self.unbatched = self.per_agent = True  # an operation of the module's own
        rows = next(iter(params.values())).shape[0]
        return torch.stack(
            [
                self._forward(
                    {name: tensor[row] for name, tensor in params.items()},
                    {name: tensor[row] for name, tensor in buffers.items()},
                    x,
                )
                for row in range(rows)
            ]
        )
