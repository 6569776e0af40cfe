"""The compiled one-pass mixing step equals the eager calls it replaces."""

from __future__ import annotations

import pytest
import torch

from murmur.algorithms.mixing import (
    MixStep,
    mix_descend,
    mix_descend_drift,
    mix_descend_norms,
    mix_replace_descend,
)
from murmur.cli import main
from murmur.config import apply_overrides, build_config, read_preset
from murmur.errors import UsageError
from murmur.experiment import run
from murmur.portable import kernels_below_host
from murmur.sim import fused
from murmur.sim.fused import NeighbourTable
from murmur.sim.transport import InMemoryTransport
from murmur.topology import as_sparse, erdos_renyi
from murmur.training import plan as planning
from murmur.training.plan import plan
from murmur.training.setup import prepare

pytestmark = pytest.mark.kernels


def _irregular_graph():
    """Ten agents with degrees from 1 to 5, so that neighbour lists need padding."""
    return erdos_renyi(10, 0.35, seed=3)


def _transports(graph, sent):
    return (
        InMemoryTransport(graph, sent),
        InMemoryTransport(graph, sent, compiled=True),
    )


def test_neighbour_table_rebuilds_the_operator_row_by_row():
    graph = _irregular_graph()
    laplacian = graph.laplacian()
    table = NeighbourTable.of(as_sparse(laplacian), torch.float32)
    assert len(set(graph.degrees().tolist())) > 1
    rebuilt = torch.zeros_like(laplacian)
    for row in range(graph.agents):
        for column, weight in zip(table.index[row], table.weight[row, :, 0], strict=True):
            rebuilt[row, column] += weight
    torch.testing.assert_close(rebuilt.to(laplacian.dtype), laplacian)


def _mix(transport, step):
    transport.mix(step.operator, step.out, scale=step.scale)


@pytest.mark.parametrize(
    ("step", "options"),
    [
        (_mix, {"scale": -0.3}),
        (mix_descend, {"scale": -0.3, "alpha": 0.1}),
        (mix_replace_descend, {"scale": 0.7, "alpha": 0.2}),
        (mix_descend_norms, {"scale": -0.3, "alpha": 0.1}),
        (mix_descend_drift, {"scale": -0.3, "alpha": 0.1}),
    ],
    ids=["mix", "mix-descend", "replace-descend", "drift-norms", "drift-kept"],
)
def test_one_fused_step_equals_the_eager_calls(step, options):
    graph = _irregular_graph()
    operator = as_sparse(graph.laplacian())
    generator = torch.Generator().manual_seed(0)
    sent = torch.randn(graph.agents, 300, generator=generator)
    start = torch.randn(graph.agents, 300, generator=generator)
    grads = torch.randn(graph.agents, 300, generator=generator)
    results = []
    for transport in _transports(graph, sent):
        out, scratch = start.clone(), grads.clone()
        norms = step(transport, MixStep(operator, out, scratch, **options))
        results.append((out, scratch, norms))
    (eager_out, eager_scratch, eager_norms), (fused_out, fused_scratch, fused_norms) = results
    torch.testing.assert_close(fused_out, eager_out, rtol=1e-5, atol=1e-5)
    if step in (mix_descend_norms, mix_descend_drift):
        torch.testing.assert_close(fused_norms, eager_norms, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(fused_norms, torch.linalg.vector_norm(eager_out - sent, dim=1))
    if step is mix_descend_drift:
        torch.testing.assert_close(fused_scratch, eager_scratch, rtol=1e-5, atol=1e-5)


def test_the_plain_mix_of_a_compiled_transport_equals_the_sparse_product():
    graph = _irregular_graph()
    mixing = as_sparse(torch.eye(graph.agents) - 0.2 * graph.laplacian())
    sent = torch.randn(graph.agents, 50)
    outs = []
    for transport in _transports(graph, sent):
        out = torch.ones(graph.agents, 50)
        transport.mix(mixing, out=out, scale=0.5)
        outs.append(out)
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(outs[0], 1 + 0.5 * mixing.to_dense() @ sent)


SYNCHRONOUS = [
    ("dsgd", []),
    ("dsgd", ["algorithm.order=atc"]),
    ("detsgrad", []),
    ("detsgrad", ["algorithm.trigger=layer"]),
    ("detsgrad", ["algorithm.compress=topk", "algorithm.fraction=0.25"]),
    ("detsgrad-gt", []),
    ("dsgd", ["algorithm.optimizer=momentum", "algorithm.weight_decay=0.001"]),
    ("detsgrad", ["algorithm.optimizer=adam", "algorithm.a=0.01", "algorithm.v0=20"]),
    ("choco-sgd", []),
    ("sparq-sgd", []),
    ("centralized", []),
]


def _small(preset: str, extra: list[str], compile_: bool):
    _, raw = read_preset(preset)
    raw.pop("description", None)
    overrides = [
        "data.dataset=blobs",
        "model.hidden=[8]",
        "topology.agents=6",
        "data.batch_size=8",
        "run.iterations=100",
        "run.eval_every=100",
        f"run.compile={'true' if compile_ else 'false'}",
        *extra,
    ]
    return build_config(apply_overrides(raw, overrides))


@pytest.mark.parametrize(
    ("preset", "extra"), SYNCHRONOUS, ids=[" ".join([p, *e]) for p, e in SYNCHRONOUS]
)
def test_compiled_and_eager_runs_agree_over_100_steps(preset, extra, monkeypatch):
    eager = run(_small(preset, extra, compile_=False))
    monkeypatch.setattr(fused, "CHECK_EVERY_CALL", True)
    checked = run(_small(preset, extra, compile_=True))
    # Every step's compiled result, on the state the run reached, within float rounding
    # of the eager one; only where torch's kernels are pinned below the CPU's does the
    # run step eagerly without compiling.
    assert checked.extra.get("compile_fallback") == _expected_fallback()
    monkeypatch.setattr(fused, "CHECK_EVERY_CALL", False)
    compiled = run(_small(preset, extra, compile_=True))
    # Rounding gaps of 1e-7 per step grow through 100 steps of the dynamics to about
    # 1e-4 (1.4e-4 with AVX-512 kernels); a wrong kernel moves them by 1e-1 or more.
    torch.testing.assert_close(compiled.parameters, eager.parameters, rtol=1e-3, atol=1e-3)
    assert compiled.events == eager.events
    assert compiled.messages == eager.messages
    assert compiled.bytes == eager.bytes


def _expected_fallback() -> str | None:
    below = kernels_below_host()
    if below is None:
        return None
    return f"run.compile: {below}, and torch.compile builds kernels for the CPU's; stepping eagerly"


def test_auto_compiles_only_runs_long_enough_to_pay_for_it(monkeypatch):
    config = _small("detsgrad", ["run.compile=auto"], compile_=False)
    setup = prepare(config)
    assert not plan(config).compiled
    work = setup.graph.agents * setup.initial.shape[1] * config.run.iterations
    monkeypatch.setattr(planning, "COMPILE_WORTH", work)
    assert plan(config).compiled == planning.compiler_available()


def test_compile_true_is_refused_where_the_step_stays_eager():
    with pytest.raises(UsageError, match=r"run.compile = true needs a run without \[faults\]"):
        prepare(_small("detsgrad", ["faults.drop=0.1"], compile_=True))


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["run", "ssfn-vowel"], "no compiled step for ssfn"),
        (["run", "detsgrad", "--set", "faults.drop=0.1"], "needs a run without [faults]"),
        (["run", "detsgrad", "--set", "topology.varying=matching"], "with a fixed graph"),
    ],
    ids=["layerwise", "faults", "varying"],
)
def test_compile_true_where_nothing_compiles_is_one_line_and_exit_2(argv, words, tmp_path, capsys):
    out = tmp_path / "run"
    code = main([*argv, "--set", "run.compile=true", "--out", str(out)])
    _, err = capsys.readouterr()
    assert code == 2
    assert err.count("\n") == 1 and words in err, err
    assert not out.exists()


def test_the_distributed_runtime_refuses_compile_true():
    config = _small("detsgrad", [], compile_=True)
    with pytest.raises(UsageError, match="distributed runtime steps eagerly"):
        plan(config, "distributed")
    assert plan(config, "simulator").compiled


def test_a_large_neighbour_sum_goes_slot_by_slot_to_the_same_rows(monkeypatch):
    from murmur.sim import fused

    generator = torch.Generator().manual_seed(0)
    values = torch.randn(6, 50, generator=generator)
    index = torch.randint(0, 6, (6, 4), generator=generator)
    weight = torch.rand(6, 4, 1, generator=generator)
    whole = fused.neighbour_sum(weight, values, index)
    monkeypatch.setattr(fused, "GATHER_LIMIT", 10)  # 6 x 4 x 50 gathered values are more
    by_slot = fused.neighbour_sum(weight, values, index)
    expected = sum(weight[:, j] * values[index[:, j]] for j in range(4))
    torch.testing.assert_close(by_slot, expected, rtol=0, atol=0)
    torch.testing.assert_close(whole, expected, rtol=1e-6, atol=1e-6)
