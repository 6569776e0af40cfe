"""A user's own file on the command line: data.dataset = "file" with an .npz or a .csv.

Good files run; bad ones end with exit status 2, one line naming the file (and the
line and column of a CSV), no traceback and no run folder.
"""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch

from murmur.cli import main
from murmur.data import load_dataset
from murmur.data.partition import covered_classes
from murmur.data.user_files import clear_cache
from murmur.seeding import derive_seed

SMALL = [
    "run.iterations=20",
    "run.eval_every=10",
    "model.hidden=[8]",
    "topology.agents=4",
    "data.batch_size=8",
    "data.partition=iid",
]


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    clear_cache()
    yield
    clear_cache()


def sets(*items: str) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def file_run(path: Path | str, *extra: str) -> list[str]:
    return ["run", "dsgd", *sets(*SMALL, "data.dataset=file", f"data.path={path}", *extra)]


def write_csv(path: Path, rows: int = 60, classes: int = 3) -> Path:
    rng = np.random.default_rng(0)
    lines = ["a,b,c,label"]
    for index in range(rows):
        label = index % classes
        values = rng.normal(size=3) + 2 * label
        lines.append(",".join(f"{v:.5f}" for v in values) + f",{label}")
    path.write_text("\n".join(lines) + "\n")
    return path


def write_npz(path: Path, **changes: np.ndarray) -> Path:
    rng = np.random.default_rng(1)
    arrays = {
        "x_train": rng.normal(size=(40, 5)),
        "y_train": np.arange(40) % 2,
        "x_test": rng.normal(size=(10, 5)),
        "y_test": np.arange(10) % 2,
    }
    arrays.update(changes)
    np.savez(path, **arrays)
    return path


def one_error_line(capsys, code: int) -> str:
    out, err = capsys.readouterr()
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("murmur: error: ")
    assert "Traceback" not in out + err
    return lines[0]


def ok(capsys, argv: list[str]) -> str:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


# ---- files that run -----------------------------------------------------------------------


def test_an_npz_file_is_checked_and_nothing_is_written(capsys, tmp_path):
    path = write_npz(tmp_path / "mine.npz")
    out = ok(capsys, [*file_run(path), "--check", "--out", "run"])
    assert "dsgd on file, ring of 4 agents" in out
    assert not (tmp_path / "run").exists()


def test_a_csv_run_saves_the_files_hash_and_a_changed_file_is_refused(capsys, tmp_path):
    path = write_csv(tmp_path / "data.csv")
    ok(capsys, [*file_run("data.csv"), "--quiet", "--out", "run"])
    saved = tomllib.loads((tmp_path / "run" / "config.toml").read_text())["data"]
    assert saved["dataset"] == "file" and saved["path"] == "data.csv"
    assert saved["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert "file" in (tmp_path / "run" / "summary.json").read_text()

    ok(capsys, ["run", "run/config.toml", "--check"])  # the same file: the same run
    path.write_text(path.read_text().replace("0.", "1.", 1))
    line = one_error_line(capsys, main(["run", "run/config.toml", "--out", "again"]))
    assert "data.path data.csv changed since the run: sha256 " in line
    assert f"expected {saved['sha256']}" in line
    assert not (tmp_path / "again").exists()


def test_a_csv_with_a_test_file_and_regression_targets_runs(capsys, tmp_path):
    rows = [f"{i / 10},{i % 7},{0.3 * i - 1}" for i in range(50)]
    (tmp_path / "train.csv").write_text("x1,x2,y\n" + "\n".join(rows[:40]) + "\n")
    (tmp_path / "test.csv").write_text("x1,x2,y\n" + "\n".join(rows[40:]) + "\n")
    argv = file_run(
        "train.csv",
        "data.test_path=test.csv",
        "data.label_column=y",
        "data.task=regression",
        "data.standardize=true",
        "model.name=linear",
    )
    ok(capsys, [*argv, "--quiet", "--out", "run"])
    saved = tomllib.loads((tmp_path / "run" / "config.toml").read_text())["data"]
    both = (tmp_path / "train.csv").read_bytes() + (tmp_path / "test.csv").read_bytes()
    assert saved["sha256"] == hashlib.sha256(both).hexdigest()


def test_datasets_describes_a_file(capsys, tmp_path):
    path = write_csv(tmp_path / "data.csv")
    out = ok(capsys, ["datasets", "--file", "data.csv"]).splitlines()
    assert out[0] == "data.csv: 48 training and 12 test samples of 3 features"
    assert out[1].startswith("classes: 3 (training samples of each: 0: ")
    assert out[2] == f"sha256: {hashlib.sha256(path.read_bytes()).hexdigest()}"
    assert "--set data.dataset=file --set data.path=data.csv" in out[3]


# ---- files that do not ----------------------------------------------------------------------


CSV_CASES = {
    "ragged": ("a,b,label\n1,2,0\n3,1\n", "bad.csv line 3 has 2 fields but the header has 3"),
    "text": ("a,b,label\n1,2,0\n3,x,1\n", "bad.csv line 3, column 'b' holds 'x', not a number"),
    "empty cell": ("a,b,label\n1,2,0\n3,,1\n", "bad.csv line 3, column 'b' is empty, not a"),
    "nan": ("a,b,label\n1,2,0\n3,nan,1\n", "bad.csv line 3, column 'b' is NaN"),
    "inf": ("a,b,label\n1,2,0\n3,-inf,1\n", "bad.csv line 3, column 'b' is infinite"),
    "one class": ("a,label\n1,0\n2,0\n3,0\n", "bad.csv: the training rows of column 'label' hold"),
    "negative label": ("a,label\n1,0\n2,-1\n3,1\n", "line 3, column 'label' holds -1, not a class"),
    "fractional label": ("a,label\n1,0\n2,1.5\n3,1\n", "holds 1.5, not a class number"),
    "no label column": ("a,b\n1,0\n2,1\n", "bad.csv has no column 'label' (its header row"),
    "empty file": ("", "bad.csv is empty; a .csv dataset needs a header row"),
    "header only": ("a,label\n", "bad.csv holds a header row but no data rows"),
    "one row": ("a,label\n1,0\n", "bad.csv holds 1 data row; a train/test split needs at least 2"),
}


@pytest.mark.parametrize("content, message", CSV_CASES.values(), ids=CSV_CASES.keys())
def test_a_bad_csv_is_one_line_and_no_folder(capsys, tmp_path, content, message):
    (tmp_path / "bad.csv").write_text(content)
    line = one_error_line(capsys, main([*file_run("bad.csv"), "--out", "run"]))
    assert message in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.csv"]


NPZ_CASES = {
    "missing array": ({"y_test": None}, "lacks y_test (it holds x_train, y_train, x_test)"),
    "nan": ({"x_train": np.full((40, 5), np.nan)}, "x_train[0, 0] is NaN"),
    "one class": ({"y_train": np.zeros(40, dtype=int)}, "y_train holds one class only (0)"),
    "label out of range": ({"y_test": np.full(10, -2)}, "y_test[0] is -2, outside the classes"),
    "features": ({"x_test": np.zeros((10, 4))}, "x_train has 5 features per sample but x_test"),
    "samples": ({"y_train": np.arange(39) % 2}, "x_train holds 40 samples but y_train holds 39"),
    "text": ({"x_test": np.array([["a"] * 5] * 10)}, "x_test holds <U1 values, not numbers"),
}


@pytest.mark.parametrize("changes, message", NPZ_CASES.values(), ids=NPZ_CASES.keys())
def test_a_bad_npz_is_one_line_and_no_folder(capsys, tmp_path, changes, message):
    kept = {key: value for key, value in changes.items() if value is not None}
    dropped = [key for key, value in changes.items() if value is None]
    path = write_npz(tmp_path / "bad.npz", **kept)
    if dropped:
        with np.load(path) as arrays:
            held = {key: arrays[key] for key in arrays.files if key not in dropped}
        np.savez(path, **held)
    line = one_error_line(capsys, main([*file_run("bad.npz"), "--out", "run"]))
    assert line.startswith("murmur: error: bad.npz") and message in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.npz"]


@pytest.mark.parametrize(
    "content, extra, message",
    [
        (None, [], "missing.csv: no such file"),
        (b"PK\x03\x04 not a zip", [], "bad.npz is not a readable .npz file"),
        (b"", ["data.test_path=t.csv"], "data.test_path is for a .csv; the .npz bad.npz holds"),
        (b"", [f"data.sha256={'0' * 64}"], None),
    ],
    ids=["missing", "not a zip", "test file of an npz", "sha256"],
)
def test_a_file_that_cannot_be_had_is_one_line(capsys, tmp_path, content, extra, message):
    name = "missing.csv" if content is None else "bad.npz"
    if content:
        (tmp_path / name).write_bytes(content)
    elif content is not None:
        write_npz(tmp_path / name)
    line = one_error_line(capsys, main([*file_run(name, *extra), "--out", "run"]))
    if message is None:  # a hash that is not the file's
        sha = hashlib.sha256((tmp_path / name).read_bytes()).hexdigest()
        message = f"data.path bad.npz changed since the run: sha256 {sha}, expected {'0' * 64}"
    assert message in line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["data.dataset=arrays"], 'data.dataset = "arrays" stands for a Dataset given from'),
        (["data.path=x.csv"], "data.path is for data.dataset = \"file\", not 'mnist5k'"),
        (["data.standardize=true"], "data.standardize is for data.dataset"),
        ([f"data.sha256={'a' * 64}"], "data.sha256 identifies a file or arrays"),
        (["data.dataset=file"], "data.path is not set"),
        (["data.dataset=file", "data.path=x.txt"], "data.path x.txt is neither an .npz nor"),
    ],
)
def test_keys_of_a_file_without_one_are_refused(capsys, extra, message):
    line = one_error_line(capsys, main(["run", "dsgd", *sets(*extra), "--check"]))
    assert message in line


# ---- classes left out ---------------------------------------------------------------------


def test_a_labels_split_leaving_classes_out_is_refused_unless_allowed(capsys):
    labels = ["data.dataset=blobs", "topology.agents=2", "data.partition=labels"]
    argv = ["run", "detsgrad", *sets(*labels), "--check", "--out", "run"]
    line = one_error_line(capsys, main(argv))
    covered = covered_classes(2, 1, 4, derive_seed(0, "partition"))
    test = load_dataset("blobs").y_test
    share = torch.isin(test, torch.tensor(covered)).double().mean().item()
    assert line == (
        f"murmur: error: 2 agents x 1 label cover 2 of 4 classes: test accuracy cannot pass "
        f"{100 * share:.1f} %; use at least 4 agents, data.labels_per_agent >= 2, or set "
        "data.allow_missing_classes = true"
    )
    out = ok(capsys, [*argv, *sets("data.allow_missing_classes=true")])
    assert "detsgrad on blobs, ring of 2 agents" in out
    ok(capsys, ["run", "detsgrad", *sets(*labels, "data.labels_per_agent=2"), "--check"])


def test_the_missing_classes_of_a_file_are_counted_from_its_test_labels(capsys, tmp_path):
    write_csv(tmp_path / "data.csv", rows=90, classes=9)
    argv = file_run("data.csv", "data.partition=labels", "topology.agents=2")
    line = one_error_line(capsys, main([*argv, "--check"]))
    assert "2 agents x 1 label cover 2 of 9 classes: test accuracy cannot pass " in line
    assert "use at least 9 agents, data.labels_per_agent >= 5" in line
