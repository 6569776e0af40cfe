"""A plugin's algorithm in real processes: `murmur launch --plugin` imports it in every
rank and gives the simulator's numbers; a TOML file's plugins travel in the plan."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from ranks import assert_records_match, launch, read_records

from murmur import runtimes_agree
from murmur.config import load_experiment
from murmur.experiment import run
from murmur.extend import assert_runtimes_agree

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "periodic_gossip.py"
SETTINGS = [
    "data.dataset=blobs",
    "model.hidden=[8]",
    "topology.agents=4",
    "data.batch_size=8",
    "run.iterations=60",
    "run.eval_every=20",
    "algorithm.name=periodic-gossip",
    "algorithm.period=3",
]


def test_four_ranks_of_a_plugins_rule_give_the_simulators_run(tmp_path):
    flags = [item for setting in SETTINGS for item in ("--set", setting)]
    out = tmp_path / "launched"
    argv = ["launch", "--nproc", "4", "dsgd", *flags, "--plugin", str(EXAMPLE)]
    done = launch([*argv, "--out", str(out), "--quiet"], timeout=240)
    assert done.returncode == 0, done.stderr
    launched = json.loads((out / "summary.json").read_text())
    ((_, config),) = load_experiment("dsgd", SETTINGS, [str(EXAMPLE)]).runs
    simulated = run(config, tmp_path / "simulated")
    assert launched["accuracy"] == simulated.accuracy
    for key in ("events", "messages", "bytes", "events_per_agent"):
        assert launched[key] == getattr(simulated, key), key
    assert launched["messages"] == 4 * 2 * 20  # 4 agents on a ring, one round in 3 of 60
    assert_records_match(read_records(out), read_records(tmp_path / "simulated"))


NETWORKS = Path(__file__).resolve().parents[2] / "examples" / "networks.py"


def _in_blocks_beside_the_simulator(tmp_path: Path, settings: list[str]) -> tuple[dict, object]:
    """DSGD with ``settings`` by two ranks of two agents (into tmp_path/launched) and in
    the simulator (tmp_path/simulated): the launched summary and the simulated result,
    their records matched."""
    flags = [item for setting in settings for item in ("--set", setting)]
    out = tmp_path / "launched"
    argv = ["launch", "--nproc", "2", "--agents-per-rank", "2", "dsgd", *flags]
    done = launch([*argv, "--out", str(out), "--quiet"], timeout=240)
    assert done.returncode == 0, done.stderr
    ((_, config),) = load_experiment("dsgd", settings).runs
    simulated = run(config, tmp_path / "simulated")
    assert_records_match(read_records(out), read_records(tmp_path / "simulated"))
    return json.loads((out / "summary.json").read_text()), simulated


def test_a_dropout_network_by_import_path_gives_the_simulators_run_in_blocks(tmp_path):
    """Each agent keys its own dropout masks: two ranks of two agents draw what one
    process of four does."""
    settings = [*SETTINGS[:6], "model.name=factory", f"model.factory={NETWORKS}:dropout_mlp"]
    settings.append('model.options=["p=0.3", "hidden=16"]')
    launched, simulated = _in_blocks_beside_the_simulator(tmp_path, settings)
    assert launched["accuracy"] == simulated.accuracy
    assert launched["test_loss"] == simulated.test_loss


def test_batch_norm_statistics_in_blocks_give_the_simulators_run_and_files(tmp_path):
    """Each agent's running statistics stay on its rank; the average model's scores use
    their mean, summed across the ranks; agents.pt gathers them all."""
    settings = [*SETTINGS[:6], "model.name=factory", f"model.factory={NETWORKS}:batch_norm_mlp"]
    launched, simulated = _in_blocks_beside_the_simulator(tmp_path, settings)
    assert launched["accuracy"] == simulated.accuracy
    assert launched["model"] == simulated.extra["model"] | {"file": "model.pt"}
    out = tmp_path / "launched"
    for name in ("agents.pt", "model.pt"):
        ours, theirs = (
            torch.load(f / name, weights_only=True) for f in (out, tmp_path / "simulated")
        )
        assert ours.keys() == theirs.keys() and "1.running_mean" in ours
        for key, tensor in ours.items():
            torch.testing.assert_close(tensor, theirs[key], rtol=0, atol=1e-6)


COMPRESSOR = Path(__file__).resolve().parents[2] / "examples" / "compressors.py"
GRAPH = Path(__file__).resolve().parents[2] / "examples" / "graphs.py"


def test_a_plugins_compressor_and_graph_agree_across_runtimes(tmp_path):
    """CHOCO-SGD with the half-precision top-k on the small world, four ranks against
    the simulator, checked by the helper murmur ships for users' own tests."""
    settings = [*SETTINGS[:6], "algorithm.compress=topk-half", "algorithm.fraction=0.1"]
    settings.append("topology.graph=small-world")
    ((_, config),) = load_experiment("choco-sgd", settings, [str(COMPRESSOR), str(GRAPH)]).runs
    assert_runtimes_agree(config, tmp_path)
    summary = json.loads((tmp_path / "launched" / "summary.json").read_text())
    assert summary["topology"] == "small-world" and summary["bytes"] > 0


def test_the_helper_names_what_differs(tmp_path):
    ((_, config),) = load_experiment("dsgd", SETTINGS, [str(EXAMPLE)]).runs
    run(config, tmp_path / "every-3")
    run(config.replace(**{"algorithm.period": "2"}), tmp_path / "every-2")
    found = runtimes_agree._differences(tmp_path / "every-3", tmp_path / "every-2", 1e-5)
    assert "messages: 160 against 240" in found
    assert any(item.startswith("record of iteration 20: messages") for item in found)
