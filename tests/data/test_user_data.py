"""A user's own data: arrays, torch datasets and files become checked Datasets."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset as TorchDataset
from torch.utils.data import TensorDataset

from murmur.data import dataset_sha256, from_arrays, from_torch_dataset, partition, save_npz
from murmur.data.partition import covered_classes
from murmur.data.user_files import clear_cache, read_file_data
from murmur.errors import UsageError
from murmur.sections import DataConfig


def _arrays(seed: int = 0, classes: int = 3):
    rng = np.random.default_rng(seed)
    x_train, x_test = rng.normal(size=(30, 2, 3)), rng.normal(size=(12, 2, 3))
    y_train, y_test = np.arange(30) % classes, np.arange(12) % classes
    return x_train, y_train, x_test, y_test


@pytest.fixture(autouse=True)
def no_cached_files():
    clear_cache()
    yield
    clear_cache()


# ---- from_arrays --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_arrays_round_trip_as_float32_rows_and_int64_labels(kind):
    arrays = _arrays()
    given = arrays if kind == "numpy" else tuple(torch.as_tensor(a) for a in arrays)
    dataset = from_arrays(*given)
    assert (dataset.task, dataset.num_classes, dataset.features, dataset.outputs) == (
        "classification",
        3,
        6,
        3,
    )
    assert dataset.x_train.dtype == dataset.x_test.dtype == torch.float32
    assert dataset.y_train.dtype == dataset.y_test.dtype == torch.int64
    assert dataset.x_train.shape == (30, 6) and dataset.x_test.shape == (12, 6)
    np.testing.assert_array_equal(dataset.x_train.numpy(), arrays[0].reshape(30, 6).astype("f4"))
    np.testing.assert_array_equal(dataset.y_test.numpy(), arrays[3])


def test_arrays_are_copied_not_scaled():
    x_train, y_train, x_test, y_test = _arrays()
    x_train = x_train * 1000
    dataset = from_arrays(x_train, y_train, x_test, y_test)
    x_train[0] = 0.0
    assert float(dataset.x_train.abs().max()) > 100  # as given, no preprocessing
    assert float(dataset.x_train[0].abs().sum()) > 0


def test_num_classes_may_exceed_the_labels_seen():
    dataset = from_arrays(*_arrays(), num_classes=5)
    assert dataset.num_classes == dataset.outputs == 5


@pytest.mark.parametrize("shape", [(30,), (30, 2)])
def test_regression_targets_become_float32_columns(shape):
    x_train, _, x_test, _ = _arrays()
    rng = np.random.default_rng(1)
    y_train, y_test = rng.normal(size=shape), rng.normal(size=(12, *shape[1:]))
    dataset = from_arrays(x_train, y_train, x_test, y_test, task="regression")
    width = shape[1] if len(shape) > 1 else 1
    assert dataset.y_train.shape == (30, width) and dataset.y_train.dtype == torch.float32
    assert (dataset.num_classes, dataset.outputs) == (0, width)


def _replace(index: int, value):
    arrays = list(_arrays())
    arrays[index] = value
    return arrays


@pytest.mark.parametrize(
    "arrays, kwargs, message",
    [
        (_replace(0, np.zeros((0, 6))), {}, "x_train holds no samples"),
        (_replace(1, np.arange(29) % 3), {}, "x_train holds 30 samples but y_train holds 29"),
        (_replace(2, np.zeros((12, 5))), {}, "x_train has 6 features per sample but x_test has 5"),
        (_replace(0, np.array([["a"] * 6] * 30)), {}, "x_train holds <U1 values, not numbers"),
        (_replace(2, np.full((12, 6), np.nan)), {}, "x_test[0, 0] is NaN"),
        (_replace(0, np.full((30, 6), np.inf)), {}, "x_train[0, 0] is infinite"),
        (_replace(0, np.full((30, 6), 1e300)), {}, "beyond float32's range"),
        (_replace(1, np.zeros(30, dtype=int)), {}, "y_train holds one class only (0)"),
        (_replace(3, np.full(12, -1)), {}, "y_test[0] is -1, outside the classes 0..2"),
        (_replace(1, np.full(30, 0.5)), {}, "y_train[0] is 0.5, not a class number"),
        (_replace(1, np.zeros((30, 2), dtype=int)), {}, "class labels are one integer per sample"),
        (list(_arrays()), {"num_classes": 2}, "y_train[2] is 2, outside the classes 0..1"),
        (list(_arrays()), {"num_classes": 1}, "num_classes must be an integer of at least 2"),
        (list(_arrays()), {"task": "ranking"}, "task must be 'classification' or 'regression'"),
        (_replace(0, 3.0), {}, "x_train is a single value"),
    ],
)
def test_bad_arrays_are_one_line_naming_the_array(arrays, kwargs, message):
    with pytest.raises(UsageError) as caught:
        from_arrays(*arrays, **kwargs)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


# ---- torch datasets -----------------------------------------------------------------------


class Squares(TorchDataset):
    """A map-style dataset of its own: x = (i, i^2), y = i % 2."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int):
        return torch.tensor([index, index**2], dtype=torch.float64), index % 2


def test_a_tensor_dataset_is_stacked_once():
    x, y = torch.randn(20, 1, 4), torch.arange(20) % 4
    dataset = from_torch_dataset(TensorDataset(x[:16], y[:16]), TensorDataset(x[16:], y[16:]))
    assert dataset.x_train.shape == (16, 4) and dataset.num_classes == 4
    torch.testing.assert_close(dataset.x_test, x[16:].reshape(4, 4))
    assert dataset.y_train.tolist() == y[:16].tolist()


def test_a_custom_dataset_class_is_read_item_by_item():
    dataset = from_torch_dataset(Squares(10), Squares(4))
    assert dataset.x_train.dtype == torch.float32 and dataset.x_train.shape == (10, 2)
    assert dataset.x_train[3].tolist() == [3.0, 9.0]
    assert dataset.y_test.tolist() == [0, 1, 0, 1]


def test_a_torch_dataset_of_other_items_is_refused():
    class Singles(Squares):
        def __getitem__(self, index: int):
            return torch.zeros(2)

    with pytest.raises(UsageError, match="item 0 of the train dataset is a Tensor, not an"):
        from_torch_dataset(Singles(3), Squares(3))
    with pytest.raises(UsageError, match="the test dataset holds no samples"):
        from_torch_dataset(Squares(3), Squares(0))


# ---- npz and hashes -----------------------------------------------------------------------


def test_save_npz_is_read_back_as_a_file_dataset(tmp_path):
    dataset = from_arrays(*_arrays())
    path = save_npz(dataset, tmp_path / "mine")
    assert path.name == "mine.npz"
    loaded = read_file_data(DataConfig(dataset="file", path=str(path)))
    for key in ("x_train", "y_train", "x_test", "y_test"):
        assert torch.equal(getattr(loaded.dataset, key), getattr(dataset, key))
    assert dataset_sha256(loaded.dataset) == dataset_sha256(dataset)
    assert len(loaded.sha256) == 64


def test_the_sha256_of_arrays_changes_with_any_value_shape_or_dtype():
    dataset = from_arrays(*_arrays())
    digest = dataset_sha256(dataset)
    assert digest == dataset_sha256(from_arrays(*_arrays()))
    changed = dataset.x_train.clone()
    changed[0, 0] += 1
    assert dataset_sha256(dataclasses.replace(dataset, x_train=changed)) != digest
    assert dataset_sha256(dataclasses.replace(dataset, y_test=dataset.y_test.int())) != digest
    reshaped = dataset.x_train.reshape(60, 3)
    assert dataset_sha256(dataclasses.replace(dataset, x_train=reshaped)) != digest


def test_the_sha256_of_arrays_with_writers_covers_the_writers():
    dataset = from_arrays(*_arrays())
    rows = dataset.x_train.shape[0]
    one = dataclasses.replace(dataset, groups=torch.arange(rows) % 3)
    other = dataclasses.replace(dataset, groups=torch.arange(rows) % 4)
    digests = {dataset_sha256(one), dataset_sha256(other), dataset_sha256(dataset)}
    assert len(digests) == 3
    assert dataset_sha256(dataclasses.replace(one, groups=None)) == dataset_sha256(dataset)


def test_a_file_is_parsed_once_per_path_and_hash(tmp_path, monkeypatch):
    import murmur.data.user_files as user_files

    path = tmp_path / "a.csv"
    path.write_text("f,label\n1,0\n2,1\n3,0\n4,1\n5,0\n")
    parsed = []
    parse = user_files._parse

    def counted(*args):
        parsed.append(1)
        return parse(*args)

    monkeypatch.setattr(user_files, "_parse", counted)
    config = DataConfig(dataset="file", path=str(path))
    first = read_file_data(config)
    again = read_file_data(dataclasses.replace(config, sha256=first.sha256))
    assert again.dataset is first.dataset and parsed == [1]
    path.write_text("f,label\n1,0\n2,1\n3,0\n4,1\n6,0\n")
    with pytest.raises(UsageError, match="changed since the run: sha256 .* expected"):
        read_file_data(dataclasses.replace(config, sha256=first.sha256))
    assert read_file_data(config).sha256 != first.sha256 and parsed == [1, 1]


def test_a_csv_with_a_test_file_hashes_both_files_in_order(tmp_path):
    import hashlib

    train, test = tmp_path / "train.csv", tmp_path / "test.csv"
    train.write_text("label,a,b\n0,1,2\n1,3,4\n0,5,6\n")
    test.write_text("label,a,b\n1,7,8\n")
    loaded = read_file_data(DataConfig(dataset="file", path=str(train), test_path=str(test)))
    assert loaded.sha256 == hashlib.sha256(train.read_bytes() + test.read_bytes()).hexdigest()
    assert loaded.dataset.x_test.tolist() == [[7.0, 8.0]]
    assert loaded.dataset.y_train.tolist() == [0, 1, 0]


def test_a_csv_split_holds_out_the_same_rows_and_standardizes_on_request(tmp_path):
    path = tmp_path / "d.csv"
    rows = "\n".join(f"{i},{10 * i},{i % 3}" for i in range(50))
    path.write_text(f"a,b,label\n{rows}\n")
    config = DataConfig(dataset="file", path=str(path), test_fraction=0.3)
    plain = read_file_data(config).dataset
    assert (plain.x_train.shape[0], plain.x_test.shape[0]) == (35, 15)
    assert plain.num_classes == 3
    scaled = read_file_data(dataclasses.replace(config, standardize=True)).dataset
    assert scaled.x_train.mean(0).abs().max() < 1e-5
    assert torch.allclose(scaled.x_train.std(0, correction=0), torch.ones(2), atol=1e-5)
    assert torch.equal(plain.y_test, scaled.y_test)


def test_a_regression_csv_has_one_target_column(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("x,y\n" + "\n".join(f"{i},{0.5 * i + 0.25}" for i in range(10)) + "\n")
    dataset = read_file_data(
        DataConfig(dataset="file", path=str(path), label_column="y", task="regression")
    ).dataset
    assert dataset.task == "regression" and dataset.y_train.shape == (8, 1)


# ---- the classes a labels split covers ----------------------------------------------------


@pytest.mark.parametrize("agents, per_agent", [(4, 1), (3, 2), (2, 3)])
def test_covered_classes_are_the_ones_the_labels_partition_gives_out(agents, per_agent):
    labels = torch.arange(200) % 10
    parts = partition(labels, agents, "labels", labels_per_agent=per_agent, seed=11)
    held = sorted({int(c) for part in parts for c in labels[part].unique()})
    assert covered_classes(agents, per_agent, 10, seed=11) == held
    assert len(held) == agents * per_agent
