"""Each agent's running statistics: the buffers of a network (BatchNorm's running mean,
running variance and count of batches), one copy per agent.

An agent's statistics are part of its state, like its parameters, but they are not
exchanged: no algorithm mixes them and no message carries them, so every agent's
follow its own mini-batches (which is what a decentralized BatchNorm does unless a
method says otherwise). They are updated where the agent's gradient is taken, in
training mode, and used where its model is evaluated, in evaluation mode. The
average model (``model.pt``, the record's average-model columns) uses the mean of
the agents' statistics, as it uses the mean of their parameters.

Tensors keep their buffer's dtype and get a leading agent axis: ``{name: (agents,
*shape)}``, the form of ``agents.pt``. Sums and means go through float64, which
holds a float32 statistic and an int64 count exactly.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from murmur.errors import UsageError

Stacked = dict[str, torch.Tensor]
"""Named tensors with a leading agent axis: ``{name: (agents, *shape)}``."""


class AgentStatistics:
    """The buffers of one network, one copy per agent, made on the first training step
    from the module's own (every agent starts from them)."""

    def __init__(self, module: nn.Module) -> None:
        self.initial: dict[str, torch.Tensor] = {
            name: buffer.detach().clone() for name, buffer in module.named_buffers()
        }
        """The module's buffers as built: every agent's statistics before its first step."""
        self.names = tuple(self.initial)
        self.sizes = tuple(max(tensor.numel(), 1) for tensor in self.initial.values())
        self.per_agent: Stacked | None = None
        """Each agent's statistics (None until the first training step)."""

    @classmethod
    def of(cls, module: nn.Module) -> AgentStatistics | None:
        """The statistics of ``module``'s buffers; None for a module without buffers."""
        return cls(module) if any(True for _ in module.buffers()) else None

    @property
    def width(self) -> int:
        """Numbers per agent in :meth:`flat`."""
        return sum(self.sizes)

    def ensure(self, rows: int) -> Stacked:
        """Each of ``rows`` agents' statistics, made from the initial ones at the first call."""
        if self.per_agent is None:
            self.per_agent = self._repeat(self.initial, rows)
        agents = next(iter(self.per_agent.values())).shape[0]
        if agents != rows:
            raise ValueError(f"the model keeps statistics of {agents} agents, not {rows}")
        return self.per_agent

    def final(self, rows: int) -> Stacked:
        """Each of ``rows`` agents' statistics, a copy on the CPU (the initial ones where
        no step was taken), for the run's model files."""
        return {name: tensor.detach().cpu().clone() for name, tensor in self.ensure(rows).items()}

    def for_rows(self, rows: int, start: int = 0, stop: int | None = None) -> Stacked:
        """The statistics to evaluate rows ``start:stop`` of ``rows`` parameter rows with:
        the agents' own (``rows`` equal to the agents), their mean (one row, the average
        model), or the initial ones (before the first step)."""
        stop = rows if stop is None else min(stop, rows)
        if self.per_agent is None:
            return self._repeat(self.initial, stop - start)
        agents = next(iter(self.per_agent.values())).shape[0]
        if rows == agents:
            return {name: tensor[start:stop] for name, tensor in self.per_agent.items()}
        if rows == 1:
            return self.stacked(self.flat().mean(dim=0, keepdim=True))
        raise ValueError(f"{rows} parameter rows, but statistics of {agents} agents")

    def select(self, agents: torch.Tensor) -> Stacked:
        """The statistics of the agents ``agents`` (indices), to evaluate those rows alone."""
        if self.per_agent is None:
            return self._repeat(self.initial, agents.numel())
        return {
            name: tensor.index_select(0, agents.to(tensor.device))
            for name, tensor in self.per_agent.items()
        }

    def flat(self) -> torch.Tensor:
        """Each agent's statistics as one float64 row: (agents, :attr:`width`)."""
        stacked = self.per_agent if self.per_agent is not None else self._repeat(self.initial, 1)
        return torch.cat(
            [tensor.reshape(tensor.shape[0], -1).to(torch.float64) for tensor in stacked.values()],
            dim=1,
        )

    def stacked(self, flat: torch.Tensor) -> Stacked:
        """Rows of :meth:`flat` (or their sums divided, a mean) as named tensors in the
        buffers' own dtypes; integer counts rounded."""
        out: Stacked = {}
        start = 0
        for (name, initial), size in zip(self.initial.items(), self.sizes, strict=True):
            piece = flat[:, start : start + size]
            if not initial.dtype.is_floating_point:
                piece = piece.round()
            out[name] = piece.to(initial.dtype).reshape(flat.shape[0], *initial.shape)
            start += size
        return out

    def mean(self) -> dict[str, torch.Tensor]:
        """The agents' mean statistics, one network's buffers (``model.pt``)."""
        return {name: tensor[0] for name, tensor in self.for_rows(1).items()}

    def state_dict(self) -> Stacked:
        """Each agent's statistics, for a checkpoint (the initial ones before any step)."""
        if self.per_agent is None:
            return {}
        return {name: tensor.detach().cpu().clone() for name, tensor in self.per_agent.items()}

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        """Each agent's statistics from :meth:`state_dict` (empty: none saved yet)."""
        if not state:
            self.per_agent = None
            return
        if set(state) != set(self.names):
            raise ValueError(f"saved statistics {sorted(state)} are not {sorted(self.names)}")
        device = next(iter(self.initial.values())).device
        self.per_agent = {
            name: state[name].to(device=device, dtype=self.initial[name].dtype).clone()
            for name in self.names
        }

    @staticmethod
    def _repeat(tensors: Mapping[str, torch.Tensor], rows: int) -> Stacked:
        return {
            name: tensor.unsqueeze(0).repeat(rows, *([1] * tensor.dim()))
            for name, tensor in tensors.items()
        }


def refuse_statistics(module: nn.Module, where: str) -> None:
    """UsageError (one line) when ``module`` has buffers and ``where`` (a server or
    Hogwild run, whose workers share one model) cannot keep them."""
    names = [name for name, _ in module.named_buffers()]
    if names:
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        raise UsageError(
            f"the model has buffers ({shown}): {where} trains one model shared by its "
            "workers and keeps no running statistics; use batch norm with the decentralized "
            "and centralized SGD algorithms, which keep each agent's, or GroupNorm/LayerNorm"
        )
