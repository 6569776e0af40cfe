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

from murmur.algorithms.protocols import Drift, MixStep, Transport

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
    _mix(transport, MixStep(step.operator, step.out, scale=step.scale), keep=False, drift="none")


def mix_replace_descend(transport: Transport, step: MixStep) -> None:
    """``out <- scale * operator @ V - alpha * grads``, in place."""
    _mix(transport, _descending(step), keep=False, drift="none")


def mix_descend(transport: Transport, step: MixStep) -> None:
    """``out <- out + scale * operator @ V - alpha * grads``, in place."""
    _mix(transport, _descending(step), keep=True, drift="none")


def mix_descend_norms(transport: Transport, step: MixStep) -> torch.Tensor:
    """:func:`mix_descend`, then each row's drift ``||out - last_sent||``; ``grads`` is
    scratch space (its numbers may be anything afterwards)."""
    return _norms(_mix(transport, _descending(step), keep=True, drift="norms"))


def mix_descend_drift(transport: Transport, step: MixStep) -> torch.Tensor:
    """:func:`mix_descend`, then ``grads <- out - last_sent`` (the drift); returns each
    row's norm of it."""
    return _norms(_mix(transport, _descending(step), keep=True, drift="kept"))


def _mix(transport: Transport, step: MixStep, *, keep: bool, drift: Drift) -> torch.Tensor | None:
    """``step`` as :class:`~murmur.algorithms.protocols.FusedMix` states it, through the
    transport's ``fused_mix`` where it has one, else in separate torch calls: ``mix``,
    the gradient step, then the drift ``grads <- out - last_sent`` and its rows' norms."""
    fused = transport.fused_mix
    if fused is not None:
        return fused(step, keep=keep, drift=drift)
    if not keep:
        step.out.zero_()
    transport.mix(step.operator, out=step.out, scale=step.scale)
    if step.grads is None:
        return None
    step.out.add_(step.grads, alpha=-step.alpha)
    if drift == "none":
        return None
    difference = torch.sub(step.out, transport.last_sent, out=step.grads)
    return torch.linalg.vector_norm(difference, dim=1)


def _descending(step: MixStep) -> MixStep:
    """``step``, which must have the gradients of its gradient step."""
    if step.grads is None:
        raise TypeError("a mixing step with a gradient step needs the step's grads")
    return step


def _norms(returned: torch.Tensor | None) -> torch.Tensor:
    """The drift's norms :func:`_mix` returns when asked for them."""
    if returned is None:
        raise TypeError("a mixing step asked for the drift returned no norms")
    return returned
