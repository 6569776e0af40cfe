"""Property: any input ends in exit 0 with a complete result, or exit 2 with one line.

Generated inputs of six families go through the real command line, in-process:
config values for every key of every section and algorithm (``--set``, checked
with ``murmur run --check`` and, kept small, really run), free-form ``--set``
strings, TOML config files, MNIST-format IDX data files, edge-list files, and
damaged run folders given to ``murmur report``. See input_harness.py for the rule
each outcome is held to, the profiles, and the findings mode.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import shutil
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st
from input_harness import (
    Outcome,
    check_report,
    check_run,
    family_settings,
    invoke,
    snapshot,
    verdict,
)
from input_strategies import (
    FAST,
    RAW_JSON,
    PathCase,
    ReportCase,
    as_sets,
    config_cases,
    edge_cases,
    idx_cases,
    path_cases,
    preset_for_algorithm,
    report_cases,
    set_strings,
    set_value,
    short_run,
    toml_cases,
)

from murmur.cli import main
from murmur.registry import ALGORITHMS


@contextlib.contextmanager
def scratch():
    with tempfile.TemporaryDirectory(prefix="murmur-prop-") as folder:
        yield Path(folder)


def test_every_algorithm_has_a_preset_to_vary():
    assert set(preset_for_algorithm()) == set(ALGORITHMS)


def test_the_harness_sees_each_way_to_break_the_rule(tmp_path):
    """Tracebacks, other exit codes, extra lines, leftovers and incomplete folders."""
    out = tmp_path / "run"
    argv = ["run", "x"]
    ok_line = "murmur: error: bad\n"
    assert check_run(Outcome(argv, 2, "", ok_line), tmp_path, set(), out, check=True) == []
    broken = [
        Outcome(argv, None, "", "", error="Traceback ...", signature="KeyError in x.py:f"),
        Outcome(argv, 1, "", ok_line),
        Outcome(argv, 2, "", ok_line + "more\n"),
        Outcome(argv, 2, "", "oops\n"),
        Outcome(argv, 2, "", ok_line, warnings=["RuntimeWarning: overflow"]),
    ]
    for outcome in broken:
        assert check_run(outcome, tmp_path, set(), out, check=True), outcome
    out.mkdir()
    (out / "config.toml").write_text("")
    assert check_run(Outcome(argv, 2, "", ok_line), tmp_path, set(), out, check=True)
    assert check_run(Outcome(argv, 2, "", ok_line), tmp_path, set(), out, check=False)
    assert check_run(Outcome(argv, 0, "", ""), tmp_path, set(), out, check=False)
    (out / "metrics.jsonl").write_text("")
    (out / "summary.json").write_text('{"status": "failed", "error": "diverged"}')
    assert check_run(Outcome(argv, 2, "", ok_line), tmp_path, set(), out, check=False) == []
    assert check_run(Outcome(argv, 0, "", ""), tmp_path, set(), out, check=False)
    (out / "summary.json").write_text('{"status": "finished"}')
    assert check_run(Outcome(argv, 0, "", ""), tmp_path, set(), out, check=False) == []


# ---------------------------------------------------------------- config values


def _run_config_case(family: str, preset: str, sets: tuple[str, ...], check: bool) -> None:
    with scratch() as root:
        out = root / "run"
        flags = ["--check"] if check else []
        argv = ["run", preset, *flags, "--quiet", "--out", str(out), *as_sets(list(sets))]
        before = snapshot(root)
        outcome = invoke(family, argv, root, limit=30 if check else 90)
        verdict(family, outcome, check_run(outcome, root, before, out, check), root)


@family_settings("config-check")
@given(case=config_cases(check=True))
def _config_values_checked(case):
    """Every key of every section and algorithm, any value, through --check."""
    _run_config_case("config-check", case.preset, case.sets, check=True)


def test_config_values_checked():
    _config_values_checked()


@family_settings("config-run")
@given(case=config_cases(check=False))
def _config_values_run(case):
    """Short real runs: a complete folder, or one line (and a failed summary if it started)."""
    _run_config_case("config-run", case.preset, case.sets, check=False)


def test_config_values_run():
    _config_values_run()


# ---------------------------------------------------------------- paths


@family_settings("path-values")
@given(case=path_cases())
def _path_values(case: PathCase):
    """Awkward paths as the preset, --out, data.root, edges_file and report's folders."""
    assume(not (case.target == "report-out" and case.path.startswith("/")))
    with scratch() as root:
        (root / "file.txt").write_text("0 1\n")
        (root / "folder").mkdir()
        (root / "folder" / "inner.txt").write_text("x")
        (root / "loop").symlink_to("loop")
        (root / "dangling").symlink_to("missing")
        check = ["--check", "--quiet"]
        if case.target == "source":
            argv = ["run", case.path, *check, "--out", "run"]
        elif case.target == "out":
            argv = ["run", "detsgrad", *check, f"--out={case.path}", *as_sets(FAST)]
        elif case.target == "data.root":
            sets = [*FAST, f"data.dataset={case.dataset}", f"data.root={set_value(case.path)}"]
            argv = ["run", "detsgrad", *check, "--out", "run", *as_sets(sets)]
        elif case.target == "topology.edges_file":
            sets = [*FAST, "topology.graph=edges", f"topology.edges_file={set_value(case.path)}"]
            argv = ["run", "detsgrad", *check, "--out", "run", *as_sets(sets)]
        elif case.target == "report":
            argv = ["report", case.path, "--out", "report"]
        else:
            shutil.copytree(base_runs() / "sgd", root / "runs")
            argv = ["report", "runs", f"--out={case.path}"]
        before = snapshot(root)
        family = "path-values"
        outcome = invoke(family, argv, root, limit=60)
        if case.target == "report":
            problems = check_report(outcome, root, before, root / "report")
        elif case.target == "report-out":
            # An empty --out is no --out: the report goes into the one folder given.
            problems = check_report(outcome, root, before, root / (case.path or "runs"))
        else:
            # --check creates nothing, wherever --out points.
            problems = check_run(outcome, root, before, root / "run", check=True)
        verdict(family, outcome, problems, root)


def test_path_values():
    _path_values()


# ---------------------------------------------------------------- --set strings


@family_settings("set-strings")
@given(
    items=st.lists(set_strings(), min_size=1, max_size=3),
    algorithm=st.sampled_from(sorted(ALGORITHMS)),
)
def _set_strings(items, algorithm):
    preset = preset_for_algorithm()[algorithm]
    _run_config_case("set-strings", preset, (*FAST, *items), check=True)


def test_set_strings():
    _set_strings()


# ---------------------------------------------------------------- TOML files


@family_settings("toml-files")
@given(case=toml_cases())
def _toml_files(case):
    with scratch() as root:
        path = root / "cfg.toml"
        path.write_bytes(case.text)
        for name, content in case.others:
            (root / name).write_bytes(content)
        for name in case.folders:
            (root / name).mkdir()
        out = root / "run"
        source = "cfg.toml" if case.relative else str(path)
        argv = ["run", source, "--check", "--quiet", "--out", str(out)]
        if case.fast:
            argv += as_sets(FAST)
        before = snapshot(root)
        outcome = invoke("toml-files", argv, root, limit=30)
        problems = check_run(outcome, root, before, out, check=True)
        verdict("toml-files", outcome, problems, root, {"cfg.toml": case.text})


def test_toml_files():
    _toml_files()


# ---------------------------------------------------------------- IDX data files


@family_settings("idx-files")
@given(case=idx_cases())
def _idx_files(case):
    with scratch() as root:
        data = root / "data"
        data.mkdir()
        files = case.files()
        for name, content in files.items():
            if content is None:
                (data / name).mkdir()
            else:
                (data / name).write_bytes(content)
        out = root / "run"
        sets = [
            f"data.dataset={case.dataset}",
            f"data.root={json.dumps(str(data))}",
            "model.hidden=[8]",
            "topology.agents=2",
            "data.partition='iid'",
            "data.batch_size=4",
        ]
        if not case.check:
            sets += ["run.iterations=3", "run.eval_every=2"]
        flags = ["--check"] if case.check else []
        argv = ["run", "detsgrad", *flags, "--quiet", "--out", str(out), *as_sets(sets)]
        before = snapshot(root)
        outcome = invoke("idx-files", argv, root, limit=60)
        problems = check_run(outcome, root, before, out, case.check)
        written = {name: content for name, content in files.items() if content is not None}
        verdict("idx-files", outcome, problems, root, written)


def test_idx_files():
    _idx_files()


# ---------------------------------------------------------------- edge files


@family_settings("edge-files")
@given(case=edge_cases())
def _edge_files(case):
    with scratch() as root:
        path = root / "edges.txt"
        if case.content is None:
            path.mkdir()
        else:
            path.write_bytes(case.content)
        out = root / "run"
        sets = [*short_run("detsgrad"), "topology.graph=edges", "topology.edges_file=edges.txt"]
        if case.agents is not None:
            sets.append(f"topology.agents={case.agents}")
        flags = ["--check"] if case.check else []
        argv = ["run", "detsgrad", *flags, "--quiet", "--out", str(out), *as_sets(sets)]
        before = snapshot(root)
        outcome = invoke("edge-files", argv, root, limit=60)
        problems = check_run(outcome, root, before, out, case.check)
        verdict("edge-files", outcome, problems, root, {"edges.txt": case.content or b""})


def test_edge_files():
    _edge_files()


# ---------------------------------------------------------------- run folders for report

BASE_RUNS = {
    "sgd": ("dsgd", "dsgd"),
    "server": ("asysg-con", "asysg-con"),
    "layerwise": ("dssfn-vowel", "dssfn"),
}
"""Finished run folders the report cases start from: preset and algorithm."""


@cache
def base_runs() -> Path:
    """The finished runs of BASE_RUNS, made once per session."""
    folder = Path(tempfile.mkdtemp(prefix="murmur-prop-runs-"))
    atexit.register(shutil.rmtree, folder, True)
    for name, (preset, algorithm) in BASE_RUNS.items():
        argv = ["run", preset, "--quiet", "--out", str(folder / name)]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = main([*argv, *as_sets(short_run(algorithm))])
        assert code == 0, f"the base run {name} failed"
    return folder


def _mutate(path: Path, ops: tuple[tuple[str, Any], ...], lines: bool) -> None:
    for op, payload in ops:
        if op in ("remove", "folder", "empty"):
            if path.is_dir():
                shutil.rmtree(path)
            path.unlink(missing_ok=True)
            if op == "folder":
                path.mkdir()
            elif op == "empty":
                path.write_bytes(b"")
            continue
        if not path.is_file():
            continue
        content = path.read_bytes()
        if op.endswith("-raw"):
            op, payload = op.removesuffix("-raw"), RAW_JSON[payload]
        if op == "replace":
            path.write_bytes(payload)
        elif op == "insert":
            middle = len(content) // 2
            path.write_bytes(content[:middle] + payload + content[middle:])
        elif op == "append":
            path.write_bytes(content + b"\n" + payload)
        elif op in ("set", "delete"):
            path.write_bytes(_edit_json(content, op, payload, lines))


def _edit_json(content: bytes, op: str, payload: Any, lines: bool) -> bytes:
    """Set or delete a key in the JSON object (every line's, for metrics.jsonl)."""
    texts = content.splitlines() if lines else [content]
    edited = []
    for text in texts:
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):  # damaged already: leave it as it is
            edited.append(text)
            continue
        if isinstance(value, dict):
            if op == "set":
                key, item = payload
                value[key] = item
            else:
                value.pop(payload, None)
        edited.append(json.dumps(value).encode())
    return b"\n".join(edited) + (b"\n" if lines else b"")


@family_settings("report-folders")
@given(case=report_cases())
def _report_folders(case: ReportCase):
    bases = base_runs()
    with scratch() as root:
        runs = root / "runs"
        run = runs / "a" if case.nested else runs
        shutil.copytree(bases / case.base, run)
        if case.nested:
            shutil.copytree(bases / "sgd", runs / "b")
        _mutate(run / "summary.json", case.summary, lines=False)
        _mutate(run / "metrics.jsonl", case.metrics, lines=True)
        files = {
            name: (run / name).read_bytes()
            for name in ("summary.json", "metrics.jsonl")
            if (run / name).is_file()
        }
        out = root / "report"
        argv = ["report", str(runs), "--out", str(out)]
        before = snapshot(root)
        outcome = invoke("report-folders", argv, root, limit=120)
        verdict("report-folders", outcome, check_report(outcome, root, before, out), root, files)


def test_report_folders():
    _report_folders()
