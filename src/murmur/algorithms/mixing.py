"""A mixing step and a gradient step together, fused where the transport can.

Most synchronous rules end a step with ``x <- x + scale * operator @ V - alpha * g``
(V: the values the agents last sent) and then look at the drift ``x - x^``.
Written as separate torch calls that is four or five passes over the stacked
state; a transport that holds every agent's values in one tensor (the
simulator's, when the run is compiled) may offer ``fused_mix``, which does it
all in one (:mod:`murmur.sim.fused`). :func:`mix_and_step` takes that path when
it exists and otherwise makes exactly the calls the rules made before, so that
eager runs keep their numbers bit for bit.
"""

from __future__ import annotations

from typing import Literal, overload

import torch

from murmur.algorithms.protocols import Transport


@overload
def mix_and_step(
    transport: Transport,
    operator: torch.Tensor,
    out: torch.Tensor,
    *,
    scale: float = ...,
    grads: torch.Tensor,
    alpha: float = ...,
    keep: bool = ...,
    drift: Literal[True],
    keep_drift: bool = ...,
) -> torch.Tensor: ...


@overload
def mix_and_step(
    transport: Transport,
    operator: torch.Tensor,
    out: torch.Tensor,
    *,
    scale: float = ...,
    grads: torch.Tensor | None = ...,
    alpha: float = ...,
    keep: bool = ...,
    drift: bool = ...,
    keep_drift: bool = ...,
) -> torch.Tensor | None: ...


def mix_and_step(
    transport: Transport,
    operator: torch.Tensor,
    out: torch.Tensor,
    *,
    scale: float = 1.0,
    grads: torch.Tensor | None = None,
    alpha: float = 0.0,
    keep: bool = True,
    drift: bool = False,
    keep_drift: bool = False,
) -> torch.Tensor | None:
    """``out <- (out if keep else 0) + scale * operator @ V - alpha * grads``, in place.

    With ``drift``, returns each row's ``||out - last_sent||`` and uses ``grads`` as
    scratch; with ``keep_drift`` too, ``grads`` holds ``out - last_sent`` afterwards.
    """
    if drift and grads is None:
        raise ValueError("the drift needs grads as scratch space")
    fused = getattr(transport, "fused_mix", None)
    if fused is not None:
        return fused(operator, out, scale, grads, alpha, keep, drift, keep_drift)
    if not keep:
        out.zero_()
    transport.mix(operator, out=out, scale=scale)
    if grads is not None:
        out.add_(grads, alpha=-alpha)
    if not drift or grads is None:
        return None
    difference = torch.sub(out, transport.last_sent, out=grads)
    return torch.linalg.vector_norm(difference, dim=1)


def broadcast_all(transport: Transport, values: torch.Tensor) -> None:
    """Every agent sends its row of ``values``, which the caller then overwrites whole:
    a transport that can (the simulator's) takes the values without copying them and
    leaves other numbers in ``values``."""
    overwriting = getattr(transport, "broadcast_all_overwriting", None)
    if overwriting is not None:
        overwriting(values)
        return
    transport.broadcast(torch.ones(values.shape[0], dtype=torch.bool, device=values.device), values)
