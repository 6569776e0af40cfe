"""A mixing step and a gradient step together, fused where the transport can.

Most synchronous rules end a step with ``x <- x + scale * operator @ V - alpha * g``
(V: the values the agents last sent) or with ``x <- scale * operator @ V - alpha * g``,
and some then look at the drift ``x - x^``. Written as separate torch calls that is
four or five passes over the stacked state; a transport that holds every agent's
values in one tensor (the simulator's, when the run is compiled) has a
``fused_mix`` that does it all in one (:mod:`murmur.sim.fused`). Each function
below takes that path where the transport has it and otherwise makes the separate
calls, the reference the tests hold the fused path to; eager runs keep their
numbers bit for bit.
"""

from __future__ import annotations

import torch

from murmur.algorithms.protocols import Transport


def mix_replace(
    transport: Transport, operator: torch.Tensor, out: torch.Tensor, *, scale: float = 1.0
) -> None:
    """``out <- scale * operator @ V``, in place."""
    fused = transport.fused_mix
    if fused is not None:
        fused(operator, out, scale, None, 0.0, False, False, False)
        return
    out.zero_()
    transport.mix(operator, out=out, scale=scale)


def mix_replace_descend(
    transport: Transport,
    operator: torch.Tensor,
    out: torch.Tensor,
    grads: torch.Tensor,
    *,
    alpha: float,
    scale: float = 1.0,
) -> None:
    """``out <- scale * operator @ V - alpha * grads``, in place."""
    fused = transport.fused_mix
    if fused is not None:
        fused(operator, out, scale, grads, alpha, False, False, False)
        return
    out.zero_()
    _mix_descend_eagerly(transport, operator, out, grads, scale, alpha)


def mix_descend(
    transport: Transport,
    operator: torch.Tensor,
    out: torch.Tensor,
    grads: torch.Tensor,
    *,
    alpha: float,
    scale: float = 1.0,
) -> None:
    """``out <- out + scale * operator @ V - alpha * grads``, in place."""
    fused = transport.fused_mix
    if fused is not None:
        fused(operator, out, scale, grads, alpha, True, False, False)
        return
    _mix_descend_eagerly(transport, operator, out, grads, scale, alpha)


def mix_descend_norms(
    transport: Transport,
    operator: torch.Tensor,
    out: torch.Tensor,
    grads: torch.Tensor,
    *,
    alpha: float,
    scale: float = 1.0,
) -> torch.Tensor:
    """:func:`mix_descend`, then each row's drift ``||out - last_sent||``; ``grads`` is
    scratch space (its numbers may be anything afterwards)."""
    fused = transport.fused_mix
    if fused is not None:
        return _norms(fused(operator, out, scale, grads, alpha, True, True, False))
    _mix_descend_eagerly(transport, operator, out, grads, scale, alpha)
    return _drift_norms(transport, out, grads)


def mix_descend_drift(
    transport: Transport,
    operator: torch.Tensor,
    out: torch.Tensor,
    grads: torch.Tensor,
    *,
    alpha: float,
    scale: float = 1.0,
) -> torch.Tensor:
    """:func:`mix_descend`, then ``grads <- out - last_sent`` (the drift); returns each
    row's norm of it."""
    fused = transport.fused_mix
    if fused is not None:
        return _norms(fused(operator, out, scale, grads, alpha, True, True, True))
    _mix_descend_eagerly(transport, operator, out, grads, scale, alpha)
    return _drift_norms(transport, out, grads)


def _mix_descend_eagerly(
    transport: Transport,
    operator: torch.Tensor,
    out: torch.Tensor,
    grads: torch.Tensor,
    scale: float,
    alpha: float,
) -> None:
    """``out += scale * operator @ V``, then ``out -= alpha * grads``: two torch calls."""
    transport.mix(operator, out=out, scale=scale)
    out.add_(grads, alpha=-alpha)


def _drift_norms(transport: Transport, out: torch.Tensor, grads: torch.Tensor) -> torch.Tensor:
    """``grads <- out - last_sent``, and its rows' norms."""
    difference = torch.sub(out, transport.last_sent, out=grads)
    return torch.linalg.vector_norm(difference, dim=1)


def _norms(returned: torch.Tensor | None) -> torch.Tensor:
    """The drift's norms a :class:`~murmur.algorithms.protocols.FusedMix` returns when
    asked for them."""
    if returned is None:
        raise TypeError("a fused mixing step asked for the drift returned no norms")
    return returned
