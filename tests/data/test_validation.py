"""The validation split: held out of the training rows by class, from a seed of its own,
or read from a file of the training data's kind."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from murmur.data import from_arrays, load_dataset, save_npz
from murmur.data.user_files import clear_cache, read_file_data
from murmur.data.validation import hold_out, validation_rows, validation_size
from murmur.errors import UsageError
from murmur.sections import DataConfig


def unique_rows(train: int = 200, test: int = 50, classes: int = 4) -> object:
    """A dataset whose every row, train and test, is different (feature = row number)."""
    x = torch.arange(train + test, dtype=torch.float32).view(-1, 1).repeat(1, 3)
    y = torch.arange(train + test) % classes
    return from_arrays(x[:train], y[:train], x[train:], y[train:])


def test_the_size_is_the_rounded_share_with_one_held_out_and_one_left():
    assert validation_size(1000, 0.0) == 0
    assert validation_size(1000, 0.1) == 100
    assert validation_size(1000, 0.0001) == 1
    assert validation_size(10, 0.99) == 9
    with pytest.raises(UsageError, match="data.validation = 0.5 .* at least 2"):
        validation_size(1, 0.5)


def test_rows_are_drawn_by_class_in_proportion_to_each_class():
    labels = torch.tensor([0] * 600 + [1] * 300 + [2] * 100)
    held = validation_rows(labels, 1000, 0.1, seed=0)
    assert held.numel() == 100 and held.unique().numel() == 100
    assert torch.equal(held, held.sort().values)
    assert torch.bincount(labels[held], minlength=3).tolist() == [60, 30, 10]


def test_the_rows_left_over_go_to_the_largest_remainders_and_keep_every_class():
    labels = torch.tensor([0] * 7 + [1] * 2 + [2] * 11)
    held = validation_rows(labels, 20, 0.5, seed=4)
    counts = torch.bincount(labels[held], minlength=3).tolist()
    assert sum(counts) == 10
    left = torch.bincount(labels, minlength=3) - torch.tensor(counts)
    assert (left >= 1).all(), "every class keeps a training row"
    assert all(count >= 1 for count in counts), "every class is in the validation split"


def test_the_rows_depend_on_the_seed_only():
    labels = torch.arange(500) % 10
    first = validation_rows(labels, 500, 0.2, seed=0)
    assert torch.equal(first, validation_rows(labels, 500, 0.2, seed=0))
    assert not torch.equal(first, validation_rows(labels, 500, 0.2, seed=1))


def test_a_regression_set_draws_from_all_rows():
    held = validation_rows(None, 50, 0.2, seed=0)
    assert held.numel() == 10 and held.unique().numel() == 10 and held.max() < 50


def test_hold_out_moves_rows_from_training_and_keeps_the_test_set():
    dataset = unique_rows()
    split = hold_out(dataset, 0.25, seed=0)
    assert split.x_validation is not None and split.y_validation is not None
    assert split.x_validation.shape[0] == 50 and split.x_train.shape[0] == 150
    assert split.x_test is dataset.x_test and split.y_test is dataset.y_test
    train, held, test = (
        set(x[:, 0].tolist()) for x in (split.x_train, split.x_validation, split.x_test)
    )
    assert not train & held and not held & test and not train & test
    assert train | held == set(dataset.x_train[:, 0].tolist())
    assert torch.equal(split.y_validation, split.x_validation[:, 0].long() % 4)
    assert split.x_train[:, 0].tolist() == sorted(train), "training rows keep their order"


def test_hold_out_keeps_the_writers_of_the_training_rows_left():
    dataset = unique_rows()
    writers = dataset.x_train[:, 0].long() // 10  # row r was written by writer r // 10
    split = hold_out(dataclasses.replace(dataset, groups=writers), 0.25, seed=0)
    assert split.groups is not None and split.groups.shape == (150,)
    assert torch.equal(split.groups, split.x_train[:, 0].long() // 10)
    assert hold_out(dataset, 0.25, seed=0).groups is None


def test_a_dataset_refuses_writers_that_are_not_one_per_training_row():
    dataset = unique_rows()
    with pytest.raises(ValueError, match=r"groups must be int64 of shape \(200,\)"):
        dataclasses.replace(dataset, groups=torch.zeros(199, dtype=torch.int64))
    with pytest.raises(ValueError, match="not torch.float32"):
        dataclasses.replace(dataset, groups=torch.zeros(200))


def test_no_share_leaves_the_dataset_itself():
    dataset = load_dataset("blobs")
    assert hold_out(dataset, 0.0, seed=0) is dataset
    assert dataset.validation is None


def test_a_class_that_would_give_every_row_is_refused():
    labels = torch.tensor([0] * 10 + [1, 2, 3, 4, 5, 6, 7, 8, 9])
    with pytest.raises(UsageError, match="all 1 training rows of class"):
        validation_rows(labels, 19, 0.9, seed=0)


@pytest.mark.parametrize("value", [-0.1, 1.0, 1.5, float("nan"), float("inf")])
def test_a_share_outside_zero_to_one_is_refused_naming_the_key(value):
    with pytest.raises(UsageError, match="data.validation must be from 0"):
        DataConfig(validation=value)


def test_a_share_and_a_file_together_are_refused():
    with pytest.raises(UsageError, match="data.validation and data.validation_path both"):
        DataConfig(dataset="file", path="a.csv", validation=0.1, validation_path="v.csv")
    with pytest.raises(UsageError, match="data.validation_seed must be >= 0"):
        DataConfig(validation_seed=-1)


# ---- a validation file ----------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_cache()
    yield
    clear_cache()


def write_csv(path, rows):
    path.write_text("a,b,label\n" + "".join(f"{a},{b},{label}\n" for a, b, label in rows))
    return path


def test_a_csv_validation_file_is_the_validation_split(tmp_path):
    train = write_csv(tmp_path / "train.csv", [(i, -i, i % 2) for i in range(20)])
    held = write_csv(tmp_path / "held.csv", [(100, 1, 1), (101, 2, 0)])
    data = DataConfig(dataset="file", path=str(train), validation_path=str(held))
    loaded = read_file_data(data)
    assert loaded.dataset.x_validation.tolist() == [[100.0, 1.0], [101.0, 2.0]]
    assert loaded.dataset.y_validation.tolist() == [1, 0]
    assert loaded.dataset.x_train.shape[0] + loaded.dataset.x_test.shape[0] == 20
    alone = read_file_data(DataConfig(dataset="file", path=str(train)))
    assert alone.dataset.validation is None and alone.sha256 != loaded.sha256
    assert loaded.paths[-1] == held


def test_a_standardized_file_scales_the_validation_split_with_the_training_statistics(tmp_path):
    train = write_csv(tmp_path / "train.csv", [(i, 2 * i, i % 2) for i in range(20)])
    held = write_csv(tmp_path / "held.csv", [(3, 6, 1)])
    data = DataConfig(dataset="file", path=str(train), validation_path=str(held), standardize=True)
    dataset = read_file_data(data).dataset
    raw = read_file_data(dataclasses.replace(data, standardize=False)).dataset
    mean = raw.x_train.double().mean(dim=0)
    std = raw.x_train.double().std(dim=0, correction=0)
    expected = ((torch.tensor([[3.0, 6.0]]).double() - mean) / std).float()
    torch.testing.assert_close(dataset.x_validation, expected)


def test_an_npz_validation_file_holds_x_and_y_validation(tmp_path):
    dataset = unique_rows(train=40, test=10)
    path = save_npz(dataset, tmp_path / "data.npz")
    held = tmp_path / "held.npz"
    np.savez(held, x_validation=np.ones((3, 3)), y_validation=np.array([0, 3, 1]))
    loaded = read_file_data(DataConfig(dataset="file", path=str(path), validation_path=str(held)))
    assert loaded.dataset.x_validation.shape == (3, 3)
    assert loaded.dataset.y_validation.tolist() == [0, 3, 1]


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"x": np.ones((3, 3)), "y": np.zeros(3)}, "lacks x_validation, y_validation"),
        ({"x_validation": np.ones((3, 2)), "y_validation": np.zeros(3)}, "2 features per"),
        ({"x_validation": np.ones((3, 3)), "y_validation": np.zeros(2)}, "holds 3 samples"),
        ({"x_validation": np.ones((2, 3)), "y_validation": np.array([0, 7])}, "outside the"),
    ],
)
def test_a_bad_npz_validation_file_is_one_line_naming_it(tmp_path, arrays, message):
    path = save_npz(unique_rows(train=40, test=10), tmp_path / "data.npz")
    held = tmp_path / "held.npz"
    np.savez(held, **arrays)
    with pytest.raises(UsageError, match=message) as error:
        read_file_data(DataConfig(dataset="file", path=str(path), validation_path=str(held)))
    assert "\n" not in str(error.value) and "held.npz" in str(error.value)


def test_a_validation_file_of_other_columns_or_kind_is_refused(tmp_path):
    train = write_csv(tmp_path / "train.csv", [(i, -i, i % 2) for i in range(20)])
    other = tmp_path / "other.csv"
    other.write_text("a,c,label\n1,2,0\n")
    with pytest.raises(UsageError, match="has the columns a, c, label but data.path has"):
        read_file_data(DataConfig(dataset="file", path=str(train), validation_path=str(other)))
    with pytest.raises(UsageError, match="is not a .csv file like data.path"):
        read_file_data(
            DataConfig(dataset="file", path=str(train), validation_path=str(tmp_path / "v.npz"))
        )
