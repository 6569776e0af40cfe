"""A user's own data as a :class:`~murmur.data.datasets.Dataset`: from arrays, from a
``torch.utils.data.Dataset``, and back to an ``.npz`` file.

The arrays are checked (shapes, sample counts, numeric values, NaN and inf, the
labels of a classification problem) and converted, never preprocessed: features
become float32 rows of (samples, features), extra dimensions flattened; the user
scales their own features. Every problem is a :class:`~murmur.errors.UsageError` of
one line that names the array.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from murmur.data.datasets import Dataset, Task
from murmur.errors import UsageError

TASKS: tuple[Task, ...] = ("classification", "regression")
SPLITS = ("x_train", "y_train", "x_test", "y_test")
"""The names of a dataset's four arrays, in their order (also the keys of its .npz)."""
VALIDATION_SPLIT = ("x_validation", "y_validation")
"""The names of a validation split's two arrays (the keys of its .npz)."""
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def from_arrays(
    x_train: Any,
    y_train: Any,
    x_test: Any,
    y_test: Any,
    *,
    task: Task = "classification",
    num_classes: int | None = None,
    name: str = "arrays",
) -> Dataset:
    """A :class:`Dataset` of NumPy arrays or torch tensors, checked, not preprocessed.

    ``x_*``: the features, one row per sample, of any numeric dtype; more than two
    dimensions are flattened to (samples, features) and the values become float32 as
    they are (scale them yourself). ``task = "classification"``: ``y_*`` are integer
    class labels 0..C-1 of shape (samples,) (int64 out), at least two classes in the
    training labels; ``num_classes`` (C) defaults to the largest label + 1.
    ``task = "regression"``: ``y_*`` are float targets of shape (samples,) or
    (samples, outputs), float32 (samples, outputs) out. UsageError, in one line, for
    arrays that do not make a dataset.
    """
    return build_dataset(
        (x_train, y_train, x_test, y_test),
        task=task,
        num_classes=num_classes,
        name=name,
        where=f"dataset {name!r}",
    )


def build_dataset(
    arrays: tuple[Any, Any, Any, Any],
    *,
    task: Task,
    num_classes: int | None,
    name: str,
    where: str,
) -> Dataset:
    """:func:`from_arrays` of (x_train, y_train, x_test, y_test), its messages starting
    with ``where`` (what holds the arrays: a dataset, a file)."""
    if task not in TASKS:
        raise UsageError(f"{where}: task must be 'classification' or 'regression', not {task!r}")
    x_train, y_train, x_test, y_test = (
        _numeric(array, label, where) for array, label in zip(arrays, SPLITS, strict=True)
    )
    xs = [_features(x, label, where) for x, label in ((x_train, "x_train"), (x_test, "x_test"))]
    if xs[0].shape[1] != xs[1].shape[1]:
        raise UsageError(
            f"{where}: x_train has {xs[0].shape[1]} features per sample but x_test has "
            f"{xs[1].shape[1]}; both splits need the same features"
        )
    for x, y, split in ((xs[0], y_train, "train"), (xs[1], y_test, "test")):
        if y.shape[0] != x.shape[0]:
            raise UsageError(
                f"{where}: x_{split} holds {x.shape[0]} samples but y_{split} holds "
                f"{y.shape[0]}; give one target per sample"
            )
    if task == "regression":
        if num_classes not in (None, 0):
            raise UsageError(f"{where}: num_classes is for classification, not regression")
        ys = [_targets(y, label, where) for y, label in ((y_train, "y_train"), (y_test, "y_test"))]
        return Dataset(name, xs[0], ys[0], xs[1], ys[1], "regression", 0)
    labels, classes = _labels(y_train, y_test, num_classes, where)
    return Dataset(name, xs[0], labels[0], xs[1], labels[1], "classification", classes)


def with_validation(dataset: Dataset, x: Any, y: Any, where: str) -> Dataset:
    """``dataset`` with the validation split ``(x, y)``, checked as :func:`from_arrays`
    checks a split (numbers, finite, one target per sample, the training features, and
    the classes or target width of ``dataset``); UsageError, in one line starting with
    ``where``, for arrays that do not make one."""
    x_values, y_values = (
        _numeric(array, label, where) for array, label in zip((x, y), VALIDATION_SPLIT, strict=True)
    )
    features = _features(x_values, "x_validation", where)
    if features.shape[1] != dataset.features:
        raise UsageError(
            f"{where}: x_validation has {features.shape[1]} features per sample but x_train "
            f"has {dataset.features}; both splits need the same features"
        )
    if y_values.shape[0] != features.shape[0]:
        raise UsageError(
            f"{where}: x_validation holds {features.shape[0]} samples but y_validation holds "
            f"{y_values.shape[0]}; give one target per sample"
        )
    if dataset.task == "regression":
        targets = _targets(y_values, "y_validation", where)
        if targets.shape[1] != dataset.outputs:
            raise UsageError(
                f"{where}: y_validation has {targets.shape[1]} targets per sample but y_train "
                f"has {dataset.outputs}"
            )
        return dataclasses.replace(dataset, x_validation=features, y_validation=targets)
    labels = _integers(y_values, "y_validation", where)
    outside = (labels < 0) | (labels >= dataset.num_classes)
    if outside.any():
        index = int(np.argmax(outside))
        raise UsageError(
            f"{where}: y_validation[{index}] is {int(labels[index])}, outside the classes "
            f"0..{dataset.num_classes - 1} of the training split"
        )
    return dataclasses.replace(
        dataset, x_validation=features, y_validation=torch.from_numpy(labels)
    )


def from_torch_dataset(
    train: Any,
    test: Any,
    *,
    task: Task = "classification",
    num_classes: int | None = None,
    name: str = "torch",
) -> Dataset:
    """A :class:`Dataset` of two map-style ``torch.utils.data.Dataset`` objects whose
    items are (x, y) pairs, read once (``train[0]``, ``train[1]``, ...) and stacked into
    tensors, then checked as :func:`from_arrays` checks arrays (no preprocessing:
    features are used as the items give them; a transform of the dataset applies)."""
    x_train, y_train = _materialize(train, "train")
    x_test, y_test = _materialize(test, "test")
    return from_arrays(
        x_train, y_train, x_test, y_test, task=task, num_classes=num_classes, name=name
    )


def save_npz(dataset: Dataset, path: str | Path) -> Path:
    """Write ``dataset``'s four arrays to ``path`` (``.npz`` added when missing), the
    file ``data.dataset = "file"`` with ``data.path`` reads back. Returns the path."""
    target = Path(path)
    if target.suffix != ".npz":
        target = target.with_name(target.name + ".npz")
    arrays = {key: getattr(dataset, key).cpu().numpy() for key in SPLITS}
    with target.open("wb") as handle:
        np.savez(handle, **arrays)
    return target


def dataset_sha256(dataset: Dataset) -> str:
    """SHA-256 of the four tensors of ``dataset``: each one's name, dtype, shape and
    bytes, in the order x_train, y_train, x_test, y_test, then the training samples'
    writers (``groups``) where it has them."""
    digest = hashlib.sha256()
    keys = (*SPLITS, "groups") if dataset.groups is not None else SPLITS
    for key in keys:
        tensor = getattr(dataset, key).detach().cpu().contiguous()
        digest.update(f"{key}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
        digest.update(tensor.numpy().tobytes())
    return digest.hexdigest()


# ---- checks -------------------------------------------------------------------------------


def _numeric(array: Any, label: str, where: str) -> np.ndarray:
    """``array`` as a NumPy array of numbers; UsageError for anything else."""
    if isinstance(array, torch.Tensor):
        array = array.detach().cpu()
        if array.dtype == torch.bfloat16:
            array = array.float()
        array = array.numpy()
    try:
        values = np.asarray(array)
    except (ValueError, TypeError) as error:
        raise UsageError(f"{where}: {label} is not an array of numbers ({error})") from None
    if values.dtype.kind not in "biuf":
        raise UsageError(
            f"{where}: {label} holds {values.dtype} values, not numbers; convert it to "
            "numbers first"
        )
    if values.ndim == 0:
        raise UsageError(f"{where}: {label} is a single value, not an array of samples")
    if values.shape[0] == 0:
        raise UsageError(f"{where}: {label} holds no samples; every split needs at least one")
    if values.dtype.kind == "f":
        _check_finite(values, label, where)
    return values


def _check_finite(values: np.ndarray, label: str, where: str) -> None:
    """UsageError naming the first NaN or infinite value of ``values`` and where it is."""
    bad = ~np.isfinite(values)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        kind = "NaN" if np.isnan(values[index]) else "infinite"
        raise UsageError(
            f"{where}: {label}[{', '.join(map(str, index))}] is {kind} "
            f"({int(bad.sum())} such values); remove or fill them first"
        )


def _features(x: np.ndarray, label: str, where: str) -> torch.Tensor:
    """(samples, ...) numbers as float32 rows of (samples, features)."""
    flat = x.reshape(x.shape[0], -1)
    if flat.shape[1] == 0:
        raise UsageError(f"{where}: {label} has shape {x.shape}: its samples hold no features")
    return torch.from_numpy(_float32(flat, label, where))


def _float32(values: np.ndarray, label: str, where: str) -> np.ndarray:
    """``values`` as a contiguous float32 copy; UsageError for magnitudes float32 lacks."""
    if values.dtype.kind in "iuf" and values.size and np.abs(values).max() > _FLOAT32_MAX:
        raise UsageError(
            f"{where}: {label} holds values beyond float32's range (magnitude "
            f"{_FLOAT32_MAX:.4g}); scale them first"
        )
    return np.ascontiguousarray(values, dtype=np.float32).copy()


def _targets(y: np.ndarray, label: str, where: str) -> torch.Tensor:
    """Regression targets (samples,) or (samples, outputs) as float32 (samples, outputs)."""
    if y.ndim > 2:
        raise UsageError(
            f"{where}: {label} has shape {y.shape}; regression targets are (samples,) or "
            "(samples, outputs)"
        )
    if y.ndim == 2 and y.shape[1] == 0:
        raise UsageError(f"{where}: {label} has shape {y.shape}: no targets per sample")
    return torch.from_numpy(_float32(y.reshape(y.shape[0], -1), label, where))


def _labels(
    y_train: np.ndarray, y_test: np.ndarray, num_classes: int | None, where: str
) -> tuple[list[torch.Tensor], int]:
    """Both splits' class labels as int64 (samples,), and the number of classes."""
    labels = [_integers(y, label, where) for y, label in ((y_train, "y_train"), (y_test, "y_test"))]
    largest = max(int(y.max()) for y in labels)
    classes = largest + 1 if num_classes is None else num_classes
    if isinstance(classes, bool) or not isinstance(classes, int | np.integer) or classes < 2:
        raise UsageError(f"{where}: num_classes must be an integer of at least 2, not {classes!r}")
    for y, label in zip(labels, ("y_train", "y_test"), strict=True):
        outside = (y < 0) | (y >= classes)
        if outside.any():
            index = int(np.argmax(outside))
            raise UsageError(
                f"{where}: {label}[{index}] is {int(y[index])}, outside the classes "
                f"0..{classes - 1}; labels are class numbers from 0"
            )
    present = np.unique(labels[0])
    if present.size < 2:
        raise UsageError(
            f"{where}: y_train holds one class only ({int(present[0])}); a classifier "
            "needs at least two"
        )
    return [torch.from_numpy(y) for y in labels], int(classes)


def _integers(y: np.ndarray, label: str, where: str) -> np.ndarray:
    """Class labels (samples,) or (samples, 1) as int64 (samples,); whole floats pass."""
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise UsageError(
            f"{where}: {label} has shape {y.shape}; class labels are one integer per "
            "sample, shape (samples,) (use task = 'regression' for several targets)"
        )
    if y.dtype.kind == "b":
        return y.astype(np.int64)
    if y.dtype.kind == "f":
        fractional = y != np.round(y)
        if fractional.any():
            index = int(np.argmax(fractional))
            raise UsageError(
                f"{where}: {label}[{index}] is {float(y[index]):g}, not a class number; class "
                "labels are integers 0..C-1 (use task = 'regression' for real targets)"
            )
        if np.abs(y).max() >= 2**62:
            raise UsageError(f"{where}: {label} holds labels too large to be class numbers")
    if y.dtype.kind == "u" and y.max() >= 2**62:
        raise UsageError(f"{where}: {label} holds labels too large to be class numbers")
    return np.ascontiguousarray(y, dtype=np.int64).copy()


# ---- torch datasets -----------------------------------------------------------------------


def _materialize(source: Any, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The (x, y) items of a map-style dataset, stacked: (samples, ...) and (samples, ...)."""
    try:
        count = len(source)
    except TypeError:
        raise UsageError(
            f"the {split} dataset ({type(source).__name__}) has no len(): give a map-style "
            "torch.utils.data.Dataset of (x, y) items"
        ) from None
    if count == 0:
        raise UsageError(f"the {split} dataset holds no samples; every split needs at least one")
    xs: list[torch.Tensor] = []
    ys: list[torch.Tensor] = []
    for index in range(count):
        x, y = _pair(source[index], split, index)
        xs.append(x)
        ys.append(y)
    return _stack(xs, split, "x"), _stack(ys, split, "y")


def _pair(item: Any, split: str, index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One item as its two tensors; UsageError unless it is an (x, y) pair of numbers."""
    if not isinstance(item, Sequence) or isinstance(item, str | bytes) or len(item) != 2:
        raise UsageError(
            f"item {index} of the {split} dataset is a {type(item).__name__}, not an (x, y) pair"
        )
    try:
        return torch.as_tensor(item[0]), torch.as_tensor(item[1])
    except (TypeError, ValueError, RuntimeError) as error:
        raise UsageError(
            f"item {index} of the {split} dataset is not a pair of numbers or tensors ({error})"
        ) from None


def _stack(tensors: list[torch.Tensor], split: str, part: str) -> torch.Tensor:
    """The items' ``part`` (x or y) stacked; UsageError naming the first of another shape."""
    first = tensors[0].shape
    for index, tensor in enumerate(tensors):
        if tensor.shape != first:
            raise UsageError(
                f"item {index} of the {split} dataset has {part} of shape {tuple(tensor.shape)} "
                f"but item 0 has {tuple(first)}; every item needs the same shape"
            )
    return torch.stack([tensor.cpu() for tensor in tensors])
