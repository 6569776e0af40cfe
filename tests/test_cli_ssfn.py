"""The murmur command with SSFN presets: bad input is one line and exit 2; a small run works."""

from __future__ import annotations

import json

import pytest

from murmur.cli import main


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    """Run every command from a scratch folder, so nothing lands in the checkout."""
    monkeypatch.chdir(tmp_path)


def _sets(*items: str) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


@pytest.mark.parametrize(
    "preset, overrides, message",
    [
        ("dssfn-vowel", ["algorithm.mu=0"], "algorithm.mu must be positive"),
        ("dssfn-vowel", ["algorithm.mu=-1"], "algorithm.mu must be positive"),
        ("dssfn-vowel", ["algorithm.lam=0"], "algorithm.lam (lambda) must be positive"),
        ("dssfn-async-vowel", ["algorithm.eta=0"], "algorithm.eta must be in (0, 1]"),
        ("dssfn-async-vowel", ["algorithm.eta=1.5"], "algorithm.eta must be in (0, 1]"),
        (
            "dssfn-vowel",
            ["topology.agents=600"],
            "topology.agents=600 exceeds the 528 training samples",
        ),
        (
            "dssfn-vowel",
            ["timing.straggler_factor=0.5"],
            "timing.straggler_factor must be from 1 to 1e+06",
        ),
        ("ssfn-vowel", ["data.dataset=synthetic"], "ssfn needs a classification dataset"),
        (
            "dssfn-async-vowel",
            ["data.dataset=synthetic"],
            "dssfn-async needs a classification dataset",
        ),
    ],
)
def test_bad_ssfn_input_is_one_line_and_exit_2(capsys, tmp_path, preset, overrides, message):
    out = tmp_path / "out"
    code = main(["run", preset, *_sets(*overrides), "--quiet", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 2
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("murmur: error:"), captured.err
    assert message in lines[0]
    assert "Traceback" not in captured.out + captured.err
    assert not out.exists()


def test_disconnected_graph_is_refused_for_dssfn(capsys, tmp_path):
    edges = tmp_path / "edges.txt"
    edges.write_text("0 1\n1 2\n2 0\n3 4\n4 5  # a second triangle, not joined\n5 3\n")
    out = tmp_path / "out"
    argv = ["run", "dssfn-vowel", "--quiet", "--out", str(out)]
    argv += _sets("topology.graph=edges", f"topology.edges_file={edges}", "topology.agents=6")
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 2
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("murmur: error:"), captured.err
    assert "disconnected (2 components" in lines[0]
    assert "Traceback" not in captured.out + captured.err
    assert not out.exists()


@pytest.mark.kernels
def test_small_ssfn_run_writes_summary_and_one_record_per_layer(capsys, tmp_path):
    out = tmp_path / "run"
    argv = ["run", "ssfn-vowel", *_sets("algorithm.layers=2", "algorithm.nodes=50")]
    code = main([*argv, "--quiet", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["algorithm"] == "ssfn" and summary["dataset"] == "vowel"
    assert summary["virtual_seconds"] > 0
    assert summary["layers"] == [2 * 11 + 50, 2 * 11 + 50]
    assert summary["accuracy"]["mean"] > 0.4
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [record["layer"] for record in records] == [0, 1, 2]
    assert [record["width"] for record in records] == [10, 72, 72]
