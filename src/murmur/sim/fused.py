"""One-pass mixing steps for the simulator, compiled with ``torch.compile``.

A synchronous step reads and writes the stacked (agents, P) state several times
when it is written as separate torch calls: the sparse mixing product, the
gradient step, the drift ``x - x^`` and its norm. With many agents the state
does not fit in the caches, so each of those passes costs a trip through
memory, and together they cost as much as the gradient itself. Here the mixing
is a gather over each agent's neighbour list (its row of the operator, padded
to the largest degree) and the whole update, with the drift's norm, is one
function that inductor turns into one loop over the state, written in C++.

:class:`FusedMixing` is what :class:`~murmur.sim.transport.InMemoryTransport`
offers as ``fused_mix`` when a run is compiled (``run.compile``); the
algorithms reach it through :func:`murmur.algorithms.mixing.mix_and_step`,
whose eager path is the reference the tests hold the compiled one to.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import torch

VARIANTS = 128
"""How many compiled variants (shapes, dtypes, flags) the kernel may have in one process."""


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


def _mix_step(
    out: torch.Tensor,
    values: torch.Tensor,
    index: torch.Tensor,
    weight: torch.Tensor,
    grads: torch.Tensor,
    scalars: torch.Tensor,
    keep: bool,
    descend: bool,
    drift: bool,
    keep_drift: bool,
) -> torch.Tensor:
    """The fused update; see :meth:`FusedMixing.__call__` (``scalars``: scale, alpha)."""
    mixed = (weight * values[index]).sum(dim=1)
    new = mixed * scalars[0]
    if keep:
        new = new + out
    if descend:
        new = new - scalars[1] * grads
    out.copy_(new)
    if not drift:
        return new.new_zeros(())
    difference = new - values
    if keep_drift:
        grads.copy_(difference)
    return torch.linalg.vector_norm(difference, dim=1)


class FusedMixing:
    """``out <- [out] + scale * operator @ V - alpha * grads`` in one pass, V being the
    values ``sent()`` returns; also ``||out - V||`` per row when asked."""

    def __init__(self, sent: Callable[[], torch.Tensor], cache: int = 64) -> None:
        self.sent = sent
        self._kernel = torch.compile(_mix_step, dynamic=False, fullgraph=True)
        self._tables: OrderedDict[int, tuple[torch.Tensor, NeighbourTable]] = OrderedDict()
        self._cache = cache

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

    def __call__(
        self,
        operator: torch.Tensor,
        out: torch.Tensor,
        scale: float,
        grads: torch.Tensor | None,
        alpha: float,
        keep: bool,
        drift: bool,
        keep_drift: bool,
    ) -> torch.Tensor | None:
        """Update ``out`` in place; return ``||out - V||`` per row when ``drift``, and leave
        ``out - V`` in ``grads`` when ``keep_drift`` too."""
        values = self.sent()
        table = self.table(operator, values.dtype)
        descend = grads is not None
        scratch = grads if grads is not None else out
        # One compiled variant per shape and flags: a process that runs many shapes (a
        # benchmark over N, a test suite) needs more than dynamo's default 8.
        with torch._dynamo.config.patch(recompile_limit=VARIANTS):
            norms = self._kernel(
                out,
                values,
                table.index,
                table.weight,
                scratch,
                # Tensors, not floats: a float would be compiled in as a constant.
                torch.tensor([scale, alpha], dtype=values.dtype),
                keep,
                descend,
                drift,
                keep_drift and grads is not None,
            )
        return norms if drift else None
