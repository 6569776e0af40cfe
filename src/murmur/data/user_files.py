"""``data.dataset = "file"``: a user's ``.npz`` or ``.csv``, checked, read once per process.

- ``.npz``: the arrays ``x_train``, ``y_train``, ``x_test``, ``y_test``
  (:func:`~murmur.data.user_arrays.save_npz` writes one), checked as
  :func:`~murmur.data.user_arrays.from_arrays` checks arrays.
- ``.csv``: a header row naming the columns, then one row per sample of numbers;
  ``data.label_column`` holds the labels (or the regression target), every other
  column is a feature. The test split is ``data.test_path`` (a CSV of the same
  columns) or, without one, ``data.test_fraction`` of the rows, drawn with a fixed
  seed (the same rows whatever the run's seed).
- ``data.validation_path``: a validation split of the same kind, a ``.csv`` of the
  same columns or an ``.npz`` of ``x_validation`` and ``y_validation``, checked
  against the training split (its features, classes or target width).

Features are used as the file holds them unless ``data.standardize`` z-scores them
with the training split's statistics. The SHA-256 of the file's bytes (followed by
the test file's, then the validation file's) identifies the data:
:func:`read_file_data` refuses a file whose hash is not ``data.sha256`` when that is
set, and keeps what it parsed, by path and
hash, so a process parses a file once: every read hashes the bytes again (a file
changed since the plan read it is refused), the run reuses what the plan parsed.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import zipfile
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from murmur.data.datasets import Dataset, _standardize
from murmur.data.user_arrays import SPLITS, VALIDATION_SPLIT, build_dataset, with_validation
from murmur.errors import UsageError
from murmur.sections import DataConfig

FILE = "file"
"""``data.dataset`` of a user's file."""
ARRAYS = "arrays"
"""``data.dataset`` of a Dataset given from Python."""
FILE_KEYS = (
    "path",
    "test_path",
    "test_fraction",
    "validation_path",
    "label_column",
    "task",
    "standardize",
)
"""The keys of ``[data]`` that only ``data.dataset = "file"`` reads."""
SPLIT_SEED = 20242
"""Seed of the rows a CSV without ``data.test_path`` holds out as its test split."""
CACHE_SIZE = 4
"""Files kept parsed in a process."""
HOWTO = (
    'data.dataset = "file" reads data.path: an .npz of x_train, y_train, x_test, y_test, '
    "or a .csv with a header row and a label column (data.label_column)"
)


@dataclass(frozen=True)
class FileData:
    """A file's dataset and the SHA-256 of its bytes."""

    dataset: Dataset
    sha256: str
    paths: tuple[Path, ...]
    """The file, then the test file and the validation file where there are."""


_Key = tuple[str, str, str, float, str, str, bool]
_Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
_CACHE: OrderedDict[tuple[_Key, str], FileData] = OrderedDict()


def read_file_data(data: DataConfig) -> FileData:
    """The dataset ``data.path`` (and ``data.test_path``) hold, parsed once per process;
    UsageError, in one line naming the file, for a file that is not one, or whose
    SHA-256 is not ``data.sha256`` when that is set."""
    paths = file_paths(data)
    validation = validation_file(data)
    test = str(paths[1].resolve()) if len(paths) > 1 else ""
    held = str(validation.resolve()) if validation is not None else ""
    options = (data.test_fraction, data.label_column, data.task, data.standardize)
    key: _Key = (str(paths[0].resolve()), test, held, *options)
    if validation is not None:
        paths = (*paths, validation)
    contents = [_read_bytes(path) for path in paths]
    digest = hashlib.sha256(b"".join(contents)).hexdigest()
    if data.sha256 and digest != data.sha256:
        test = f" (with data.test_path {data.test_path})" if data.test_path else ""
        if data.validation_path:
            test += f" (with data.validation_path {data.validation_path})"
        raise UsageError(
            f"data.path {data.path}{test} changed since the run: sha256 {digest}, expected "
            f'{data.sha256}; restore the file, or set data.sha256 = "" to use it as it is'
        )
    found = _CACHE.get((key, digest))
    if found is not None:
        _CACHE.move_to_end((key, digest))
    else:
        found = FileData(_parse(data, paths, contents), digest, paths)
        _CACHE[key, digest] = found
        while len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)
    return found


def file_paths(data: DataConfig) -> tuple[Path, ...]:
    """``data.path``, and ``data.test_path`` when set; UsageError for a missing path, a
    kind of file murmur does not read, or a key the file's kind does not take."""
    if not data.path:
        raise UsageError(f"data.path is not set; {HOWTO}")
    path = _path(data.path, "data.path")
    kind = path.suffix.lower()
    if kind not in (".npz", ".csv"):
        raise UsageError(f"data.path {data.path} is neither an .npz nor a .csv file; {HOWTO}")
    if kind == ".npz":
        for key, default in (("test_path", ""), ("label_column", "label"), ("test_fraction", 0.2)):
            if getattr(data, key) != default:
                raise UsageError(
                    f"data.{key} is for a .csv; the .npz {data.path} holds its own x_test and "
                    f"y_test: drop data.{key}"
                )
        return (path,)
    if not data.test_path:
        return (path,)
    test = _path(data.test_path, "data.test_path")
    if test.suffix.lower() != ".csv":
        raise UsageError(f"data.test_path {data.test_path} is not a .csv file")
    return path, test


def validation_file(data: DataConfig) -> Path | None:
    """``data.validation_path`` (None where it is not set); UsageError unless it is a
    file of the kind of ``data.path``."""
    if not data.validation_path:
        return None
    path = _path(data.validation_path, "data.validation_path")
    kind = Path(data.path).suffix.lower()
    if path.suffix.lower() != kind:
        raise UsageError(
            f"data.validation_path {data.validation_path} is not a {kind} file like data.path "
            f"{data.path}; give the validation split in the kind of file of the training data"
        )
    return path


def _path(text: str, key: str) -> Path:
    try:
        return Path(text).expanduser()
    except RuntimeError:
        raise UsageError(f"{key}={text!r}: cannot find the home directory its '~' names") from None


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file; {HOWTO}") from None
    except IsADirectoryError:
        raise UsageError(f"{path} is a folder, not a data file; {HOWTO}") from None
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror or error}") from None


def _parse(data: DataConfig, paths: tuple[Path, ...], contents: list[bytes]) -> Dataset:
    """The dataset of the files' ``contents`` (the validation file's last, where
    ``data.validation_path`` is set), standardized when ``data`` asks."""
    split = len(paths) - 1 if data.validation_path else len(paths)
    held: tuple[np.ndarray, np.ndarray] | None = None
    if paths[0].suffix.lower() == ".npz":
        arrays = _npz_arrays(paths[0], contents[0])
        if split < len(paths):
            held = _npz_validation(paths[-1], contents[-1])
    else:
        arrays, header = _csv_arrays(data, paths[:split], contents[:split])
        if split < len(paths):
            held = _csv_validation(data, paths[-1], contents[-1], header)
    dataset = build_dataset(
        arrays, task=data.task, num_classes=None, name=FILE, where=str(paths[0])
    )
    if held is not None:
        dataset = with_validation(dataset, *held, where=str(paths[-1]))
    if not data.standardize:
        return dataset
    validation = dataset.validation
    x_train, x_test, *x_validation = _standardize(
        dataset.x_train, dataset.x_test, *([validation[0]] if validation is not None else [])
    )
    return dataclasses.replace(
        dataset,
        x_train=x_train,
        x_test=x_test,
        x_validation=x_validation[0] if x_validation else None,
    )


# ---- .npz ---------------------------------------------------------------------------------


def _npz_arrays(path: Path, content: bytes) -> _Arrays:
    x_train, y_train, x_test, y_test = _npz_read(
        path,
        content,
        SPLITS,
        "an .npz dataset holds x_train, y_train, x_test and y_test "
        "(murmur.data.save_npz writes one)",
    )
    return x_train, y_train, x_test, y_test


def _npz_validation(path: Path, content: bytes) -> tuple[np.ndarray, np.ndarray]:
    """The x_validation and y_validation arrays of ``data.validation_path``'s .npz."""
    x, y = _npz_read(
        path,
        content,
        VALIDATION_SPLIT,
        "the .npz of data.validation_path holds x_validation and y_validation",
    )
    return x, y


def _npz_read(path: Path, content: bytes, keys: Sequence[str], holds: str) -> list[np.ndarray]:
    """The arrays ``keys`` of the .npz ``content``; UsageError naming what is missing
    (``holds``: what such a file holds) or why the file cannot be read."""
    try:
        with np.load(io.BytesIO(content), allow_pickle=False) as arrays:
            missing = [key for key in keys if key not in arrays.files]
            if missing:
                held = ", ".join(arrays.files) or "no arrays"
                raise UsageError(f"{path} lacks {', '.join(missing)} (it holds {held}); {holds}")
            return [arrays[key] for key in keys]
    except UsageError:
        raise
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error) as error:
        raise UsageError(f"{path} is not a readable .npz file ({error})") from None


# ---- .csv ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Table:
    """A CSV's numbers, its header, and the line of each row in the file."""

    path: Path
    header: list[str]
    values: np.ndarray
    lines: list[int]


def _csv_arrays(
    data: DataConfig, paths: tuple[Path, ...], contents: list[bytes]
) -> tuple[_Arrays, list[str]]:
    """(x_train, y_train, x_test, y_test) of one CSV split by rows, or of two CSVs; and
    the header of the first."""
    tables = [_read_csv(path, content) for path, content in zip(paths, contents, strict=True)]
    column = _label_index(tables[0], data.label_column)
    if len(tables) == 2 and tables[1].header != tables[0].header:
        raise UsageError(
            f"data.test_path {paths[1]} has the columns {', '.join(tables[1].header)} but "
            f"data.path {paths[0]} has {', '.join(tables[0].header)}; give both the same columns"
        )
    splits = []
    for table in tables:
        if data.task == "classification":
            _check_labels(table, column)
        splits.append(
            (np.delete(table.values, column, axis=1), table.values[:, column], table.lines)
        )
    if len(splits) == 1:
        splits = _split_rows(*splits[0], data.test_fraction, paths[0])
    if data.task == "classification":
        _check_two_classes(splits[0][1], paths[0], data.label_column)
    (x_train, y_train, _), (x_test, y_test, _) = splits
    return (x_train, y_train, x_test, y_test), tables[0].header


def _csv_validation(
    data: DataConfig, path: Path, content: bytes, header: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    """The features and labels of ``data.validation_path``'s .csv, whose columns must be
    ``header``, data.path's."""
    table = _read_csv(path, content)
    if table.header != header:
        raise UsageError(
            f"data.validation_path {path} has the columns {', '.join(table.header)} but "
            f"data.path has {', '.join(header)}; give both the same columns"
        )
    column = _label_index(table, data.label_column)
    if data.task == "classification":
        _check_labels(table, column)
    return np.delete(table.values, column, axis=1), table.values[:, column]


def _read_csv(path: Path, content: bytes) -> _Table:
    """The header and the rows of numbers of a CSV file; UsageError naming the line (and
    the column) of the first row that is not one."""
    try:
        text = content.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise UsageError(
            f"{path} is not UTF-8 text (byte {error.start}); save it as UTF-8"
        ) from None
    reader = csv.reader(io.StringIO(text))
    header: list[str] | None = None
    rows: list[list[str]] = []
    lines: list[int] = []
    try:
        for row in reader:
            if len(row) <= 1 and not "".join(row).strip():
                continue  # a blank line
            if header is None:
                header = [name.strip() for name in row]
            else:
                rows.append(row)
                lines.append(reader.line_num)
    except csv.Error as error:
        raise UsageError(f"{path} line {reader.line_num}: {error}") from None
    if header is None:
        raise UsageError(f"{path} is empty; a .csv dataset needs a header row and rows of numbers")
    if not rows:
        raise UsageError(f"{path} holds a header row but no data rows")
    for row, line in zip(rows, lines, strict=True):
        if len(row) != len(header):
            raise UsageError(
                f"{path} line {line} has {len(row)} field{'s' * (len(row) != 1)} but the header "
                f"has {len(header)} "
                "columns; every row needs one value per column"
            )
    return _Table(path, header, _numbers(path, header, rows, lines), lines)


def _numbers(path: Path, header: list[str], rows: list[list[str]], lines: list[int]) -> np.ndarray:
    """The rows' cells as float64; UsageError naming the first that is not a finite number."""
    try:
        values = np.array(rows, dtype=np.float64)
    except ValueError:
        for row, line in zip(rows, lines, strict=True):
            for name, cell in zip(header, row, strict=True):
                try:
                    float(cell)
                except ValueError:
                    what = "is empty" if not cell.strip() else f"holds {cell.strip()!r}"
                    raise UsageError(
                        f"{path} line {line}, column {name!r} {what}, not a number; every "
                        "cell must be a number"
                    ) from None
        raise
    bad = ~np.isfinite(values)
    if bad.any():
        first, col = (int(i) for i in np.argwhere(bad)[0])
        kind = "NaN" if np.isnan(values[first, col]) else "infinite"
        raise UsageError(
            f"{path} line {lines[first]}, column {header[col]!r} is {kind} "
            f"({rows[first][col].strip()!r}); remove the row or fill in the value"
        )
    return values


def _label_index(table: _Table, name: str) -> int:
    """The column of the labels; UsageError unless exactly one column has that name and
    another one is left for the features."""
    count = table.header.count(name)
    if count == 0:
        shown = ", ".join(repr(column) for column in table.header[:12])
        more = ", ..." if len(table.header) > 12 else ""
        raise UsageError(
            f"{table.path} has no column {name!r} (its header row names {shown}{more}); set "
            "data.label_column to the column of the labels"
        )
    if count > 1:
        raise UsageError(f"{table.path} has {count} columns named {name!r}; rename all but one")
    if len(table.header) < 2:
        raise UsageError(f"{table.path} holds the column {name!r} only: no feature columns")
    return table.header.index(name)


def _check_labels(table: _Table, column: int) -> None:
    """UsageError naming the first label that is not a class number 0, 1, 2, ..."""
    labels = table.values[:, column]
    bad = (labels < 0) | (labels != np.round(labels))
    if bad.any():
        row = int(np.argmax(bad))
        raise UsageError(
            f"{table.path} line {table.lines[row]}, column {table.header[column]!r} holds "
            f"{labels[row]:g}, not a class number; class labels are integers 0, 1, 2, ... "
            '(set data.task = "regression" for real-valued targets)'
        )


def _check_two_classes(labels: np.ndarray, path: Path, column: str) -> None:
    present = np.unique(labels)
    if present.size < 2:
        raise UsageError(
            f"{path}: the training rows of column {column!r} hold one class only "
            f"({present[0]:g}); a classifier needs at least two"
        )


_Split = tuple[np.ndarray, np.ndarray, list[int]]


def _split_rows(
    x: np.ndarray, y: np.ndarray, lines: list[int], fraction: float, path: Path
) -> list[_Split]:
    """The training and test rows of one CSV: ``fraction`` of them, at least one, held out."""
    rows = x.shape[0]
    if rows < 2:
        raise UsageError(
            f"{path} holds {rows} data row; a train/test split needs at least 2 (or give "
            "data.test_path)"
        )
    held = min(max(round(fraction * rows), 1), rows - 1)
    order = np.random.default_rng(SPLIT_SEED).permutation(rows)
    parts = [np.sort(order[held:]), np.sort(order[:held])]
    return [(x[part], y[part], [lines[int(i)] for i in part]) for part in parts]


def clear_cache() -> None:
    """Forget every parsed file (tests)."""
    _CACHE.clear()
