"""Plugins: a user's own algorithm, registered through murmur.extend, runs from the
command line with seeds and resumes, its plugin pinned by SHA-256; bad plugins are one
line and exit status 2 with nothing written."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
import torch
from small_runs import SMALL_SGD
from test_cli_resume import kill_after_a_checkpoint

import murmur
from murmur.cli import main
from murmur.config import load_experiment
from murmur.registry import ALGORITHMS, BUILT_IN

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "periodic_gossip.py"
WALL = {"wall_seconds", "train_seconds", "samples_per_second", "run_dir", "wall"}
SETS = [part for setting in SMALL_SGD for part in ("--set", setting)]


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def _summary(folder: Path) -> dict:
    summary = json.loads((folder / "summary.json").read_text())
    return {key: value for key, value in summary.items() if key not in WALL}


def _periodic(*settings: str) -> murmur.Config:
    overrides = [*SMALL_SGD, "algorithm.name=periodic-gossip", *settings]
    return load_experiment("dsgd", overrides, [str(EXAMPLE)]).runs[0][1]


def _plugin(tmp_path: Path, text: str, name: str = "mine.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


# ---- the example rule ----------------------------------------------------------------


def test_periodic_gossip_every_step_is_dsgd_adapt_then_combine(tmp_path):
    """Averaging every step, local SGD is DSGD's adapt-then-combine order, to the bit."""
    every = murmur.run(_periodic("algorithm.period=1"), tmp_path / "every")
    config = load_experiment("dsgd", [*SMALL_SGD, "algorithm.order=atc"]).runs[0][1]
    dsgd = murmur.run(config, tmp_path / "dsgd")
    assert every.accuracy == dsgd.accuracy and every.test_loss == dsgd.test_loss
    assert (every.messages, every.bytes) == (dsgd.messages, dsgd.bytes)


def test_periodic_gossip_sends_once_every_period(tmp_path):
    one = murmur.run(_periodic("algorithm.period=1"), tmp_path / "one")
    three = murmur.run(_periodic("algorithm.period=3"), tmp_path / "three")
    assert three.messages * 3 == one.messages  # 60 iterations: 20 averaging rounds of 60
    assert three.accuracy != one.accuracy


def test_the_example_registers_under_its_plugin():
    _periodic()
    member = ALGORITHMS["periodic-gossip"]
    assert member.origin == f"plugin {EXAMPLE}"
    assert all(ALGORITHMS[name].origin == BUILT_IN for name in ("dsgd", "detsgrad", "dssfn"))


# ---- the command line ----------------------------------------------------------------


def test_a_run_records_its_plugin_and_resumes_after_a_kill_to_the_bit(tmp_path):
    settings = ["--set", "run.iterations=600", "--set", "run.eval_every=200"]
    settings += ["--set", "run.checkpoint_every=100", "--set", "algorithm.name=periodic-gossip"]
    argv = ["run", "dsgd", *SETS, *settings, "--plugin", str(EXAMPLE), "--quiet"]
    killed = tmp_path / "killed"
    kill_after_a_checkpoint([sys.executable, "-m", "murmur", *argv, "--out", str(killed)], killed)
    assert not (killed / "summary.json").exists()
    assert main(["run", "--resume", str(killed), "--quiet"]) == 0
    assert main([*argv, "--out", str(tmp_path / "whole")]) == 0
    assert _summary(killed) == _summary(tmp_path / "whole")
    run = tomllib.loads((killed / "config.toml").read_text())["run"]
    assert run["plugins"] == [str(EXAMPLE)]
    assert run["plugins_sha256"] == [hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()]


def test_resume_refuses_a_plugin_that_changed(tmp_path, capsys):
    text = EXAMPLE.read_text().replace('"periodic-gossip"', '"periodic-gossip-changed"')
    plugin = _plugin(tmp_path, text, "changing.py")
    settings = ["run.iterations=1500", "run.checkpoint_every=100"]
    settings.append("algorithm.name=periodic-gossip-changed")
    sets = [part for setting in settings for part in ("--set", setting)]
    folder = tmp_path / "run"
    argv = ["run", "dsgd", *SETS, *sets, "--plugin", str(plugin), "--quiet", "--out", str(folder)]
    kill_after_a_checkpoint([sys.executable, "-m", "murmur", *argv], folder)
    plugin.write_text(text.replace("alpha=-self.alpha", "alpha=-2 * self.alpha"))
    before = sorted(path.name for path in folder.iterdir())
    assert main(["run", "--resume", str(folder), "--quiet"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "has changed since the run was planned" in error
    assert str(plugin) in error
    assert sorted(path.name for path in folder.iterdir()) == before


def test_a_toml_names_its_plugins_relative_to_itself(tmp_path):
    folder = tmp_path / "study"
    folder.mkdir()
    text = EXAMPLE.read_text().replace('"periodic-gossip"', '"periodic-gossip-toml"')
    _plugin(folder, text, "rule.py")
    (folder / "study.toml").write_text(
        'extends = "dsgd"\nplugins = ["rule.py"]\n'
        '[algorithm]\nname = "periodic-gossip-toml"\nperiod = 4\n'
    )
    experiment = load_experiment(str(folder / "study.toml"), SMALL_SGD)
    config = experiment.runs[0][1]
    assert config.algorithm.name == "periodic-gossip-toml" and config.algorithm.period == 4
    assert config.run.plugins == (str(folder / "rule.py"),)


def test_presets_lists_the_algorithms_of_a_plugin(capsys):
    assert main(["presets", "--plugin", str(EXAMPLE)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"algorithm periodic-gossip from plugin {EXAMPLE}: average every `period` steps" in lines


# ---- bad plugins ---------------------------------------------------------------------

GOOD_RULE = """
    from dataclasses import dataclass
    import murmur.extend as mm
    from murmur.algorithms.dsgd import Dsgd

    @dataclass(frozen=True)
    class Config(mm.SgdConfig):
        name = "{name}"
        b: mm.Step = "auto"
        weights: str = "laplacian"
        order: str = "cta"

    {extra}
"""


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("missing.py", None, "no such file"),
        ("broken.py", "def f(:\n", "invalid Python at line 1"),
        ("raises.py", "x = 1\nraise RuntimeError('no GPU here')\n", "RuntimeError: no GPU here"),
        (
            "clash.py",
            GOOD_RULE.format(
                name="dsgd",
                extra="mm.register_algorithm(Config, lambda c, g, x: Dsgd(c, g), 'mine')",
            ),
            "algorithm name 'dsgd' is taken by a built-in algorithm",
        ),
        (
            "lacking.py",
            GOOD_RULE.format(
                name="lacking",
                extra="class Rule:\n        def init(self, p): return p\n"
                "    mm.register_algorithm(Config, Rule, 'mine')",
            ),
            "Rule lacks initial_sent, params, step, chosen_steps",
        ),
        (
            "notaconfig.py",
            "import murmur.extend as mm\nmm.register_algorithm(dict, dict, 'x')\n",
            "is not a config class",
        ),
        ("nomodule", None, "no module of that name is installed"),
    ],
)
def test_a_bad_plugin_is_one_line_and_exit_2_with_nothing_written(
    tmp_path, capsys, name, text, message
):
    path = _plugin(tmp_path, text, name) if text is not None else tmp_path / name
    spec = str(path) if name.endswith(".py") else name
    before = set(ALGORITHMS)
    out = tmp_path / "out"
    assert main(["run", "dsgd", *SETS, "--plugin", spec, "--out", str(out), "--quiet"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and message in error and spec in error, error
    assert not out.exists()
    assert set(ALGORITHMS) == before  # what it registered before failing is taken back


def test_a_rule_built_by_a_function_is_checked_when_built(tmp_path, capsys):
    path = _plugin(
        tmp_path,
        GOOD_RULE.format(
            name="built-badly", extra="mm.register_algorithm(Config, lambda c, g, x: object(), 'x')"
        ),
        "built.py",
    )
    argv = ["run", "dsgd", *SETS, "--plugin", str(path), "--set", "algorithm.name=built-badly"]
    assert main([*argv, "--quiet", "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip()
    assert f"algorithm 'built-badly' (plugin {path})" in error and "lacks init" in error


def test_an_error_in_the_users_rule_shows_their_frames_and_leaves_a_failed_summary(tmp_path):
    text = EXAMPLE.read_text().replace('"periodic-gossip"', '"periodic-gossip-buggy"')
    text = text.replace("        return state\n", "        raise KeyError('my bug')\n", 1)
    path = _plugin(tmp_path, text, "buggy.py")
    out = tmp_path / "out"
    argv = ["run", "dsgd", *SETS, "--plugin", str(path), "--set"]
    argv += ["algorithm.name=periodic-gossip-buggy", "--quiet", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "murmur", *argv], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1, done.stderr
    assert f'File "{path}"' in done.stderr and "KeyError: 'my bug'" in done.stderr
    assert json.loads((out / "summary.json").read_text())["status"] == "failed"


def test_plugins_are_refused_with_resume(tmp_path, capsys):
    argv = ["run", "--resume", str(tmp_path), "--plugin", str(EXAMPLE)]
    assert main(argv) == 2
    assert "drop --plugin" in capsys.readouterr().err


def test_an_installed_package_registers_through_its_entry_point(tmp_path):
    """A package with an entry point in the group murmur.plugins is imported by every
    run: its algorithm runs by name, with no --plugin."""
    text = EXAMPLE.read_text().replace('"periodic-gossip"', '"periodic-gossip-installed"')
    (tmp_path / "site" / "gossip_pkg").mkdir(parents=True)
    (tmp_path / "site" / "gossip_pkg" / "__init__.py").write_text(text)
    info = tmp_path / "site" / "gossip_pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gossip-pkg\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[murmur.plugins]\ngossip = gossip_pkg\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    listed = subprocess.run(
        [sys.executable, "-m", "murmur", "presets"], capture_output=True, text=True, env=env
    )
    origin = "plugin gossip_pkg (package gossip-pkg, entry point gossip)"
    assert f"algorithm periodic-gossip-installed from {origin}" in listed.stdout, listed.stderr
    argv = ["run", "dsgd", *SETS, "--set", "algorithm.name=periodic-gossip-installed"]
    done = subprocess.run(
        [sys.executable, "-m", "murmur", *argv, "--quiet", "--out", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert _summary(tmp_path / "run")["algorithm"] == "periodic-gossip-installed"


# ---- compressors and graphs ----------------------------------------------------------

COMPRESSOR = ROOT / "examples" / "compressors.py"
GRAPH = ROOT / "examples" / "graphs.py"


def test_a_plugins_compressor_sends_what_it_counts(tmp_path):
    """CHOCO-SGD with half-precision top-k sends 6 bytes an entry where top-k sends 8:
    the same messages, three quarters of the bytes; packed and unpacked, a code decodes
    to the sender's values bit for bit."""
    base = [*SMALL_SGD, "algorithm.fraction=0.1"]
    half = load_experiment("choco-sgd", [*base, "algorithm.compress=topk-half"], [str(COMPRESSOR)])
    topk = load_experiment("choco-sgd", [*base, "algorithm.compress=topk"])
    halved = murmur.run(half.runs[0][1], tmp_path / "half")
    full = murmur.run(topk.runs[0][1], tmp_path / "topk")
    assert halved.messages == full.messages and 4 * halved.bytes == 3 * full.bytes
    compressor = half.runs[0][1].algorithm.compressor()
    values = torch.randn(3, 50)
    code = compressor.compress(values, None)
    for row in range(3):
        data = compressor.pack(code, row)
        assert data.numel() == compressor.nbytes(50, 4)
        again = compressor.decode(compressor.unpack(data, 50, torch.float32), 50)
        assert torch.equal(again[0], compressor.decode(code, 50)[row])


def test_a_plugins_graph_runs_by_name_and_check_says_whose_it_is(tmp_path, capsys):
    settings = [*SETS, "--set", "topology.graph=small-world", "--plugin", str(GRAPH)]
    assert main(["run", "dsgd", *settings, "--check"]) == 0
    assert "topology.graph" not in capsys.readouterr().err
    config = load_experiment("dsgd", [*SMALL_SGD, "topology.graph=small-world"], [str(GRAPH)])
    result = murmur.run(config.runs[0][1], tmp_path / "run")
    ring_edges, agents = 6, 6
    assert result.topology == "small-world" and result.messages > 60 * 2 * ring_edges
    assert result.messages <= 60 * 2 * (ring_edges + agents)


def test_check_names_the_plugin_of_a_runs_algorithm(capsys):
    argv = ["run", "dsgd", *SETS, "--plugin", str(EXAMPLE), "--set"]
    assert main([*argv, "algorithm.name=periodic-gossip", "--check"]) == 0
    assert f"periodic-gossip from plugin {EXAMPLE}, sgd family" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "import murmur.extend as mm\nmm.register_graph('ring', lambda a, s, o: None, 'x')\n",
            "graph name 'ring' is taken by a built-in graph",
        ),
        (
            "import murmur.extend as mm\nmm.register_compressor('Top K', None, 'x')\n",
            "a compressor's name is lower-case letters",
        ),
    ],
)
def test_a_plugin_that_registers_a_bad_graph_or_compressor_is_one_line(
    tmp_path, capsys, text, message
):
    path = _plugin(tmp_path, text, "bad.py")
    assert main(["run", "dsgd", *SETS, "--plugin", str(path), "--check"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and message in error


def test_a_graph_that_makes_something_else_is_one_line(tmp_path, capsys):
    text = "import murmur.extend as mm\nmm.register_graph('nothing', lambda a, s, o: 3, 'x')\n"
    path = _plugin(tmp_path, text, "nothing.py")
    argv = ["run", "dsgd", *SETS, "--plugin", str(path), "--set", "topology.graph=nothing"]
    assert main([*argv, "--check"]) == 2
    error = capsys.readouterr().err.strip()
    assert f"graph 'nothing' (plugin {path}) made an object of type int, not a Graph" in error
