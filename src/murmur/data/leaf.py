"""FEMNIST and Shakespeare from LEAF's JSON files on disk, with each sample's writer.

LEAF (https://github.com/TalwalkarLab/leaf) builds both sets with ``preprocess.sh``
in ``data/femnist`` and ``data/shakespeare``, as JSON files of the form::

    {"users": [...], "num_samples": [...], "user_data": {user: {"x": [...], "y": [...]}}}

``data.root`` is LEAF's ``data/femnist/data`` (``data/shakespeare/data``) folder, or
the folder above it. murmur reads

- ``train/`` and ``test/``, where both are there: every ``*.json`` of each, LEAF's own
  split;
- otherwise ``all_data/``: every ``*.json``, and holds out the test split itself, per
  writer: of a writer's ``n`` samples the first ``max(1, floor(0.9 n))`` train and the
  rest test (LEAF's split by sample with its default ``--tf 0.9``, in file order
  rather than at random), so a writer of two samples or more has one in each split.

The samples:

- FEMNIST: ``x`` is a 28x28 image, 784 values in [0, 1] row by row as LEAF writes
  them (used as they are), ``y`` its class 0..61 (digits, upper case, lower case);
- Shakespeare: ``x`` is a line of 80 characters and ``y`` the character that follows;
  each character becomes its index in LEAF's 80-character alphabet
  (:data:`ALL_LETTERS`), the 80 indices as float32 features (a model embeds them),
  ``y`` a class 0..79. A character outside the alphabet is refused, naming the file
  and the user.

A user is a writer (FEMNIST) or a speaking part of a play (Shakespeare). The
training samples come writer by writer, the writers sorted by their id, each writer's
samples in file order (a writer found in several files of a split: the files in name
order); a training sample's group is its writer's place in that order. The files are
parsed once per process (:data:`CACHE_SIZE` sets), so the plan, which reads their
sizes, and the run share one parse.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from murmur.errors import UsageError, shortened

LEAF_URL = "github.com/TalwalkarLab/leaf"
ALL_LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
"""LEAF's alphabet of Shakespeare's characters (``models/utils/language_utils.py``):
a character's feature value and class are its index here."""
LINE = 80
"""Characters of one Shakespeare sample."""
TRAIN_SHARE = (9, 10)
"""The share of each writer's samples that trains when murmur splits ``all_data/``."""
CACHE_SIZE = 2
"""Sets kept parsed in a process."""
_REMAKE = "replace it with the file LEAF's preprocess.sh writes"

_LETTER_INDEX = np.full(128, -1, dtype=np.int64)
_LETTER_INDEX[[ord(letter) for letter in ALL_LETTERS]] = np.arange(len(ALL_LETTERS))

Samples = tuple[np.ndarray, np.ndarray]
"""One user's features (samples, features) and int64 labels (samples,)."""


@dataclass(frozen=True)
class LeafLayout:
    """What one LEAF set's samples are."""

    title: str
    features: int
    classes: int
    samples: Callable[[list[object], list[object], str], Samples]
    """A user's ``x`` and ``y`` (and where they are, for messages) as arrays, checked."""


class LeafArrays(NamedTuple):
    """A LEAF set as read: float32 features, int64 labels and the training writers."""

    x_train: np.ndarray
    y_train: np.ndarray
    groups: np.ndarray
    """int64 (training samples,): each training sample's writer, an index of ``writers``."""
    writers: tuple[str, ...]
    """The training split's writers (LEAF user ids), sorted."""
    x_test: np.ndarray
    y_test: np.ndarray


_CACHE: OrderedDict[tuple[object, ...], LeafArrays] = OrderedDict()


def leaf_howto(name: str) -> str:
    """How to make set ``name``'s files and point murmur at them."""
    return (
        f"run preprocess.sh in data/{name} of LEAF ({LEAF_URL}) and set data.root to its "
        f"data/{name}/data folder"
    )


def read_leaf(name: str, root: Path) -> LeafArrays:
    """Set ``name`` (``femnist``, ``shakespeare``) from LEAF's JSON files under
    ``root`` (see the module); UsageError, in one line naming the file, for a folder
    or file missing or a file not in LEAF's form."""
    try:
        train_files, test_files = _json_files(name, root)
        files = [*train_files, *(test_files or [])]
        key = (name, test_files is None, *((str(path), *_stamp(path)) for path in files))
    except OSError as error:
        raise UsageError(
            f"data.dataset={name}: cannot look into {root} ({error.strerror}); make it readable"
        ) from None
    found = _CACHE.get(key)
    if found is not None:
        _CACHE.move_to_end(key)
        return found
    layout = LAYOUTS[name]
    train = _read_split(layout, train_files)
    if test_files is None:
        train, test = _hold_out(train)
    else:
        test = _read_split(layout, test_files)
    found = _stack(name, train, test, train_files[0].parent)
    _CACHE[key] = found
    while len(_CACHE) > CACHE_SIZE:
        _CACHE.popitem(last=False)
    return found


def _stamp(path: Path) -> tuple[int, int]:
    """``path``'s size and modification time, which a changed file changes."""
    status = path.stat()
    return status.st_size, status.st_mtime_ns


def _json_files(name: str, root: Path) -> tuple[list[Path], list[Path] | None]:
    """The training and test JSON files under ``root``, or those of ``all_data/`` and
    None where murmur holds out the test split itself."""
    if not root.is_dir():
        raise UsageError(
            f"data.dataset={name}: directory {root} does not exist; {leaf_howto(name)}"
        )
    splits = ("train", "test", "all_data")
    folder = next(
        (where for where in (root, root / "data") if any((where / s).is_dir() for s in splits)),
        root,
    )
    train, test, everything = (folder / split for split in splits)
    if train.is_dir() and test.is_dir():
        return _folder_files(name, train), _folder_files(name, test)
    if everything.is_dir():
        return _folder_files(name, everything), None
    lacks = "test/" if train.is_dir() else "train/" if test.is_dir() else "train/ and test/"
    raise UsageError(
        f"data.dataset={name}: {folder} lacks {lacks} (or all_data/) of LEAF's JSON files; "
        f"{leaf_howto(name)}"
    )


def _folder_files(name: str, folder: Path) -> list[Path]:
    """The ``*.json`` files of ``folder``, sorted by name; UsageError for none."""
    files = sorted(path for path in folder.glob("*.json") if path.is_file())
    if not files:
        raise UsageError(f"data.dataset={name}: {folder} holds no .json file; {leaf_howto(name)}")
    return files


def _read_split(layout: LeafLayout, files: list[Path]) -> dict[str, Samples]:
    """Every user's samples in ``files``, a user found in several in file order."""
    parts: dict[str, list[Samples]] = {}
    for path in files:
        for user, x, y in _users(_load_json(path), path):
            if x:  # as long as y
                where = f"{path}: user {shortened(repr(user))}"
                parts.setdefault(user, []).append(layout.samples(x, y, where))
    return {
        user: (np.concatenate([x for x, _ in chunks]), np.concatenate([y for _, y in chunks]))
        for user, chunks in parts.items()
    }


def _load_json(path: Path) -> object:
    """What the JSON file ``path`` holds."""
    try:
        with path.open("rb") as handle:
            return json.load(handle)
    except OSError as error:
        raise UsageError(f"{path} is unreadable ({error.strerror}); make it readable") from None
    except (ValueError, RecursionError) as error:  # JSONDecodeError, UnicodeDecodeError
        raise UsageError(f"{path} is not JSON ({shortened(str(error))}); {_REMAKE}") from None


def _users(document: object, path: Path) -> list[tuple[str, list[object], list[object]]]:
    """Each user of a LEAF file with its ``x`` and ``y``, in the order of ``users``;
    UsageError for a file not in LEAF's form."""

    def refuse(problem: str) -> UsageError:
        return UsageError(f"{path} is not in LEAF's form: {problem}; {_REMAKE}")

    if not isinstance(document, dict):
        raise refuse(f"it holds a JSON {type(document).__name__}, not an object")
    users, user_data = document.get("users"), document.get("user_data")
    if not isinstance(users, list) or not isinstance(user_data, dict):
        raise refuse('it needs a "users" list and a "user_data" object')
    if not all(isinstance(user, str) for user in users) or len(set(users)) != len(users):
        raise refuse('"users" must list distinct strings')
    found = []
    for user in users:
        data = user_data.get(user)
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("x"), list)
            or not isinstance(data.get("y"), list)
        ):
            raise refuse(f'"user_data" has no "x" and "y" lists of user {shortened(repr(user))}')
        x, y = data["x"], data["y"]
        if len(x) != len(y):
            raise UsageError(
                f"{path}: user {shortened(repr(user))} has {len(x)} samples in x but {len(y)} "
                f"in y; {_REMAKE}"
            )
        found.append((user, x, y))
    counts = document.get("num_samples")
    if counts is not None and counts != [len(y) for _, _, y in found]:
        raise refuse('"num_samples" does not count the samples of "user_data"')
    return found


def _femnist_samples(x: list[object], y: list[object], where: str) -> Samples:
    """A FEMNIST user's images, float32 (n, 784) in [0, 1], and classes 0..61."""
    layout = LAYOUTS["femnist"]
    try:
        images = np.asarray(x, dtype=np.float32)
    except (ValueError, TypeError):  # rows of unequal lengths, values not numbers
        images = np.zeros(0, dtype=np.float32)
    if images.shape != (len(x), layout.features):
        raise UsageError(
            f"{where}: x is not a list of images of {layout.features} numbers; {_REMAKE}"
        )
    if not (np.isfinite(images).all() and images.min() >= 0 and images.max() <= 1):
        raise UsageError(f"{where}: x holds pixel values outside [0, 1]; {_REMAKE}")
    return images, _classes(y, layout.classes, where)


def _classes(y: list[object], classes: int, where: str) -> np.ndarray:
    """``y`` as int64 class numbers 0..classes-1."""
    try:
        labels = np.asarray(y)
    except (ValueError, TypeError):
        labels = np.zeros((0, 0))
    if labels.ndim != 1 or labels.dtype.kind not in "iu":
        raise UsageError(f"{where}: y is not a list of class numbers; {_REMAKE}")
    outside = (labels < 0) | (labels >= classes)
    if outside.any():
        raise UsageError(
            f"{where}: label {int(labels[np.argmax(outside)])} is outside 0..{classes - 1}; "
            f"{_REMAKE}"
        )
    return labels.astype(np.int64)


def _shakespeare_samples(x: list[object], y: list[object], where: str) -> Samples:
    """A speaking part's lines as float32 (n, 80) letter indices, and the letters that
    follow as classes 0..79."""
    lines = [line for line in x if isinstance(line, str) and len(line) == LINE]
    if len(lines) != len(x):
        raise UsageError(f"{where}: x is not a list of {LINE}-character strings; {_REMAKE}")
    letters = [letter for letter in y if isinstance(letter, str) and len(letter) == 1]
    if len(letters) != len(y):
        raise UsageError(f"{where}: y is not a list of single characters; {_REMAKE}")
    indices = _letter_indices("".join(lines), where).reshape(len(lines), LINE)
    return indices.astype(np.float32), _letter_indices("".join(letters), where)


def _letter_indices(text: str, where: str) -> np.ndarray:
    """Each character of ``text`` as its int64 index in :data:`ALL_LETTERS`."""
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    indices = np.where(codes < 128, _LETTER_INDEX[np.minimum(codes, 127)], -1)
    outside = indices < 0
    if outside.any():
        letter = text[int(np.argmax(outside))]
        raise UsageError(
            f"{where}: the character {letter!r} is not in LEAF's {len(ALL_LETTERS)}-character "
            f"alphabet; {_REMAKE}"
        )
    return indices


def _hold_out(users: dict[str, Samples]) -> tuple[dict[str, Samples], dict[str, Samples]]:
    """Each writer's first ``max(1, floor(0.9 n))`` samples to train, the rest to test."""
    train, test = {}, {}
    share, whole = TRAIN_SHARE
    for user, (x, y) in users.items():
        kept = max(1, share * len(y) // whole)
        train[user] = (x[:kept], y[:kept])
        if kept < len(y):
            test[user] = (x[kept:], y[kept:])
    return train, test


def _stack(
    name: str, train: dict[str, Samples], test: dict[str, Samples], folder: Path
) -> LeafArrays:
    """The splits' users' samples, writer after writer in sorted order."""
    for split, users in (("training", train), ("test", test)):
        if not users:
            raise UsageError(
                f"data.dataset={name}: the JSON files of {folder.parent} hold no {split} "
                f"sample; {leaf_howto(name)}"
            )
    writers = tuple(sorted(train))
    tested = sorted(test)
    return LeafArrays(
        x_train=np.concatenate([train[user][0] for user in writers]),
        y_train=np.concatenate([train[user][1] for user in writers]),
        groups=np.repeat(
            np.arange(len(writers), dtype=np.int64), [len(train[user][1]) for user in writers]
        ),
        writers=writers,
        x_test=np.concatenate([test[user][0] for user in tested]),
        y_test=np.concatenate([test[user][1] for user in tested]),
    )


LAYOUTS: dict[str, LeafLayout] = {
    "femnist": LeafLayout("FEMNIST", 28 * 28, 62, _femnist_samples),
    "shakespeare": LeafLayout("Shakespeare", LINE, len(ALL_LETTERS), _shakespeare_samples),
}


def clear_cache() -> None:
    """Forget the sets parsed so far (the next read parses the files again)."""
    _CACHE.clear()
