"""A measured check of a compressed-gossip consensus step.

CHOCO-SGD, SPARQ-SGD and BEER mix public estimates with a step gamma. Too
large a gamma for the compressor and the graph, and the error x - x^ the
compressor leaves feeds back through the step: the agents' disagreement grows
geometrically and training diverges (top-k 1 % on 20 agents of an Erdos-Renyi
graph diverges at gamma 0.06 and holds at 0.05). No formula in the compressor's
delta and W's spectrum alone says where that starts, so :func:`bounded` measures
it: it runs CHOCO's gossip with the run's W and compressor and no gradients,
against the disagreement that data which differ between agents cause, a fixed
pull d_i on every agent each step (zero mean over agents, unit norm)::

    x_i <- x_i - d_i;  x^_i <- x^_i + C(x_i - x^_i);  x_i <- x_i + gamma sum_j w_ij (x^_j - x^_i)

and compares the consensus distance at steps 900, 1,200 and 1,500. Exact gossip
settles at a level set by d and W; a gamma the compressor cannot support makes
it grow. The pull never decays, which training's gradient differences do, so
the probe is a worst case: a step is accepted while the distance grows by at
most :data:`GROWTH` in those 600 steps, or while it grows ever more slowly (less
from 1,200 to 1,500 than from 900 to 1,200): a small step still settling, as rank-1
messages at gamma 0.0075 are (distances 336, 383, 418), is not a diverging one,
whose growth speeds up (letter's torus at 0.053: 45, 56, 74). A step well inside the stable range
settles (growth 1.00 to 1.03); near the edge the growth rises steeply, and
training there is unreliable. Measured against training (top-k 1 %, CHOCO-SGD and
BEER, 3,000 iterations):

- mnist5k, ring of 10: gamma 0.075, growth 1.44, training bounded;
- digits, Erdos-Renyi (20 agents, p = 0.3): 0.0415, growth 1.14 to 1.23 on four
  graphs, bounded; 0.06, growth 4.6, diverges;
- letter, 4 x 4 torus: 0.053, growth 1.65, diverges (CHOCO-SGD's consensus
  distance from 1.8 to 27); 0.0446, growth 1.005;

so growths up to 1.25 are accepted.

The check is deterministic (its own seed) and, for top-k, rand-k and the sign
scaled per model, runs on :data:`PROBE_ENTRIES` entries instead of the model's
P: their growth depends on the kept share, not on P (measured at P = 2,000 to
79,510: within 10 %). Other compressors are probed at the model's size.
"""

from __future__ import annotations

import math

import torch

from murmur.algorithms.compressors import (
    Compressor,
    RandK,
    ScaledSign,
    TopK,
    WarmStarts,
    compress_message,
)
from murmur.algorithms.estimates import message_draws

GROWTH = 1.25
"""Largest accepted growth of the probe's consensus distance from step 900 to 1,500."""
PROBE_ENTRIES = 2048
"""Entries the probe uses for compressors whose behaviour depends only on the kept share."""
_STEPS = (900, 1200, 1500)
_SEED = 0


def probe_size(compressor: Compressor, parameters: int) -> int:
    """How many entries the probe compresses for ``compressor`` on a model of ``parameters``."""
    share_only = isinstance(compressor, TopK | RandK) or (
        isinstance(compressor, ScaledSign) and not compressor.sizes
    )
    return min(parameters, PROBE_ENTRIES) if share_only else parameters


def distances(
    mixing: torch.Tensor, compressor: Compressor, parameters: int, gamma: float
) -> tuple[float, ...]:
    """The probe's consensus distance at steps 900, 1,200 and 1,500 (inf once it overflows)."""
    entries = probe_size(compressor, parameters)
    key = (_key(mixing), repr(compressor), entries, gamma)
    if key not in _MEASURED:
        _MEASURED[key] = _distances(mixing, compressor, entries, gamma)
    return _MEASURED[key]


def growth(mixing: torch.Tensor, compressor: Compressor, parameters: int, gamma: float) -> float:
    """The probe's consensus distance at step 1,500 over that at step 900."""
    first, _, last = distances(mixing, compressor, parameters, gamma)
    return last / max(first, 1e-30)


def bounded(mixing: torch.Tensor, compressor: Compressor, parameters: int, gamma: float) -> bool:
    """Whether compressed gossip with step ``gamma`` stays bounded: its distance grows by at
    most :data:`GROWTH`, or grows ever more slowly (a small step still settling; see the
    module docstring)."""
    first, middle, last = distances(mixing, compressor, parameters, gamma)
    settling = math.isfinite(last) and last - middle < middle - first
    return last / max(first, 1e-30) <= GROWTH or settling


def supported_step(
    mixing: torch.Tensor, compressor: Compressor, parameters: int, step: float
) -> float:
    """``step``, or the first of ``step`` shrunk by 2^(1/4) again and again (at most
    16 times) at which compressed gossip with ``mixing`` stays :func:`bounded`.

    Laplacian weights I - b L are checked as ``mixing`` I - L at ``step`` b: the
    probe only uses gamma (W - I)."""
    for _ in range(_SHRINKS):
        if bounded(mixing, compressor, parameters, step):
            break
        step *= _SHRINK
    return step


_SHRINKS = 16
_SHRINK = 2.0**-0.25


def _key(mixing: torch.Tensor) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(row) for row in mixing.tolist())


_MEASURED: dict[tuple[object, ...], tuple[float, ...]] = {}
"""Distances measured in this process, by W, compressor, probe size and step."""


def _distances(
    mixing: torch.Tensor, compressor: Compressor, entries: int, gamma: float
) -> tuple[float, ...]:
    weights = mixing.to(torch.float32)
    agents = weights.shape[0]
    difference = weights - torch.eye(agents)
    stream = torch.Generator().manual_seed(_SEED)
    pull = torch.randn(agents, entries, generator=stream)
    pull -= pull.mean(dim=0)
    pull /= torch.linalg.vector_norm(pull, dim=1, keepdim=True).clamp_min(1e-12)
    everyone, warm = list(range(agents)), WarmStarts()
    x = torch.zeros(agents, entries)
    estimates = torch.zeros(agents, entries)
    distances = []
    for step in range(1, _STEPS[-1] + 1):
        x -= pull
        draws = message_draws(_SEED, everyone, step, x.device)
        code = compress_message(compressor, x - estimates, draws, warm, "0")
        estimates += compressor.decode(code, entries)
        x += gamma * (difference @ estimates)
        if step in _STEPS:
            spread = x - x.mean(dim=0)
            distances.append(float(torch.linalg.vector_norm(spread, dim=1).mean()))
        if not torch.isfinite(x).all():
            return (*distances, *[math.inf] * (len(_STEPS) - len(distances)))
    return tuple(distances)
