"""The compiled step checks itself against the eager one on the run's own state, and
steps eagerly, saying why in one line, where they disagree, where the kernel does not
build, and where torch's kernels are pinned below the CPU's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from murmur.algorithms.mixing import MixStep, mix_descend, mix_descend_norms
from murmur.portable import host_capability
from murmur.sim import fused
from murmur.sim.fused import _Flags, _mix_step, _Step
from murmur.sim.transport import InMemoryTransport
from murmur.topology import as_sparse, erdos_renyi

pytestmark = pytest.mark.kernels

GRAPH = erdos_renyi(10, 0.35, seed=3)
OPERATOR = as_sparse(torch.eye(10) - 0.2 * GRAPH.laplacian())


def _tensors(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(10, 300, generator=generator) for _ in range(3))  # type: ignore[return-value]


def _step(sent, out, grads, table=None) -> _Step:
    return _Step(
        out=out,
        values=sent,
        table=table or fused.NeighbourTable.of(OPERATOR, sent.dtype),
        scratch=grads,
        scalars=torch.tensor([1.0, 0.1]),
        flags=_Flags(keep=True, descend=True, drift=True, keep_drift=False),
    )


def test_the_rounding_bound_covers_any_order_of_the_sums():
    sent, start, grads = _tensors()
    step = _step(sent, start.clone(), grads.clone())
    bound = fused.rounding_bound(step)
    exact = start.double() + (OPERATOR.to_dense().double() @ sent.double()) - 0.1 * grads.double()
    forward = step.out.clone()
    step.run(_mix_step, forward, step.scratch.clone())
    # The same sums with the neighbours taken in the opposite order.
    table = step.table
    reversed_table = fused.NeighbourTable(table.index.flip(1), table.weight.flip(1))
    backward = start.clone()
    _step(sent, backward, grads.clone(), reversed_table).run(_mix_step, backward, grads.clone())
    assert not torch.equal(forward, backward)  # the orders round differently
    assert bool(((forward.double() - exact).abs() <= bound / 2).all())
    assert bool(((forward - backward).abs() <= bound).all())
    # A gap of a thousandth of the values is far outside it.
    assert not bool(((forward * 1.001 - forward).abs() <= bound).all())


def _compiled_transport(sent: torch.Tensor, monkeypatch) -> InMemoryTransport:
    monkeypatch.setattr(fused, "kernels_below_host", lambda: None)
    return InMemoryTransport(GRAPH, sent, compiled=True)


def _eager_result(sent, start, grads):
    out, scratch = start.clone(), grads.clone()
    norms = mix_descend_norms(InMemoryTransport(GRAPH, sent), MixStep(OPERATOR, out, scratch, 0.1))
    return out, norms


def test_a_kernel_that_disagrees_with_the_eager_step_is_dropped_for_it(monkeypatch, capsys):
    sent, start, grads = _tensors()
    transport = _compiled_transport(sent, monkeypatch)

    def off_by_a_little(out, *rest):
        norms = _mix_step(out, *rest)
        out.add_(1e-3)
        return norms

    transport._fused._kernel = off_by_a_little  # type: ignore[union-attr]
    out, scratch = start.clone(), grads.clone()
    norms = mix_descend_norms(transport, MixStep(OPERATOR, out, scratch, 0.1))
    eager_out, eager_norms = _eager_result(sent, start, grads)
    torch.testing.assert_close(out, eager_out)  # the step kept is the eager one
    torch.testing.assert_close(norms, eager_norms)
    assert transport.fused_mix is None  # and the run steps eagerly from now on
    reason = transport.compile_fallback
    assert reason is not None and "differs from the eager one by up to 0.001" in reason
    err = capsys.readouterr().err
    assert err == f"murmur: {reason}\n"


def test_a_kernel_that_does_not_build_is_dropped_for_the_eager_step(monkeypatch, capsys):
    sent, start, grads = _tensors()
    transport = _compiled_transport(sent, monkeypatch)

    def broken(*arguments):
        raise RuntimeError("C++ compile error\nline two\nline three")

    transport._fused._kernel = broken  # type: ignore[union-attr]
    out, scratch = start.clone(), grads.clone()
    mix_descend_norms(transport, MixStep(OPERATOR, out, scratch, 0.1))
    torch.testing.assert_close(out, _eager_result(sent, start, grads)[0])
    assert transport.fused_mix is None
    assert "failed to build the step (RuntimeError: C++ compile error line two)" in (
        transport.compile_fallback or ""
    )
    assert len(capsys.readouterr().err.splitlines()) == 1


def test_a_kernel_that_agrees_is_checked_once_per_variant(monkeypatch):
    sent, start, grads = _tensors()
    transport = _compiled_transport(sent, monkeypatch)
    calls = []

    def counted(*arguments):
        calls.append(1)
        return _mix_step(*arguments)

    transport._fused._kernel = counted  # type: ignore[union-attr]
    for _ in range(3):
        mix_descend(transport, MixStep(OPERATOR, start.clone(), grads.clone(), 0.1))
    assert transport.compile_fallback is None and transport.fused_mix is not None
    assert len(calls) == 3  # each call compiled; the first also computed eagerly
    assert len(transport._fused._checked) == 1  # type: ignore[union-attr]


PINNED = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", "OMP_NUM_THREADS": "1"}


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=PINNED,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_run_with_kernels_pinned_to_avx2_falls_back_or_agrees(tmp_path):
    out = tmp_path / "run"
    settings = [
        "data.dataset=blobs",
        "model.hidden=[8]",
        "topology.agents=6",
        "run.iterations=20",
        "run.eval_every=20",
        "run.compile=true",
    ]
    completed = subprocess.run(
        [sys.executable, "-m", "murmur", "run", "dsgd", "--out", str(out)]
        + [f"--set={setting}" for setting in settings],
        env=PINNED,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    summary = json.loads((out / "summary.json").read_text())
    lines = [line for line in completed.stderr.splitlines() if "run.compile" in line]
    if host_capability() == "AVX512":
        assert lines == [
            "murmur: run.compile: torch computes with its AVX2 kernels "
            "(ATEN_CPU_CAPABILITY=avx2) on a CPU with AVX512, and torch.compile builds "
            "kernels for the CPU's; stepping eagerly"
        ]
        assert summary["compile_fallback"] == lines[0].removeprefix("murmur: ")
    else:
        assert lines == [] and "compile_fallback" not in summary


@pytest.mark.skipif(host_capability() != "AVX512", reason="needs kernels below an AVX-512 CPU's")
def test_the_check_catches_what_inductor_computes_under_pinned_kernels():
    # With the guard on pinned kernels lifted, the step check alone must keep the
    # eager numbers: the compiled kernel disagrees, or (a torch that fixed it) agrees.
    completed = _python(
        """
        import torch
        from murmur.algorithms.protocols import MixStep
        from murmur.sim import fused
        from murmur.topology import as_sparse, erdos_renyi
        fused.kernels_below_host = lambda: None
        graph = erdos_renyi(10, 0.35, seed=3)
        operator = as_sparse(torch.eye(10) - 0.2 * graph.laplacian())
        generator = torch.Generator().manual_seed(0)
        sent, start = torch.randn(2, 10, 300, generator=generator)
        mixing = fused.FusedMixing(lambda: sent)
        out = start.clone()
        mixing(MixStep(operator, out), keep=True, drift="none")
        exact = start + operator.to_dense() @ sent
        print(mixing.fallback)
        print(float((out - exact).abs().max()))
        """
    )
    assert completed.returncode == 0, completed.stderr
    fallback, gap = completed.stdout.splitlines()[-2:]
    assert float(gap) < 1e-4  # the numbers kept are right either way
    if fallback != "None":
        assert "differs from the eager one" in fallback or "failed to build" in fallback
