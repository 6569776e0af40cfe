"""Datasets: the small sets bundled with murmur, the field's benchmarks from their
official files on disk, generated problems.

Every loader returns a :class:`Dataset` of float32 features, already
preprocessed so that a model can use them as they are:

- pixel sets (mnist5k, digits, mnist, fashion-mnist, cifar10, cifar100) are divided
  by their largest possible value (255, or 16 for digits) to lie in [0, 1], with no
  per-channel standardization; a CIFAR row is its image channel first, (3, 32, 32)
  flattened (:mod:`murmur.data.cifar`);
- LEAF's sets (femnist, shakespeare) are used as LEAF's JSON files hold them, a
  Shakespeare character as its index in LEAF's alphabet; each training sample
  carries its writer (:attr:`Dataset.groups`, :mod:`murmur.data.leaf`);
- tabular sets (vowel, satimage, letter) are z-scored column by column with the
  mean and standard deviation of the training split (a constant column keeps
  its values centred and is divided by 1);
- generated sets (synthetic, blobs) are used as drawn, from a fixed seed, so
  every call returns the same tensors.

:data:`DATASETS` describes every name :func:`load_dataset` accepts.
"""

from __future__ import annotations

import gzip
import importlib.resources
import math
import zlib
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from murmur.data.cifar import LAYOUTS as CIFAR_LAYOUTS
from murmur.data.cifar import cifar_howto, read_cifar
from murmur.data.leaf import LAYOUTS as LEAF_LAYOUTS
from murmur.data.leaf import leaf_howto, read_leaf
from murmur.errors import UsageError

Task = Literal["classification", "regression"]
Source = Literal["bundled", "on disk", "generated", "file", "python"]


@dataclass(frozen=True, eq=False)
class Dataset:
    """A train/test split ready for training, and a validation split where the run
    holds one out (``data.validation``, ``data.validation_path``).

    ``x_*`` are float32 of shape (samples, features). For classification
    ``y_*`` are int64 class indices of shape (samples,); for regression they
    are float32 targets of shape (samples, outputs) and ``num_classes`` is 0.
    """

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    task: Task
    num_classes: int
    x_validation: torch.Tensor | None = None
    """The validation split, apart from the training and test splits; None: none."""
    y_validation: torch.Tensor | None = None
    groups: torch.Tensor | None = None
    """int64 (training samples,): each training sample's writer or speaker, a number
    shared by the samples of one (the ``natural`` partition keeps them on one agent);
    None: the set records none."""

    def __post_init__(self) -> None:
        rows = (self.x_train.shape[0],)
        if self.groups is not None and (
            self.groups.shape != rows or self.groups.dtype != torch.int64
        ):
            raise ValueError(
                f"groups must be int64 of shape {rows}, one writer per training sample, not "
                f"{self.groups.dtype} of shape {tuple(self.groups.shape)}"
            )

    @property
    def writers(self) -> int:
        """Distinct writers among the training samples; 0 where the set records none."""
        return 0 if self.groups is None else int(self.groups.unique().numel())

    @property
    def validation(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The validation split's inputs and targets; None where there is none."""
        if self.x_validation is None or self.y_validation is None:
            return None
        return self.x_validation, self.y_validation

    @property
    def features(self) -> int:
        """Number of input features per sample."""
        return self.x_train.shape[1]

    @property
    def outputs(self) -> int:
        """Width of the model output: the number of classes, or the target width."""
        if self.task == "classification":
            return self.num_classes
        return self.y_train.shape[1]


@dataclass(frozen=True)
class DatasetInfo:
    """What ``murmur datasets`` shows about one dataset name."""

    name: str
    description: str
    train: int
    test: int
    features: int
    classes: int
    """Classes of a classification set; 0 for regression."""
    source: Source
    targets: int = 1
    """Width of a regression set's targets (1 for classification sets)."""
    writers: int = 0
    """Writers (or speakers) of the training split, whose samples ``data.partition =
    "natural"`` keeps together; 0: the set records none."""
    sizes_vary: bool = False
    """Whether ``train``, ``test`` and ``writers`` are only those of the whole set, and a
    user's copy holds what their sampling kept (LEAF's sets): the plan then reads the
    files for the real ones before it checks a run."""

    @property
    def outputs(self) -> int:
        """Width of the model output: the number of classes, or the target width."""
        return self.classes or self.targets


FULL_MNIST_SIZES: tuple[int, int, int, int, Source] = (60000, 10000, 784, 10, "on disk")
"""Training and test images, pixels, classes and source of the full MNIST and
Fashion-MNIST sets, which share their shape: 28x28 images in ten classes."""

CIFAR_SIZES = (50000, 10000, 3072)
"""Training and test images of the official CIFAR-10 and CIFAR-100 files, and the
values of one (3 channels of 32x32 pixels)."""
LEAF_SIZES = {"femnist": (724737, 80526, 784), "shakespeare": (3803542, 422616, 80)}
"""The whole LEAF sets' samples, 805,263 of 3,550 writers and 4,226,158 of 1,129
speaking parts, split 90/10 about as LEAF's default ``--tf 0.9`` does, and the
features of one: what ``murmur datasets`` shows. A user's files hold what their
sampling kept (``DatasetInfo.sizes_vary``)."""

DATASETS: dict[str, DatasetInfo] = {
    info.name: info
    for info in (
        DatasetInfo(
            "mnist5k",
            "MNIST handwritten digits, 5,000-image subset (28x28 pixels)",
            4000,
            1000,
            784,
            10,
            "bundled",
        ),
        DatasetInfo(
            "digits", "UCI optical handwritten digits, 8x8 pixels", 1347, 450, 64, 10, "bundled"
        ),
        DatasetInfo(
            "vowel",
            "UCI Deterding vowel recognition, 10 formant features",
            528,
            462,
            10,
            11,
            "bundled",
        ),
        DatasetInfo(
            "satimage",
            "UCI Statlog Landsat satellite image, 3x3 pixels x 4 bands",
            4435,
            2000,
            36,
            6,
            "bundled",
        ),
        DatasetInfo(
            "letter",
            "UCI letter recognition, 16 glyph statistics, A..Z",
            16000,
            4000,
            16,
            26,
            "bundled",
        ),
        DatasetInfo(
            "mnist",
            "MNIST handwritten digits from the official IDX files (data.root)",
            *FULL_MNIST_SIZES,
        ),
        DatasetInfo(
            "fashion-mnist",
            "Fashion-MNIST clothing images from IDX files (data.root)",
            *FULL_MNIST_SIZES,
        ),
        DatasetInfo(
            "cifar10",
            "CIFAR-10 32x32 colour images, official python batches (data.root)",
            *CIFAR_SIZES,
            10,
            "on disk",
        ),
        DatasetInfo(
            "cifar100",
            "CIFAR-100 32x32 colour images, 100 fine classes, python batches (data.root)",
            *CIFAR_SIZES,
            100,
            "on disk",
        ),
        DatasetInfo(
            "femnist",
            "LEAF FEMNIST 28x28 characters of 3,550 writers (~: whole set), JSON (data.root)",
            *LEAF_SIZES["femnist"],
            62,
            "on disk",
            writers=3550,
            sizes_vary=True,
        ),
        DatasetInfo(
            "shakespeare",
            "LEAF Shakespeare next letter, 1,129 speaking parts (~: whole set), JSON (data.root)",
            *LEAF_SIZES["shakespeare"],
            80,
            "on disk",
            writers=1129,
            sizes_vary=True,
        ),
        DatasetInfo(
            "synthetic",
            "linear least squares with a known optimum (regression)",
            2000,
            500,
            10,
            0,
            "generated",
        ),
        DatasetInfo(
            "blobs",
            "four well separated Gaussian clusters, for fast tests",
            2000,
            500,
            8,
            4,
            "generated",
        ),
    )
}

PIXEL_SCALE: dict[str, float] = {"mnist5k": 255.0, "digits": 16.0}
"""Largest pixel value of each bundled pixel set; the other bundled sets are tabular."""

FASHION_MNIST_ROOT = Path("/usr/share/datasets/fashion-mnist")
"""Where Debian's ``dataset-fashion-mnist`` package puts the IDX files."""

IDX_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
_IDX_IMAGES_MAGIC = 0x00000803  # unsigned bytes, 3 dimensions
_IDX_LABELS_MAGIC = 0x00000801  # unsigned bytes, 1 dimension

SYNTHETIC_SEED = 20240
SYNTHETIC_TRUE_WEIGHT = (1.0, -2.0, 0.5, 3.0, -1.5, 0.0, 2.5, -0.5, 1.5, -3.0)
"""Weights that generate the synthetic targets: y = x @ w + b + 0.1 * noise."""
SYNTHETIC_TRUE_BIAS = 0.7
SYNTHETIC_NOISE = 0.1

BLOBS_SEED = 20241
BLOBS_MEAN_SCALE = 3.0
"""Cluster means are drawn from N(0, scale^2) per coordinate; the clusters have unit spread."""


def load_dataset(name: str, root: str | Path | None = None) -> Dataset:
    """Load dataset ``name`` (a key of :data:`DATASETS`), preprocessed.

    ``root`` is the directory of the files of a set on disk: the IDX files for
    ``mnist`` (required) and ``fashion-mnist`` (default :data:`FASHION_MNIST_ROOT`),
    CIFAR's batches (:func:`~murmur.data.cifar.read_cifar`), LEAF's JSON files
    (:func:`~murmur.data.leaf.read_leaf`); ``None`` or ``""`` means not set. Other
    datasets ignore it.
    """
    if name not in DATASETS:
        raise UsageError(
            f"data.dataset={name!r} is not a dataset; choose one of: {', '.join(DATASETS)}"
        )
    source = DATASETS[name].source
    if source == "bundled":
        return _load_bundled(name)
    if name == "synthetic":
        return _make_synthetic()
    if name == "blobs":
        return _make_blobs()
    if name in CIFAR_LAYOUTS:
        return _load_cifar(name, _disk_root(name, root, cifar_howto(name)))
    if name in LEAF_LAYOUTS:
        return _load_leaf(name, _disk_root(name, root, leaf_howto(name)))
    return _load_idx_dataset(name, root)


def synthetic_optimum(dataset: Dataset) -> tuple[torch.Tensor, torch.Tensor]:
    """The least-squares optimum of a regression dataset on its training split.

    Returns ``(weight, bias)`` of shapes (outputs, features) and (outputs,): the
    parameters of an ``nn.Linear(features, outputs)`` that minimize the mean
    squared error on the training set, solved in float64 on ``[x, 1]``.
    """
    if dataset.task != "regression":
        raise ValueError(
            f"synthetic_optimum needs a regression dataset, got {dataset.name!r} ({dataset.task})"
        )
    x = dataset.x_train.double()
    design = torch.cat([x, torch.ones(x.shape[0], 1, dtype=x.dtype)], dim=1)
    solution = torch.linalg.lstsq(design, dataset.y_train.double()).solution
    weight = solution[:-1].T.contiguous().float()
    bias = solution[-1].contiguous().float()
    return weight, bias


# ---- bundled .npz files -------------------------------------------------------------------


def _bundled_file(name: str) -> Traversable:
    return importlib.resources.files("murmur.data") / "files" / f"{name}.npz"


def _load_bundled(name: str) -> Dataset:
    info = DATASETS[name]
    file = _bundled_file(name)
    reinstall = "reinstall murmur or rebuild the bundled files"
    if not file.is_file():
        raise UsageError(
            f"data.dataset={name}: the bundled file {file} is missing from this "
            f"installation; {reinstall}"
        )
    try:
        with file.open("rb") as handle, np.load(handle, allow_pickle=False) as arrays:
            x_train, y_train, x_test, y_test = (
                arrays[key] for key in ("x_train", "y_train", "x_test", "y_test")
            )
    except (OSError, ValueError, KeyError, zlib.error) as error:
        raise UsageError(
            f"data.dataset={name}: the bundled file {file} is unreadable ({error}); {reinstall}"
        ) from error
    for x, y in ((x_train, y_train), (x_test, y_test)):
        if x.ndim != 2 or x.shape[1] != info.features or y.shape != (x.shape[0],):
            raise UsageError(
                f"data.dataset={name}: the bundled file {file} has arrays of shape "
                f"{x.shape} and {y.shape}, expected (n, {info.features}) and (n,); {reinstall}"
            )

    if name in PIXEL_SCALE:
        scale = PIXEL_SCALE[name]
        xs = [torch.from_numpy(x.astype(np.float32) / np.float32(scale)) for x in (x_train, x_test)]
    else:
        xs = _standardize(torch.from_numpy(x_train), torch.from_numpy(x_test))
    return Dataset(
        name=name,
        x_train=xs[0],
        y_train=torch.from_numpy(y_train.astype(np.int64)),
        x_test=xs[1],
        y_test=torch.from_numpy(y_test.astype(np.int64)),
        task="classification",
        num_classes=info.classes,
    )


def _standardize(x_train: torch.Tensor, *others: torch.Tensor) -> list[torch.Tensor]:
    """Z-score the training split and the ``others`` with the training mean and
    (population) standard deviation."""
    train = x_train.double()
    mean = train.mean(dim=0)
    std = train.std(dim=0, correction=0)
    std = torch.where(std > 0, std, torch.ones_like(std))
    return [((x.double() - mean) / std).float() for x in (x_train, *others)]


# ---- the field's benchmarks from their official files on disk ------------------------------


def _disk_root(name: str, root: str | Path | None, howto: str) -> Path:
    """``data.root`` of set ``name``, which reads its files from there; UsageError,
    saying ``howto`` get them, where it is not set."""
    if not root:
        raise UsageError(
            f"data.dataset={name} reads its files from disk but data.root is not set; {howto}"
        )
    return _root_path(root)


def _load_cifar(name: str, root: Path) -> Dataset:
    """CIFAR-10 or CIFAR-100, each image's 3072 bytes scaled to [0, 1]."""
    arrays = read_cifar(name, root)
    return Dataset(
        name=name,
        x_train=_unit_pixels(arrays.x_train),
        y_train=torch.from_numpy(arrays.y_train),
        x_test=_unit_pixels(arrays.x_test),
        y_test=torch.from_numpy(arrays.y_test),
        task="classification",
        num_classes=DATASETS[name].classes,
    )


def _load_leaf(name: str, root: Path) -> Dataset:
    """FEMNIST or Shakespeare as LEAF's files hold them, with each training sample's writer."""
    arrays = read_leaf(name, root)
    return Dataset(
        name=name,
        x_train=torch.from_numpy(arrays.x_train),
        y_train=torch.from_numpy(arrays.y_train),
        x_test=torch.from_numpy(arrays.x_test),
        y_test=torch.from_numpy(arrays.y_test),
        task="classification",
        num_classes=DATASETS[name].classes,
        groups=torch.from_numpy(arrays.groups),
    )


# ---- MNIST-format IDX files on disk -------------------------------------------------------


def _load_idx_dataset(name: str, root: str | Path | None) -> Dataset:
    howto = (
        f"put {', '.join(IDX_FILES)} (each optionally .gz) in one directory and set data.root=DIR"
    )
    if name == "fashion-mnist":
        howto += (
            f" (on Debian/Ubuntu, apt-get install dataset-fashion-mnist fills {FASHION_MNIST_ROOT})"
        )
    elif not root:
        raise UsageError(
            f"data.dataset={name} reads the official MNIST files from disk but data.root "
            f"is not set; {howto}, or use data.dataset=mnist5k (bundled)"
        )
    directory = _root_path(root) if root else FASHION_MNIST_ROOT
    if not directory.is_dir():
        raise UsageError(f"data.dataset={name}: directory {directory} does not exist; {howto}")
    found = {base: _find_idx_file(directory, base) for base in IDX_FILES}
    missing = [base for base, path in found.items() if path is None]
    if missing:
        raise UsageError(
            f"data.dataset={name}: {directory} lacks {', '.join(missing)} (plain or .gz); {howto}"
        )
    paths = {base: path for base, path in found.items() if path is not None}

    x_train, y_train = _read_idx_split(name, paths, "train")
    x_test, y_test = _read_idx_split(name, paths, "t10k")
    if x_train.shape[1:] != x_test.shape[1:]:
        raise UsageError(
            f"data.dataset={name}: {paths['train-images-idx3-ubyte']} holds images of "
            f"{_pixels(x_train)} pixels but {paths['t10k-images-idx3-ubyte']} holds images of "
            f"{_pixels(x_test)}; replace them with files of one image size"
        )
    return Dataset(
        name=name,
        x_train=_unit_pixels(x_train),
        y_train=torch.from_numpy(y_train.astype(np.int64)),
        x_test=_unit_pixels(x_test),
        y_test=torch.from_numpy(y_test.astype(np.int64)),
        task="classification",
        num_classes=DATASETS[name].classes,
    )


def _root_path(root: str | Path) -> Path:
    """data.root as a path, ``~`` expanded; a ``~user`` that names no user is refused."""
    try:
        return Path(root).expanduser()
    except RuntimeError:
        raise UsageError(
            f"data.root={str(root)!r}: cannot find the home directory its '~' names; "
            "give the full path of the directory"
        ) from None


def _find_idx_file(directory: Path, base: str) -> Path | None:
    for candidate in (directory / base, directory / f"{base}.gz"):
        try:
            if candidate.is_file():
                return candidate
        except OSError as error:
            raise UsageError(
                f"cannot look for {candidate} ({error.strerror}); make {directory} readable"
            ) from None
    return None


def _read_idx_split(name: str, paths: dict[str, Path], split: str) -> tuple[np.ndarray, np.ndarray]:
    """One split's images (images, rows, columns) and labels, refused unless they pair up."""
    images_path = paths[f"{split}-images-idx3-ubyte"]
    labels_path = paths[f"{split}-labels-idx1-ubyte"]
    images = _read_idx_images(images_path)
    labels = _read_idx_labels(labels_path)
    if images.shape[0] != labels.shape[0]:
        raise UsageError(
            f"data.dataset={name}: {images_path} holds {images.shape[0]} images but "
            f"{labels_path} holds {labels.shape[0]} labels; replace them with a matching pair"
        )
    return images, labels


def _pixels(images: np.ndarray) -> str:
    """The image size of (images, rows, columns), e.g. "28x28"."""
    return f"{images.shape[1]}x{images.shape[2]}"


def _unit_pixels(images: np.ndarray) -> torch.Tensor:
    """uint8 images (images, ...) as float32 rows of pixels in [0, 1], each image's
    values in the order they are stored."""
    flat = images.reshape(images.shape[0], -1)
    return torch.from_numpy(flat.astype(np.float32) / np.float32(255.0))


def _read_idx_images(path: Path) -> np.ndarray:
    """An IDX image file as uint8 of shape (images, rows, columns), none of them 0."""
    return _read_idx(path, _IDX_IMAGES_MAGIC)


def _read_idx_labels(path: Path) -> np.ndarray:
    """An IDX label file as uint8 of shape (labels,): at least one, each 0..9."""
    labels = _read_idx(path, _IDX_LABELS_MAGIC)
    if labels.max() > 9:
        raise UsageError(
            f"{path}: label {int(labels.max())} is outside 0..9; the file is not an MNIST "
            "label file, replace it"
        )
    return labels


def _read_idx(path: Path, magic: int) -> np.ndarray:
    """Parse an unsigned-byte IDX file: big-endian magic, one uint32 per dimension, data."""
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as handle:
            raw = handle.read()
    except (OSError, EOFError, zlib.error) as error:
        raise UsageError(f"{path} is unreadable ({error}); replace the file") from error

    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(raw) < 4 or int.from_bytes(raw[:4], "big") != magic:
        found = f"0x{int.from_bytes(raw[:4], 'big'):08x}" if len(raw) >= 4 else "none"
        kind = "image" if magic == _IDX_IMAGES_MAGIC else "label"
        raise UsageError(
            f"{path} is not an IDX {kind} file: magic number {found}, expected "
            f"0x{magic:08x}; replace the file"
        )
    if len(raw) < header:
        raise UsageError(f"{path} is truncated inside its header; replace the file")
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    expected = math.prod(dims)  # exact; np.prod would wrap around in int64
    data_bytes = len(raw) - header
    if data_bytes != expected:
        problem = "truncated" if data_bytes < expected else "longer than its header says"
        raise UsageError(
            f"{path} is {problem}: dimensions {dims} need {expected} data bytes, found "
            f"{data_bytes}; replace the file"
        )
    if expected == 0:  # refused before numpy is asked to shape nothing as (0, 2**31, 2**31)
        kind = "image" if magic == _IDX_IMAGES_MAGIC else "label"
        if dims[0] == 0:
            raise UsageError(f"{path} holds no {kind}s (its header says 0); replace the file")
        raise UsageError(f"{path} says its images are {dims[1]}x{dims[2]} pixels; replace the file")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


# ---- generated problems -------------------------------------------------------------------


def _make_synthetic() -> Dataset:
    info = DATASETS["synthetic"]
    generator = torch.Generator().manual_seed(SYNTHETIC_SEED)
    samples = info.train + info.test
    weight = torch.tensor(SYNTHETIC_TRUE_WEIGHT).reshape(1, info.features)
    x = torch.randn(samples, info.features, generator=generator)
    noise = torch.randn(samples, 1, generator=generator)
    y = x @ weight.T + SYNTHETIC_TRUE_BIAS + SYNTHETIC_NOISE * noise
    return _split_generated(info, x, y, "regression")


def _make_blobs() -> Dataset:
    info = DATASETS["blobs"]
    generator = torch.Generator().manual_seed(BLOBS_SEED)
    samples = info.train + info.test
    means = BLOBS_MEAN_SCALE * torch.randn(info.classes, info.features, generator=generator)
    balanced = torch.arange(samples) % info.classes
    y = balanced[torch.randperm(samples, generator=generator)]
    x = means[y] + torch.randn(samples, info.features, generator=generator)
    return _split_generated(info, x, y, "classification")


def _split_generated(info: DatasetInfo, x: torch.Tensor, y: torch.Tensor, task: Task) -> Dataset:
    """A generated problem's samples: the first ``info.train`` to train on, the rest to test."""
    return Dataset(
        name=info.name,
        x_train=x[: info.train].contiguous(),
        y_train=y[: info.train].contiguous(),
        x_test=x[info.train :].contiguous(),
        y_test=y[info.train :].contiguous(),
        task=task,
        num_classes=info.classes,
    )
