"""CIFAR-10 and CIFAR-100 from the official "python version" files on disk.

The archives ``cifar-10-python.tar.gz`` and ``cifar-100-python.tar.gz``
(https://www.cs.toronto.edu/~kriz/cifar.html) extract to a folder of pickled
batches:

- ``cifar-10-batches-py``: ``data_batch_1`` .. ``data_batch_5`` (training) and
  ``test_batch``, each a dict of ``b"data"`` (uint8, (10000, 3072)) and
  ``b"labels"`` (10 classes);
- ``cifar-100-python``: ``train`` (50000 images) and ``test`` (10000), with
  ``b"fine_labels"`` (the 100 classes read here) and ``b"coarse_labels"``.

A row of ``b"data"`` is one 32x32 image, channel first: 1024 red values, 1024 green,
1024 blue, each channel row by row. The rows are kept in that order, so a model can
view them as (3, 32, 32). ``batches.meta`` and ``meta`` (the class names) are not read.

A pickle can run code when loaded: :class:`BatchUnpickler` resolves only the globals
that rebuild numpy arrays and bytes, and refuses any other.
"""

from __future__ import annotations

import codecs
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeGuard

import numpy as np

from murmur.errors import UsageError, shortened

CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar.html"
IMAGE_SHAPE = (3, 32, 32)
"""Channels, rows and columns of one image; a row of features is its flat (3072,) view."""
PIXELS = 3 * 32 * 32
REPLACE = "replace the file with the one from the official archive"


@dataclass(frozen=True)
class CifarLayout:
    """Where one CIFAR set's files are and what they hold."""

    title: str
    folder: str
    """The folder its archive extracts to."""
    archive: str
    train: tuple[str, ...]
    """The files of the training split, in order."""
    test: str
    labels: str
    """The key of the labels in each batch."""
    classes: int


LAYOUTS: dict[str, CifarLayout] = {
    "cifar10": CifarLayout(
        title="CIFAR-10",
        folder="cifar-10-batches-py",
        archive="cifar-10-python.tar.gz",
        train=tuple(f"data_batch_{number}" for number in range(1, 6)),
        test="test_batch",
        labels="labels",
        classes=10,
    ),
    "cifar100": CifarLayout(
        title="CIFAR-100",
        folder="cifar-100-python",
        archive="cifar-100-python.tar.gz",
        train=("train",),
        test="test",
        labels="fine_labels",
        classes=100,
    ),
}


class CifarArrays(NamedTuple):
    """A CIFAR set as read: uint8 images (n, 3072) and int64 labels (n,) per split."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


_ARRAY_GLOBALS: dict[tuple[str, str], Any] = {
    **{
        (module, "_reconstruct"): np.ndarray(0).__reduce__()[0]
        for module in ("numpy.core.multiarray", "numpy._core.multiarray")
    },
    **{
        (module, "_frombuffer"): np.zeros(1).__reduce_ex__(5)[0]
        for module in ("numpy.core.numeric", "numpy._core.numeric")
    },
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): codecs.encode,
}
"""Every global a batch may name, and what it stands for: numpy's array rebuilding
(protocol 0-4: ``_reconstruct``; 5: ``_frombuffer``; under numpy 1's module names and
numpy 2's) and ``_codecs.encode``, with which Python 3 pickles bytes at protocols 0-2.
The functions are taken from numpy's own pickling, so no private module is imported."""


class BatchUnpickler(pickle.Unpickler):
    """Unpickles a CIFAR batch, refusing every global but those of :data:`_ARRAY_GLOBALS`."""

    def __init__(self, file: Any, path: Path) -> None:
        super().__init__(file, encoding="bytes")
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        found = _ARRAY_GLOBALS.get((module, name))
        if found is None:
            raise UsageError(
                f"{self.path} is not a CIFAR batch: its pickle calls "
                f"{shortened(f'{module}.{name}')}, which loading it would run; {REPLACE}"
            )
        return found


def cifar_howto(name: str) -> str:
    """How to put set ``name``'s files where murmur reads them."""
    layout = LAYOUTS[name]
    return (
        f"download {layout.title}'s python version ({layout.archive}) from {CIFAR_URL}, "
        f"extract it and set data.root to the folder that holds {layout.folder}"
    )


def read_cifar(name: str, root: Path) -> CifarArrays:
    """Set ``name``'s training and test batches from ``root``: its folder
    (``cifar-10-batches-py``, ``cifar-100-python``) or the folder that holds it.
    UsageError, in one line naming the file, for a file missing or not a batch."""
    layout = LAYOUTS[name]
    try:
        folder = _batch_folder(name, root)
        missing = [file for file in (*layout.train, layout.test) if not (folder / file).is_file()]
    except OSError as error:
        raise UsageError(
            f"data.dataset={name}: cannot look into {root} ({error.strerror}); make it readable"
        ) from None
    if missing:
        raise UsageError(
            f"data.dataset={name}: {folder} lacks {', '.join(missing)}; {cifar_howto(name)}"
        )
    train = [_read_batch(folder / file, layout) for file in layout.train]
    x_test, y_test = _read_batch(folder / layout.test, layout)
    return CifarArrays(
        x_train=np.concatenate([x for x, _ in train]),
        y_train=np.concatenate([y for _, y in train]),
        x_test=x_test,
        y_test=y_test,
    )


def _batch_folder(name: str, root: Path) -> Path:
    """``root``'s subfolder of the set's batches, or ``root`` itself where it holds them."""
    layout = LAYOUTS[name]
    if not root.is_dir():
        raise UsageError(
            f"data.dataset={name}: directory {root} does not exist; {cifar_howto(name)}"
        )
    if (root / layout.folder).is_dir():
        return root / layout.folder
    if root.name == layout.folder or any(
        (root / file).is_file() for file in (*layout.train, layout.test)
    ):
        return root
    raise UsageError(
        f"data.dataset={name}: {root} holds no {layout.folder} folder; {cifar_howto(name)}"
    )


def _read_batch(path: Path, layout: CifarLayout) -> tuple[np.ndarray, np.ndarray]:
    """One batch's images, uint8 (n, 3072), and labels, int64 (n,), each checked."""
    batch = _unpickle(path)
    if not isinstance(batch, dict):
        raise UsageError(
            f"{path} is not a CIFAR batch: it holds a {type(batch).__name__}, not a dict; {REPLACE}"
        )
    images = _entry(batch, "data", path)
    labels = _entry(batch, layout.labels, path)
    if not _is_pixel_rows(images):
        raise UsageError(
            f"{path}: data is {_shape(images)}, not uint8 rows of {PIXELS} pixels; {REPLACE}"
        )
    return images, _labels(labels, images.shape[0], layout, path)


def _is_pixel_rows(images: object) -> TypeGuard[np.ndarray]:
    """Whether ``images`` is uint8 (n, 3072), as the ``data`` of a batch is."""
    return (
        isinstance(images, np.ndarray)
        and images.dtype == np.uint8
        and images.ndim == 2
        and images.shape[1] == PIXELS
    )


def _unpickle(path: Path) -> object:
    """The object the pickle ``path`` holds, loaded by :class:`BatchUnpickler`."""
    try:
        with path.open("rb") as handle:
            return BatchUnpickler(handle, path).load()
    except UsageError:
        raise
    except OSError as error:
        raise UsageError(f"{path} is unreadable ({error.strerror}); make it readable") from None
    except Exception as error:  # a damaged pickle can fail in any of its opcodes
        raise UsageError(
            f"{path} is not a CIFAR batch ({type(error).__name__}: {shortened(str(error))}); "
            f"{REPLACE}"
        ) from None


def _entry(batch: dict[Any, Any], key: str, path: Path) -> object:
    """``batch[key]``, under a bytes key as the official files have it or a str one."""
    for candidate in (key.encode(), key):
        if candidate in batch:
            return batch[candidate]
    raise UsageError(f"{path} is not a CIFAR batch: it has no {key!r} entry; {REPLACE}")


def _labels(labels: object, rows: int, layout: CifarLayout, path: Path) -> np.ndarray:
    """A batch's labels as int64 (rows,), each a class of ``layout``."""
    try:
        values = np.asarray(labels) if isinstance(labels, list | np.ndarray) else None
    except (ValueError, TypeError):  # lists of unequal lengths
        values = None
    if values is None or values.ndim != 1 or (values.size and values.dtype.kind not in "iu"):
        raise UsageError(
            f"{path}: {layout.labels} is {_shape(labels)}, not a list of class numbers; {REPLACE}"
        )
    if values.shape[0] != rows:
        raise UsageError(
            f"{path} holds {rows} images but {values.shape[0]} {layout.labels}; {REPLACE}"
        )
    outside = (values < 0) | (values >= layout.classes)
    if outside.any():
        raise UsageError(
            f"{path}: label {int(values[np.argmax(outside)])} is outside 0..{layout.classes - 1} "
            f"of {layout.title}; {REPLACE}"
        )
    return values.astype(np.int64)


def _shape(value: object) -> str:
    """What ``value`` is, for a message: an array's dtype and shape, or its type."""
    if isinstance(value, np.ndarray):
        return f"{value.dtype} of shape {value.shape}"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    return f"a {type(value).__name__}"
