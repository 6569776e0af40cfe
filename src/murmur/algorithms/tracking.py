"""Gradient tracking's paired rows, shared by DETSGRAD-GT and BEER: each agent's row is
its model and its tracker side by side, (agents, 2P), so that one row is one message
and one transport holds the estimates of both halves."""

from __future__ import annotations

from typing import NamedTuple

import torch

from murmur.algorithms.compressors import Compressor, WarmStarts
from murmur.algorithms.estimates import CompressedState, Message, Segments, sent_update
from murmur.algorithms.protocols import Transport


class TrackedPair(NamedTuple):
    """The state of a gradient-tracking method over paired rows."""

    pair: torch.Tensor
    """(agents, 2P): each agent's model x_i, then its tracker (zero before the first
    step); what the transport holds as sent are their estimates."""
    grad_memory: torch.Tensor | None = None
    """(agents, P): the gradient the tracker's next update subtracts (BEER: each agent's
    gradient of the step before; DETSGRAD-GT: its smoothed gradient m_i); None before
    the first step."""
    scratch: torch.Tensor | None = None
    """(agents, 2P) of room for the differences to the estimates."""
    warm: WarmStarts | None = None
    """The senders' warm starts (``lowrank``), kept from message to message."""

    @property
    def x(self) -> torch.Tensor:
        """The models' half of ``pair``, as a view."""
        return model_half(self.pair)

    @property
    def tracker(self) -> torch.Tensor:
        """The trackers' half of ``pair``, as a view."""
        return tracker_half(self.pair)


def model_and_tracker(params: torch.Tensor) -> torch.Tensor:
    """Every agent's row (x_0, 0): its model and a zero tracker, as it starts known."""
    return torch.cat([params, torch.zeros_like(params)], dim=1)


def model_half(pair: torch.Tensor) -> torch.Tensor:
    """The model's half of each row of ``pair`` (agents, 2P), as a view."""
    return pair[:, : pair.shape[1] // 2]


def tracker_half(pair: torch.Tensor) -> torch.Tensor:
    """The tracker's half of each row of ``pair`` (agents, 2P), as a view."""
    return pair[:, pair.shape[1] // 2 :]


def half_triggers(drift: torch.Tensor, model: float, tracker: float) -> torch.Tensor:
    """(agents, 2) bool: which halves of each row of ``drift`` (agents, 2P), the model's
    and the tracker's, moved at least ``model`` and ``tracker`` in norm."""
    return torch.stack(
        [
            torch.linalg.vector_norm(model_half(drift), dim=1) >= model,
            torch.linalg.vector_norm(tracker_half(drift), dim=1) >= tracker,
        ],
        dim=1,
    )


def publish_halves(
    transport: Transport,
    compressor: Compressor,
    drift: torch.Tensor,
    sent: torch.Tensor,
    message: Message,
    state: CompressedState,
) -> None:
    """Each agent sends C of each half of its row of ``drift`` (agents, 2P) that ``sent``
    (:func:`half_triggers`) flags, the model's and the tracker's, each as a message of
    its own; ``message``: the message, for its draws; ``state``: the senders' state,
    for their warm starts."""
    half = drift.shape[1] // 2
    transport.publish(sent_update(compressor, drift, sent, Segments((half, half)), message, state))
