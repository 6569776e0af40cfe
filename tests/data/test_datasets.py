import gzip
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

import murmur.data.datasets as datasets_module
from murmur.data import DATASETS, Dataset, load_dataset, synthetic_optimum
from murmur.data.datasets import (
    IDX_FILES,
    SYNTHETIC_TRUE_BIAS,
    SYNTHETIC_TRUE_WEIGHT,
)
from murmur.errors import UsageError

BUNDLED = ["mnist5k", "digits", "vowel", "satimage", "letter"]
TABULAR = ["vowel", "satimage", "letter"]

# name: (train, test, features, classes); digits only fixes the total (1797).
BUNDLED_SHAPES = {
    "mnist5k": (4000, 1000, 784, 10),
    "digits": (None, None, 64, 10),
    "vowel": (528, 462, 10, 11),
    "satimage": (4435, 2000, 36, 6),
    "letter": (16000, 4000, 16, 26),
}


# ---- catalogue ----------------------------------------------------------------------------


def test_catalogue_names_every_dataset_with_its_source():
    assert list(DATASETS) == [
        "mnist5k",
        "digits",
        "vowel",
        "satimage",
        "letter",
        "mnist",
        "fashion-mnist",
        "cifar10",
        "cifar100",
        "femnist",
        "shakespeare",
        "synthetic",
        "blobs",
    ]
    sources = {name: info.source for name, info in DATASETS.items()}
    assert {name for name, source in sources.items() if source == "bundled"} == set(BUNDLED)
    on_disk = ["mnist", "fashion-mnist", "cifar10", "cifar100", "femnist", "shakespeare"]
    assert {name for name, source in sources.items() if source == "on disk"} == set(on_disk)
    assert {name for name, info in DATASETS.items() if info.writers} == {"femnist", "shakespeare"}
    assert sources["synthetic"] == sources["blobs"] == "generated"
    for name, info in DATASETS.items():
        assert info.name == name
        assert info.description and "\n" not in info.description


def test_unknown_name_lists_the_valid_ones():
    with pytest.raises(UsageError, match="data.dataset='imagenet'") as caught:
        load_dataset("imagenet")
    for name in DATASETS:
        assert name in str(caught.value)


# ---- bundled sets -------------------------------------------------------------------------


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_dataset_loads_with_documented_shape(name):
    dataset = load_dataset(name)
    train, test, features, classes = BUNDLED_SHAPES[name]
    info = DATASETS[name]
    if train is None:
        assert dataset.x_train.shape[0] + dataset.x_test.shape[0] == 1797
    else:
        assert (dataset.x_train.shape[0], dataset.x_test.shape[0]) == (train, test)
    assert (info.train, info.test) == (dataset.x_train.shape[0], dataset.x_test.shape[0])
    assert (dataset.features, dataset.num_classes, dataset.outputs) == (features, classes, classes)
    assert (info.features, info.classes) == (features, classes)
    assert dataset.task == "classification"
    assert dataset.x_train.dtype == dataset.x_test.dtype == torch.float32
    assert dataset.y_train.dtype == dataset.y_test.dtype == torch.int64
    assert dataset.y_train.shape == (dataset.x_train.shape[0],)
    assert dataset.y_test.shape == (dataset.x_test.shape[0],)
    # every class appears in the training split, and no label is out of range
    assert torch.equal(dataset.y_train.unique(), torch.arange(classes))
    assert 0 <= int(dataset.y_test.min()) and int(dataset.y_test.max()) < classes


@pytest.mark.parametrize("name", ["mnist5k", "digits"])
def test_bundled_pixels_scaled_to_unit_interval(name):
    dataset = load_dataset(name)
    for x in (dataset.x_train, dataset.x_test):
        assert float(x.min()) == 0.0
        assert float(x.max()) == 1.0  # the brightest raw value is the scale itself


@pytest.mark.parametrize("name", TABULAR)
def test_bundled_tabular_columns_standardized_on_train(name):
    dataset = load_dataset(name)
    mean = dataset.x_train.double().mean(dim=0)
    std = dataset.x_train.double().std(dim=0, correction=0)
    assert torch.allclose(mean, torch.zeros_like(mean), atol=1e-5)
    assert torch.allclose(std, torch.ones_like(std), atol=1e-4)
    # the test split is transformed with the train statistics, so it is not exactly standard
    assert not torch.allclose(
        dataset.x_test.double().mean(dim=0), torch.zeros_like(mean), atol=1e-5
    )


def _fake_bundle(tmp_path: Path, monkeypatch, name: str, x_train, x_test) -> None:
    path = tmp_path / f"{name}.npz"
    np.savez_compressed(
        path,
        x_train=x_train,
        y_train=np.arange(len(x_train), dtype=np.int64) % 2,
        x_test=x_test,
        y_test=np.arange(len(x_test), dtype=np.int64) % 2,
    )
    monkeypatch.setattr(datasets_module, "_bundled_file", lambda _: path)


def test_tabular_scaling_uses_train_statistics_and_keeps_constant_columns(tmp_path, monkeypatch):
    features = DATASETS["vowel"].features
    x_train = np.zeros((4, features), dtype=np.float32)
    x_train[:, 0] = [1.0, 3.0, 5.0, 7.0]  # mean 4, population std sqrt(5)
    x_train[:, 1] = 2.5  # constant: std 0 is replaced by 1
    x_test = np.zeros((2, features), dtype=np.float32)
    x_test[:, 0] = [4.0, 9.0]
    x_test[:, 1] = [2.5, 3.5]
    _fake_bundle(tmp_path, monkeypatch, "vowel", x_train, x_test)
    dataset = load_dataset("vowel")
    root5 = 5.0**0.5
    expected_train = torch.tensor([-3.0, -1.0, 1.0, 3.0]) / root5
    assert torch.allclose(dataset.x_train[:, 0], expected_train)
    assert torch.equal(dataset.x_train[:, 1], torch.zeros(4))
    assert torch.allclose(dataset.x_test[:, 0], torch.tensor([0.0, 5.0 / root5]))
    assert torch.allclose(dataset.x_test[:, 1], torch.tensor([0.0, 1.0]))


def test_pixel_scaling_divides_by_the_format_maximum(tmp_path, monkeypatch):
    x_train = np.array([[0] * 63 + [8], [16] * 64], dtype=np.uint8)
    _fake_bundle(tmp_path, monkeypatch, "digits", x_train, x_train[:1])
    dataset = load_dataset("digits")
    assert float(dataset.x_train[0, -1]) == 0.5
    assert torch.equal(dataset.x_train[1], torch.ones(64))


def test_bundled_file_with_wrong_width_is_reported(tmp_path, monkeypatch):
    x = np.zeros((3, 5), dtype=np.float32)
    _fake_bundle(tmp_path, monkeypatch, "letter", x, x)
    with pytest.raises(UsageError, match=r"letter.*expected \(n, 16\)"):
        load_dataset("letter")


def test_missing_bundled_file_is_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets_module, "_bundled_file", lambda _: tmp_path / "none.npz")
    with pytest.raises(UsageError, match="missing.*reinstall"):
        load_dataset("satimage")


# ---- generated sets -----------------------------------------------------------------------


def test_synthetic_is_a_fixed_regression_problem():
    first, second = load_dataset("synthetic"), load_dataset("synthetic")
    assert first.task == "regression" and first.num_classes == 0
    assert first.x_train.shape == (2000, 10) and first.x_test.shape == (500, 10)
    assert first.y_train.shape == (2000, 1) and first.y_test.shape == (500, 1)
    assert first.y_train.dtype == torch.float32
    assert (first.features, first.outputs) == (10, 1)
    for a, b in ((first.x_train, second.x_train), (first.y_test, second.y_test)):
        assert torch.equal(a, b)
    # the targets follow the documented truth up to the 0.1 noise
    truth = torch.tensor(SYNTHETIC_TRUE_WEIGHT)
    residual = first.y_train[:, 0] - first.x_train @ truth - SYNTHETIC_TRUE_BIAS
    assert 0.08 < float(residual.std()) < 0.12


def _train_mse(
    dataset: Dataset, weight: torch.Tensor, bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Train MSE of an nn.Linear with these parameters, and its gradients."""
    layer = torch.nn.Linear(dataset.features, dataset.outputs)
    with torch.no_grad():
        layer.weight.copy_(weight)
        layer.bias.copy_(bias)
    loss = torch.nn.functional.mse_loss(layer(dataset.x_train), dataset.y_train)
    loss.backward()
    return loss.detach(), layer.weight.grad, layer.bias.grad


def test_synthetic_optimum_has_zero_gradient_and_beats_the_truth():
    dataset = load_dataset("synthetic")
    weight, bias = synthetic_optimum(dataset)
    assert weight.shape == (1, 10) and bias.shape == (1,)
    loss, weight_grad, bias_grad = _train_mse(dataset, weight, bias)
    assert float(weight_grad.abs().max()) < 1e-4
    assert float(bias_grad.abs().max()) < 1e-4
    truth_loss, truth_grad, _ = _train_mse(
        dataset, torch.tensor([SYNTHETIC_TRUE_WEIGHT]), torch.tensor([SYNTHETIC_TRUE_BIAS])
    )
    assert float(loss) < float(truth_loss)
    assert float(truth_grad.abs().max()) > 10 * float(weight_grad.abs().max())
    # nudging the optimum in any coordinate makes the train loss worse
    for coordinate in range(10):
        nudged = weight.clone()
        nudged[0, coordinate] += 0.01
        assert float(_train_mse(dataset, nudged, bias)[0]) > float(loss)


def test_synthetic_optimum_refuses_classification():
    with pytest.raises(ValueError, match="regression"):
        synthetic_optimum(load_dataset("blobs"))


def test_blobs_is_a_fixed_separable_classification_problem():
    dataset = load_dataset("blobs")
    assert dataset.x_train.shape == (2000, 8) and dataset.x_test.shape == (500, 8)
    assert (dataset.num_classes, dataset.outputs, dataset.task) == (4, 4, "classification")
    assert dataset.y_train.dtype == torch.int64
    counts = torch.bincount(dataset.y_train, minlength=4)
    assert int(counts.min()) > 450
    assert torch.equal(dataset.x_test, load_dataset("blobs").x_test)
    # a nearest-class-mean classifier fitted on train is almost perfect on test
    means = torch.stack([dataset.x_train[dataset.y_train == c].mean(0) for c in range(4)])
    predicted = torch.cdist(dataset.x_test, means).argmin(dim=1)
    assert float((predicted == dataset.y_test).float().mean()) > 0.97


# ---- IDX files on disk --------------------------------------------------------------------


def _idx_bytes(array: np.ndarray) -> bytes:
    magic = 0x00000800 | array.ndim
    header = struct.pack(">I", magic) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(np.uint8).tobytes()


def _write(path: Path, payload: bytes) -> None:
    if path.suffix == ".gz":
        with gzip.open(path, "wb") as handle:
            handle.write(payload)
    else:
        path.write_bytes(payload)


def _mnist_dir(tmp_path: Path, train=5, test=3, compress=("train",)) -> dict[str, np.ndarray]:
    """Write tiny 4x3-pixel IDX files; the splits named in ``compress`` are gzipped."""
    rng = np.random.default_rng(0)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (train, 4, 3), dtype=np.uint8),
        "train-labels-idx1-ubyte": rng.integers(0, 10, train, dtype=np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (test, 4, 3), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, test, dtype=np.uint8),
    }
    arrays["train-images-idx3-ubyte"][0, 0, 0] = 255
    for base, array in arrays.items():
        suffix = ".gz" if base.split("-")[0] in compress else ""
        _write(tmp_path / f"{base}{suffix}", _idx_bytes(array))
    return arrays


@pytest.mark.parametrize("compress", [(), ("train",), ("train", "t10k")])
@pytest.mark.parametrize("name", ["mnist", "fashion-mnist"])
def test_idx_round_trip(tmp_path, name, compress):
    arrays = _mnist_dir(tmp_path, compress=compress)
    dataset = load_dataset(name, root=str(tmp_path))
    assert dataset.name == name and dataset.num_classes == 10
    assert dataset.x_train.shape == (5, 12) and dataset.x_test.shape == (3, 12)
    assert dataset.x_train.dtype == torch.float32 and dataset.y_train.dtype == torch.int64
    expected = torch.from_numpy(arrays["train-images-idx3-ubyte"].reshape(5, 12) / 255.0)
    assert torch.allclose(dataset.x_train, expected.float())
    assert float(dataset.x_train.max()) == 1.0
    assert dataset.y_train.tolist() == arrays["train-labels-idx1-ubyte"].tolist()
    assert dataset.y_test.tolist() == arrays["t10k-labels-idx1-ubyte"].tolist()


def test_mnist_needs_a_root():
    with pytest.raises(UsageError, match="data.root") as caught:
        load_dataset("mnist")
    for base in IDX_FILES:
        assert base in str(caught.value)
    with pytest.raises(UsageError, match="data.root"):
        load_dataset("mnist", root="")


def test_fashion_mnist_default_root_missing_says_how_to_install(tmp_path, monkeypatch):
    absent = tmp_path / "fashion-mnist"
    monkeypatch.setattr(datasets_module, "FASHION_MNIST_ROOT", absent)
    with pytest.raises(UsageError, match="apt-get install dataset-fashion-mnist") as caught:
        load_dataset("fashion-mnist")
    assert str(absent) in str(caught.value) and "data.root=DIR" in str(caught.value)


def test_fashion_mnist_reads_the_default_root(tmp_path, monkeypatch):
    _mnist_dir(tmp_path)
    monkeypatch.setattr(datasets_module, "FASHION_MNIST_ROOT", tmp_path)
    assert load_dataset("fashion-mnist").x_train.shape == (5, 12)


def test_missing_idx_file_is_named_with_the_directory(tmp_path):
    _mnist_dir(tmp_path, compress=())
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(UsageError) as caught:
        load_dataset("mnist", root=tmp_path)
    message = str(caught.value)
    assert f"{tmp_path} lacks t10k-labels-idx1-ubyte (plain or .gz)" in message
    assert "data.root=DIR" in message and "\n" not in message


def test_missing_directory_is_named(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        load_dataset("mnist", root=tmp_path / "nowhere")


def _corrupt(tmp_path: Path, base: str, payload: bytes) -> Path:
    _mnist_dir(tmp_path, compress=())
    path = tmp_path / base
    path.write_bytes(payload)
    return path


def test_bad_magic_is_reported_with_the_file(tmp_path):
    labels = _idx_bytes(np.arange(5, dtype=np.uint8))
    path = _corrupt(tmp_path, "train-images-idx3-ubyte", labels)  # a label file in its place
    with pytest.raises(UsageError, match="magic number 0x00000801, expected 0x00000803") as caught:
        load_dataset("mnist", root=tmp_path)
    assert str(path) in str(caught.value)


def test_truncated_file_is_reported(tmp_path):
    images = _idx_bytes(np.zeros((5, 4, 3), dtype=np.uint8))
    path = _corrupt(tmp_path, "train-images-idx3-ubyte", images[:-7])
    with pytest.raises(UsageError, match="truncated: dimensions .* need 60 data bytes, found 53"):
        load_dataset("mnist", root=tmp_path)
    _corrupt(tmp_path, "train-images-idx3-ubyte", images[:10])
    with pytest.raises(UsageError, match=f"{path} is truncated inside its header"):
        load_dataset("mnist", root=tmp_path)


def test_file_longer_than_its_header_is_reported(tmp_path):
    images = _idx_bytes(np.zeros((5, 4, 3), dtype=np.uint8))
    _corrupt(tmp_path, "train-images-idx3-ubyte", images + b"\x00" * 12)
    with pytest.raises(UsageError, match="longer than its header says"):
        load_dataset("mnist", root=tmp_path)


def test_count_mismatch_names_both_files(tmp_path):
    _corrupt(tmp_path, "t10k-labels-idx1-ubyte", _idx_bytes(np.zeros(4, dtype=np.uint8)))
    with pytest.raises(UsageError, match="holds 3 images but .*t10k-labels-idx1-ubyte holds 4"):
        load_dataset("mnist", root=tmp_path)


def test_unreadable_gzip_is_reported(tmp_path):
    _mnist_dir(tmp_path, compress=("train",))
    path = tmp_path / "train-labels-idx1-ubyte.gz"
    path.write_bytes(b"this is not gzip data")
    with pytest.raises(UsageError, match="unreadable") as caught:
        load_dataset("mnist", root=tmp_path)
    assert str(path) in str(caught.value)


def test_label_out_of_range_is_reported(tmp_path):
    _corrupt(tmp_path, "t10k-labels-idx1-ubyte", _idx_bytes(np.array([1, 2, 12], np.uint8)))
    with pytest.raises(UsageError, match="label 12 is outside 0..9"):
        load_dataset("mnist", root=tmp_path)


def _header(magic: int, *dims: int) -> bytes:
    return struct.pack(f">I{len(dims)}I", magic, *dims)


def test_images_file_without_images_is_reported(tmp_path):
    path = _corrupt(tmp_path, "train-images-idx3-ubyte", _header(0x803, 0, 4, 3))
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(_header(0x801, 0))
    with pytest.raises(UsageError, match="holds no images") as caught:
        load_dataset("mnist", root=tmp_path)
    assert str(path) in str(caught.value)


def test_no_images_of_a_huge_size_are_reported_before_numpy_shapes_them(tmp_path):
    _corrupt(tmp_path, "train-images-idx3-ubyte", _header(0x803, 0, 2**31, 2**31))
    with pytest.raises(UsageError, match="holds no images"):
        load_dataset("mnist", root=tmp_path)


def test_labels_file_without_labels_is_reported(tmp_path):
    path = _corrupt(tmp_path, "t10k-labels-idx1-ubyte", _header(0x801, 0))
    with pytest.raises(UsageError, match=f"{path} holds no labels"):
        load_dataset("mnist", root=tmp_path)


@pytest.mark.parametrize("dims", [(5, 0, 3), (5, 4, 0)])
def test_images_without_pixels_are_reported(tmp_path, dims):
    _corrupt(tmp_path, "train-images-idx3-ubyte", _header(0x803, *dims))
    with pytest.raises(UsageError, match=f"its images are {dims[1]}x{dims[2]} pixels"):
        load_dataset("mnist", root=tmp_path)


def test_header_dimensions_whose_product_wraps_around_in_int64_are_truncated(tmp_path):
    # 2**31 * 2**31 * 4 = 2**64, which is 0 in int64: the file would seem complete.
    _corrupt(tmp_path, "train-images-idx3-ubyte", _header(0x803, 2**31, 2**31, 4))
    with pytest.raises(UsageError, match=f"truncated: .* need {2**64} data bytes, found 0"):
        load_dataset("mnist", root=tmp_path)


def test_huge_header_dimensions_are_reported(tmp_path):
    largest = 2**32 - 1
    images = _header(0x803, largest, largest, largest) + bytes(60)
    _corrupt(tmp_path, "train-images-idx3-ubyte", images)
    with pytest.raises(UsageError, match=f"need {largest**3} data bytes, found 60"):
        load_dataset("mnist", root=tmp_path)


def test_train_and_test_images_of_different_sizes_name_both_files(tmp_path):
    images = _idx_bytes(np.zeros((3, 5, 3), dtype=np.uint8))
    test_path = _corrupt(tmp_path, "t10k-images-idx3-ubyte", images)
    with pytest.raises(UsageError) as caught:
        load_dataset("mnist", root=tmp_path)
    message = str(caught.value)
    assert f"{tmp_path / 'train-images-idx3-ubyte'} holds images of 4x3 pixels" in message
    assert f"{test_path} holds images of 5x3" in message


@pytest.mark.parametrize("payload", [bytes(range(256)) * 3, b"", b"\x00\x00"])
def test_random_bytes_are_not_an_idx_file(tmp_path, payload):
    path = _corrupt(tmp_path, "train-labels-idx1-ubyte", payload)
    with pytest.raises(UsageError, match=f"{path} is not an IDX label file"):
        load_dataset("mnist", root=tmp_path)


def test_truncated_gzip_is_reported(tmp_path):
    _mnist_dir(tmp_path, compress=("train",))
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(UsageError, match=f"{path} is unreadable"):
        load_dataset("mnist", root=tmp_path)


def test_root_with_an_unknown_user_is_reported():
    with pytest.raises(UsageError, match="data.root='~no-such-user-here/mnist': cannot find"):
        load_dataset("mnist", root="~no-such-user-here/mnist")


def test_directory_that_cannot_be_searched_is_reported(tmp_path, monkeypatch):
    _mnist_dir(tmp_path)

    def refuse(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(Path, "is_file", refuse)
    with pytest.raises(UsageError, match="cannot look for .*Permission denied.*make .* readable"):
        load_dataset("mnist", root=tmp_path)
