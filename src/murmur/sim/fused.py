"""One-pass mixing steps for the simulator, compiled with ``torch.compile``.

A synchronous step reads and writes the stacked (agents, P) state several times
when it is written as separate torch calls: the sparse mixing product, the
gradient step, the drift ``x - x^`` and its norm. With many agents the state
does not fit in the caches, so each of those passes costs a trip through
memory, and together they cost as much as the gradient itself. Here the mixing
is a gather over each agent's neighbour list (its row of the operator, padded
to the largest degree) and the whole update, with the drift's norm, is one
function that inductor turns into one loop over the state, written in C++.

:class:`FusedMixing` is the :class:`~murmur.algorithms.protocols.FusedMix` that
:class:`~murmur.sim.transport.InMemoryTransport` offers as ``fused_mix`` when a run
is compiled (``run.compile``); the algorithms reach it through
:mod:`murmur.algorithms.mixing`, whose eager paths are the reference the tests hold
the compiled one to.

The compiled kernel checks itself. Inductor builds it for this CPU and C++ compiler,
and it need not compute what the eager step does: with torch's kernels pinned below
the CPU's own (``ATEN_CPU_CAPABILITY=avx2`` on an AVX-512 machine) it computes other
numbers, and with ``default`` it does not build. So no kernel is compiled where
torch's kernels are pinned below the CPU's, and the first call of every compiled
variant (shapes, flags) is computed both ways on the run's own state: the eager
result is kept, and the two must agree to within what float32 rounding allows
(:func:`rounding_bound`). Otherwise the transport steps eagerly from then on and says
why in one line (:attr:`FusedMixing.fallback`).
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch

from murmur.algorithms.protocols import Drift, MixStep
from murmur.errors import one_line
from murmur.portable import kernels_below_host

VARIANTS = 128
"""How many compiled variants (shapes, dtypes, flags) the kernel may have in one process."""

GATHER_LIMIT = 2**27
"""Most values :func:`neighbour_sum` gathers at once (512 MB of float32)."""

CHECK_EVERY_CALL = False
"""Check every call of the compiled kernel against the eager step, not only the first
of each variant, keeping the eager result (the tests' way to hold a whole run's
compiled steps to the eager ones, each on the same state)."""


@dataclass(frozen=True)
class NeighbourTable:
    """A sparse (agents, agents) operator as padded rows: row i is
    sum_k weight[i, k] * V[index[i, k]]; padding points at i itself with weight 0."""

    index: torch.Tensor
    """(agents, width) int64."""
    weight: torch.Tensor
    """(agents, width, 1), of the values' dtype."""

    @classmethod
    def of(cls, operator: torch.Tensor, dtype: torch.dtype) -> NeighbourTable:
        csr = operator if operator.layout == torch.sparse_csr else operator.to_sparse_csr()
        rows = csr.crow_indices()
        counts = rows[1:] - rows[:-1]
        agents = counts.numel()
        width = max(1, int(counts.max())) if agents else 1
        index = torch.arange(agents).unsqueeze(1).repeat(1, width)
        weight = torch.zeros(agents, width, dtype=dtype)
        columns, values = csr.col_indices(), csr.values()
        for row in range(agents):
            start, end = int(rows[row]), int(rows[row + 1])
            index[row, : end - start] = columns[start:end]
            weight[row, : end - start] = values[start:end].to(dtype)
        return cls(index, weight.unsqueeze(2))


class _Flags(NamedTuple):
    """Which parts of the update a kernel does; each set of them is a compiled variant."""

    keep: bool
    """Add to ``out`` (else replace it)."""
    descend: bool
    """Subtract ``alpha * grads``."""
    drift: bool
    """Return the norms of ``out - V`` per row."""
    keep_drift: bool
    """Leave ``out - V`` in ``grads``."""

    @classmethod
    def of(cls, step: MixStep, keep: bool, drift: Drift) -> _Flags:
        descend = step.grads is not None
        return cls(keep, descend, drift != "none", drift == "kept" and descend)


def neighbour_sum(weight: torch.Tensor, values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Each row's weighted sum of its neighbours' rows: ``sum_j weight[i, j] *
    values[index[i, j]]``. Up to :data:`GATHER_LIMIT` gathered values in one gather;
    beyond, one neighbour slot at a time, which never holds more than two rows' worth
    (every slot at once would be width copies of the rows: 40 GB for 100 agents of a
    6.6 M-parameter network on a graph of degree 14)."""
    if index.numel() * values[0].numel() <= GATHER_LIMIT:
        return (weight * values[index]).sum(dim=1)
    total = weight[:, 0] * values[index[:, 0]]
    for slot in range(1, index.shape[1]):
        total = total + weight[:, slot] * values[index[:, slot]]
    return total


def _mix_step(
    out: torch.Tensor,
    values: torch.Tensor,
    index: torch.Tensor,
    weight: torch.Tensor,
    grads: torch.Tensor,
    scalars: torch.Tensor,
    flags: _Flags,
) -> torch.Tensor:
    """The fused update; see :meth:`FusedMixing.__call__` (``scalars``: scale, alpha)."""
    mixed = neighbour_sum(weight, values, index)
    new = mixed * scalars[0]
    if flags.keep:
        new = new + out
    if flags.descend:
        new = new - scalars[1] * grads
    out.copy_(new)
    if not flags.drift:
        return new.new_zeros(())
    difference = new - values
    if flags.keep_drift:
        grads.copy_(difference)
    return torch.linalg.vector_norm(difference, dim=1)


@dataclass(frozen=True)
class _Step:
    """One call of the kernel: its tensors and flags, in :func:`_mix_step`'s order."""

    out: torch.Tensor
    values: torch.Tensor
    table: NeighbourTable
    scratch: torch.Tensor
    scalars: torch.Tensor
    flags: _Flags

    def run(
        self, kernel: Callable[..., torch.Tensor], out: torch.Tensor, scratch: torch.Tensor
    ) -> torch.Tensor:
        """``kernel`` (:func:`_mix_step`, or its compiled form) on this step, writing into
        ``out`` and ``scratch``."""
        return kernel(
            out,
            self.values,
            self.table.index,
            self.table.weight,
            scratch,
            self.scalars,
            self.flags,
        )

    def variant(self) -> tuple[object, ...]:
        """What makes inductor compile another kernel: shapes, dtype, device and flags."""
        return (
            self.out.shape,
            self.values.shape,
            self.table.index.shape,
            self.values.dtype,
            self.values.device,
            *self.flags,
        )


def rounding_bound(step: _Step) -> torch.Tensor:
    """How far two float computations of ``step``'s new rows may lie apart, entry by
    entry, whatever order they add in and whether they fuse a multiply and an add.

    Each sums ``width + 2`` products (the neighbours', ``out``, the gradient), so each
    lies within ``(width + 2) u |terms|`` of the exact sum (u = eps / 2, the unit
    roundoff; Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., 3.1);
    two of them within twice that, doubled again for the products and the scale."""
    weight, index, values = step.table.weight, step.table.index, step.values
    scale, alpha = step.scalars.abs()
    terms = scale * neighbour_sum(weight.abs(), values.abs(), index)
    if step.flags.keep:
        terms = terms + step.out.abs()
    if step.flags.descend:
        terms = terms + alpha * step.scratch.abs()
    count = index.shape[1] + 2
    eps = torch.finfo(values.dtype).eps  # 2 u
    return 2 * count * eps * terms + torch.finfo(values.dtype).tiny


@dataclass(frozen=True)
class _Results:
    """What one computation of a step gives: the new rows, and the drift and its norms
    where asked."""

    rows: torch.Tensor
    drift: torch.Tensor | None
    norms: torch.Tensor | None

    @classmethod
    def of(
        cls, step: _Step, out: torch.Tensor, scratch: torch.Tensor, norms: torch.Tensor
    ) -> _Results:
        flags = step.flags
        return cls(out, scratch if flags.keep_drift else None, norms if flags.drift else None)


def disagreement(
    step: _Step, bound: torch.Tensor, eager: _Results, compiled: _Results
) -> str | None:
    """None when the eager and compiled results of ``step`` agree to within ``bound``
    (:func:`rounding_bound`, of the new rows) and what the drift and its norm add to
    it; else the largest gap, in words."""
    eps = torch.finfo(step.values.dtype).eps
    drift_bound = bound + 2 * eps * (eager.rows.abs() + step.values.abs())
    norm_bound = torch.linalg.vector_norm(drift_bound, dim=1)
    if eager.norms is not None:
        norm_bound = norm_bound + 2 * step.values.shape[1] * eps * eager.norms
    pairs = [
        ("new rows", eager.rows, compiled.rows, bound),
        ("drift", eager.drift, compiled.drift, drift_bound),
        ("drift norms", eager.norms, compiled.norms, norm_bound),
    ]
    for name, a, b, allowed in pairs:
        if a is None or b is None:
            continue
        gap = (a - b).abs()
        if bool((gap <= allowed).all()):
            continue
        worst = int(torch.argmax(gap - allowed))
        return (
            f"by up to {float(gap.flatten()[worst]):.3g} in its {name}, where float "
            f"rounding allows {float(allowed.flatten()[worst]):.3g}"
        )
    return None


class FusedMixing:
    """``out <- [out] + scale * operator @ V - alpha * grads`` in one pass, V being the
    values ``sent()`` returns; also ``||out - V||`` per row when asked."""

    def __init__(self, sent: Callable[[], torch.Tensor], cache: int = 64) -> None:
        self.sent = sent
        self._kernel = torch.compile(_mix_step, dynamic=False, fullgraph=True)
        self._tables: OrderedDict[int, tuple[torch.Tensor, NeighbourTable]] = OrderedDict()
        self._cache = cache
        self._checked: set[tuple[object, ...]] = set()
        self.fallback: str | None = None
        """Why the step is not compiled after all (None: it is); the transport then
        steps eagerly."""
        below = kernels_below_host()
        if below is not None:
            self._fall_back(f"{below}, and torch.compile builds kernels for the CPU's")

    def table(self, operator: torch.Tensor, dtype: torch.dtype) -> NeighbourTable:
        """The operator's neighbour lists, made once per operator (the ``cache`` most recent)."""
        known = self._tables.get(id(operator))
        if known is not None and known[0] is operator:
            self._tables.move_to_end(id(operator))
            return known[1]
        table = NeighbourTable.of(operator, dtype)
        # The operator is kept with its table so that its id is not reused.
        self._tables[id(operator)] = (operator, table)
        if len(self._tables) > self._cache:
            self._tables.popitem(last=False)
        return table

    def __call__(self, mix: MixStep, *, keep: bool, drift: Drift) -> torch.Tensor | None:
        """Update ``mix.out`` in place, adding to it with ``keep``; return ``||out - V||``
        per row unless ``drift`` is ``"none"``, and leave ``out - V`` in ``mix.grads``
        where it is ``"kept"``. The first call of a variant is computed both ways and
        checked (:meth:`_checked_step`)."""
        values = self.sent()
        step = _Step(
            out=mix.out,
            values=values,
            table=self.table(mix.operator, values.dtype),
            scratch=mix.grads if mix.grads is not None else mix.out,
            # Tensors, not floats: a float would be compiled in as a constant.
            scalars=torch.tensor([mix.scale, mix.alpha], dtype=values.dtype, device=values.device),
            flags=_Flags.of(mix, keep, drift),
        )
        if self.fallback is not None:
            norms = step.run(_mix_step, step.out, step.scratch)
        elif step.variant() in self._checked and not CHECK_EVERY_CALL:
            norms = self._compiled(step, step.out, step.scratch)
        else:
            norms = self._checked_step(step)
        return norms if step.flags.drift else None

    def _compiled(self, step: _Step, out: torch.Tensor, scratch: torch.Tensor) -> torch.Tensor:
        # One compiled variant per shape and flags: a process that runs many shapes (a
        # benchmark over N, a test suite) needs more than dynamo's default 8.
        with torch._dynamo.config.patch(recompile_limit=VARIANTS):
            return step.run(self._kernel, out, scratch)

    def _checked_step(self, step: _Step) -> torch.Tensor:
        """``step`` computed eagerly into the run's tensors and, unless the transport fell
        back already, compiled into copies of them; the two must agree to within
        :func:`rounding_bound`, else the transport falls back."""
        bound = rounding_bound(step)
        out, scratch = step.out.clone(), step.scratch.clone()
        norms = step.run(_mix_step, step.out, step.scratch)
        try:
            compiled = self._compiled(step, out, scratch)
        except Exception as error:  # inductor fails to build in many ways; each means eager
            first = " ".join(str(error).strip().splitlines()[:2])[:160]
            self._fall_back(
                f"torch.compile failed to build the step ({type(error).__name__}: {first})"
            )
            return norms
        gap = disagreement(
            step,
            bound,
            _Results.of(step, step.out, step.scratch, norms),
            _Results.of(step, out, scratch, compiled),
        )
        if gap is not None:
            self._fall_back(f"the compiled step differs from the eager one {gap}")
            return norms
        self._checked.add(step.variant())
        return norms

    def _fall_back(self, reason: str) -> None:
        self.fallback = one_line(f"run.compile: {reason}; stepping eagerly")
        sys.stderr.write(f"murmur: {self.fallback}\n")
        sys.stderr.flush()
