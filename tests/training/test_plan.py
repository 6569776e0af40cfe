"""One plan per run: every check before anything is built, the automatic choices
resolved, capabilities read as data, and a plan that travels to ranks unchanged."""

from __future__ import annotations

import dataclasses
import json

import pytest

from murmur.algorithms.detsgrad import Detsgrad
from murmur.algorithms.dssfn import SyncSolver
from murmur.algorithms.protocols import Algorithm
from murmur.config import load_experiment
from murmur.errors import UsageError
from murmur.registry import ALGORITHMS, FAMILIES, HOGWILD, LAYERWISE, SERVER, SGD
from murmur.training import plan as planning
from murmur.training.plan import Plan, plan, read_plan_file, write_plan_file
from murmur.training.setup import (
    HogwildSetup,
    LayerSetup,
    RoundsSetup,
    ServerSetup,
    build_context,
    prepare,
)

SMALL = ["data.dataset=blobs", "topology.agents=4", "run.iterations=20", "run.eval_every=10"]


def _config(preset: str, *settings: str):
    ((_, config),) = load_experiment(preset, [*SMALL, *settings]).runs
    return config


def test_every_algorithm_is_one_member_of_one_family():
    members = [name for family in (SGD, SERVER, HOGWILD, LAYERWISE) for name in family.members]
    assert sorted(members) == sorted(ALGORITHMS)
    assert len(members) == len(set(members))
    for name, member in ALGORITHMS.items():
        assert member.name == name == member.config.name
        assert FAMILIES[member.kind].kind == member.kind


def test_a_family_builds_what_its_runners_train():
    config = _config("detsgrad")
    setup = prepare(plan(config))
    assert isinstance(setup, RoundsSetup) and isinstance(setup.algorithm, Detsgrad)
    context = build_context(setup)
    built: Algorithm = SGD.build(config.algorithm, setup.graph, context)
    assert type(built) is Detsgrad
    with pytest.raises(TypeError, match="expected a DetsgradConfig"):
        SGD.members["detsgrad"].build(_config("dsgd").algorithm, setup.graph, context)


@pytest.mark.parametrize(
    ("preset", "settings", "kind", "transport", "setup_type"),
    [
        ("detsgrad", SMALL, "sgd", "in-memory", RoundsSetup),
        ("dsgd", [*SMALL, "faults.drop=0.1"], "sgd", "per-edge", RoundsSetup),
        ("dsgd", [*SMALL, "topology.varying=matching"], "sgd", "in-memory", RoundsSetup),
        ("detsgrad", [*SMALL, "topology.varying=matching"], "sgd", "per-edge", RoundsSetup),
        ("asysg-con", SMALL, "server", "server", ServerSetup),
        ("hogwild", SMALL, "hogwild", "shared memory", HogwildSetup),
        ("dssfn-vowel", [], "layerwise", "gossip", LayerSetup),
    ],
)
def test_the_plan_picks_the_family_transport_and_setup(
    preset, settings, kind, transport, setup_type
):
    ((_, config),) = load_experiment(preset, settings).runs
    checked = plan(config)
    assert (checked.kind, checked.transport) == (kind, transport)
    assert checked.runtime == "simulator" and checked.processes == 1
    setup = prepare(checked)  # hogwild's processes start only when it runs
    assert isinstance(setup, setup_type)
    if isinstance(setup, LayerSetup):
        assert isinstance(setup.solver, SyncSolver)


def test_the_plan_counts_the_ranks_of_a_distributed_run():
    assert plan(_config("asysg-con", "algorithm.workers=3"), "distributed").processes == 4
    blocks = plan(_config("dsgd", "topology.agents=64"), "distributed", agents_per_rank=16)
    assert (blocks.processes, blocks.agents_per_rank, blocks.transport) == (4, 16, "gloo")
    with pytest.raises(UsageError, match="--nproc is 3 but topology.agents is 4"):
        plan(_config("dsgd"), "distributed", world=3, world_name="--nproc")


def test_auto_compiles_from_the_work_the_plan_counts(monkeypatch):
    config = _config("detsgrad", "run.compile=auto")
    checked = plan(config)
    assert not checked.compiled
    work = checked.learners * checked.parameters * config.run.iterations
    assert work == 4 * prepare(checked).initial.shape[1] * 20
    monkeypatch.setattr(planning, "COMPILE_WORTH", work)
    assert plan(config).compiled == planning.compiler_available()
    assert not plan(config, "distributed").compiled


def test_a_capability_is_one_field_the_plan_reads(monkeypatch):
    """Taking one capability from one member's data is enough for the plan to refuse it,
    naming the member."""
    member = ALGORITHMS["dsgd"]
    without = dataclasses.replace(
        member, capabilities=dataclasses.replace(member.capabilities, compiles=False)
    )
    monkeypatch.setitem(ALGORITHMS, "dsgd", without)
    with pytest.raises(UsageError, match="no compiled step for dsgd, only for detsgrad,"):
        plan(_config("dsgd", "run.compile=true"))
    plan(_config("detsgrad", "run.compile=true"))


def test_every_check_runs_before_anything_is_built(monkeypatch):
    """A bad run is refused by the plan alone: the data is never loaded."""

    def no_loading(*args, **kwargs):
        raise AssertionError("the data was loaded")

    monkeypatch.setattr("murmur.training.data_plan.load_dataset", no_loading)
    with pytest.raises(UsageError, match="cannot run with topology.varying"):
        plan(_config("detsgrad-gt", "topology.varying=matching"))
    with pytest.raises(UsageError, match="does not run centralized"):
        plan(_config("centralized"), "distributed")
    with pytest.raises(UsageError, match="saves no checkpoints of dssfn-async"):
        ((_, config),) = load_experiment("dssfn-async-vowel", ["run.checkpoint_every=1"]).runs
        plan(config, "distributed")


def test_a_plan_travels_to_the_ranks_unchanged(tmp_path):
    checked = plan(_config("detsgrad", "topology.agents=8"), "distributed", agents_per_rank=2)
    assert Plan.from_json(checked.to_json()) == checked
    path = tmp_path / "plan.json"
    write_plan_file(path, checked, "detsgrad", "my-preset")
    assert read_plan_file(path) == (checked, "detsgrad", "my-preset")


@pytest.mark.parametrize(
    "text", ["", "{}", "[1]", json.dumps({"plan": "{}", "name": "a", "preset": "b"})]
)
def test_a_damaged_plan_file_is_one_clear_error(tmp_path, text):
    path = tmp_path / "plan.json"
    path.write_text(text)
    with pytest.raises(UsageError, match="is not a plan murmur launch wrote"):
        read_plan_file(path)
    with pytest.raises(UsageError, match="cannot read the plan"):
        read_plan_file(tmp_path / "missing.json")


def test_check_prints_what_the_plan_chose(capsys, tmp_path):
    from murmur.cli import main

    argv = ["run", "faults-drop", *(f"--set={s}" for s in SMALL), "--check", "--quiet"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "sgd family, per-edge transport, eager steps on cpu" in out
    assert not (tmp_path / "out").exists()


def test_the_summary_says_what_auto_steps_became(tmp_path):
    """On a ring of 4 agents the Laplacian's eigenvalues are 0, 2, 2 and 4, so the
    fastest consensus step 2 / (lambda_2 + lambda_max) is 1/3; DETSGRAD-GT takes half."""
    from murmur.experiment import run

    result = run(_config("detsgrad"), tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"] == {"b": pytest.approx(1 / 3)} == result.extra["steps"]
    assert summary["mixing"] == "laplacian"
    assert prepare(plan(_config("detsgrad-gt"))).steps == {"b": pytest.approx(1 / 6)}
    assert prepare(plan(_config("dsgd", "algorithm.b=0.25"))).steps == {"b": 0.25}
    assert prepare(plan(_config("centralized"))).steps == {}
