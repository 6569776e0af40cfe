"""A mixing step and a gradient step together, fused where the transport can.

Most synchronous rules end a step with ``x <- x + scale * operator @ V - alpha * g``
(V: the values the agents last sent) or with ``x <- scale * operator @ V - alpha * g``,
and some then look at the drift ``x - x^``. Written as separate torch calls that is
four or five passes over the stacked state; a transport that holds every agent's
values in one tensor (the simulator's, when the run is compiled) has a
``fused_mix`` that does it all in one (:mod:`murmur.sim.fused`). Each function
below takes that path where the transport has it and otherwise makes the separate
calls, the reference the tests hold the fused path to; eager runs keep their
numbers bit for bit. Each takes the step as one :class:`MixStep` (operator, ``out``,
and the gradient step's ``grads`` and ``alpha`` where it has one).
"""

from __future__ import annotations

import torch

from murmur.algorithms.protocols import MixStep, Transport

__all__ = [
    "MixStep",
    "mix_descend",
    "mix_descend_drift",
    "mix_descend_norms",
    "mix_replace",
    "mix_replace_descend",
]


def mix_replace(transport: Transport, step: MixStep) -> None:
    """``out <- scale * operator @ V``, in place (``step.grads`` unused)."""
    fused = transport.fused_mix
    if fused is not None:
        fused(MixStep(step.operator, step.out, scale=step.scale), keep=False, drift="none")
        return
    step.out.zero_()
    transport.mix(step.operator, out=step.out, scale=step.scale)


def mix_replace_descend(transport: Transport, step: MixStep) -> None:
    """``out <- scale * operator @ V - alpha * grads``, in place."""
    grads = _grads(step)
    fused = transport.fused_mix
    if fused is not None:
        fused(step, keep=False, drift="none")
        return
    step.out.zero_()
    _mix_descend_eagerly(transport, step, grads)


def mix_descend(transport: Transport, step: MixStep) -> None:
    """``out <- out + scale * operator @ V - alpha * grads``, in place."""
    grads = _grads(step)
    fused = transport.fused_mix
    if fused is not None:
        fused(step, keep=True, drift="none")
        return
    _mix_descend_eagerly(transport, step, grads)


def mix_descend_norms(transport: Transport, step: MixStep) -> torch.Tensor:
    """:func:`mix_descend`, then each row's drift ``||out - last_sent||``; ``grads`` is
    scratch space (its numbers may be anything afterwards)."""
    grads = _grads(step)
    fused = transport.fused_mix
    if fused is not None:
        return _norms(fused(step, keep=True, drift="norms"))
    _mix_descend_eagerly(transport, step, grads)
    return _drift_norms(transport, step.out, grads)


def mix_descend_drift(transport: Transport, step: MixStep) -> torch.Tensor:
    """:func:`mix_descend`, then ``grads <- out - last_sent`` (the drift); returns each
    row's norm of it."""
    grads = _grads(step)
    fused = transport.fused_mix
    if fused is not None:
        return _norms(fused(step, keep=True, drift="kept"))
    _mix_descend_eagerly(transport, step, grads)
    return _drift_norms(transport, step.out, grads)


def _grads(step: MixStep) -> torch.Tensor:
    """The step's gradients, which a step that descends needs."""
    if step.grads is None:
        raise TypeError("a mixing step with a gradient step needs the step's grads")
    return step.grads


def _mix_descend_eagerly(transport: Transport, step: MixStep, grads: torch.Tensor) -> None:
    """``out += scale * operator @ V``, then ``out -= alpha * grads``: two torch calls."""
    transport.mix(step.operator, out=step.out, scale=step.scale)
    step.out.add_(grads, alpha=-step.alpha)


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
