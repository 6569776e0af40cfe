"""CIFAR-10 and CIFAR-100 from tiny files in the official "python version" format:
pickled dicts of b"data" (uint8, (n, 3072), channel first) and the labels."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from murmur.cli import main
from murmur.data import DATASETS, load_dataset
from murmur.data.cifar import CIFAR_URL
from murmur.errors import UsageError

TRAIN_FILES = [f"data_batch_{number}" for number in range(1, 6)]
PER_BATCH = 3


def _batch(rng: np.random.Generator, rows: int, labels: dict[str, list[int]]) -> dict:
    images = rng.integers(0, 256, (rows, 3072), dtype=np.uint8)
    return {b"batch_label": b"a batch", b"data": images, b"filenames": [b"x.png"] * rows} | {
        key.encode(): values for key, values in labels.items()
    }


def _dump(path: Path, payload: object, protocol: int = 2) -> None:
    path.write_bytes(pickle.dumps(payload, protocol=protocol))


def write_cifar10(root: Path, protocol: int = 2) -> tuple[Path, list[dict]]:
    """cifar-10-batches-py under ``root``: five training batches and a test batch of
    PER_BATCH images each; the batches, training first, in file order."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    batches = []
    for index, name in enumerate([*TRAIN_FILES, "test_batch"]):
        labels = [(index * PER_BATCH + row) % 10 for row in range(PER_BATCH)]
        batch = _batch(rng, PER_BATCH, {"labels": labels})
        _dump(folder / name, batch, protocol)
        batches.append(batch)
    _dump(folder / "batches.meta", {b"label_names": [b"airplane"] * 10}, protocol)
    return folder, batches


def write_cifar100(root: Path) -> tuple[Path, dict, dict]:
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(1)
    train = _batch(rng, 6, {"fine_labels": [0, 99, 42, 7, 63, 1], "coarse_labels": [19] * 6})
    test = _batch(rng, 2, {"fine_labels": [98, 3], "coarse_labels": [0, 1]})
    _dump(folder / "train", train)
    _dump(folder / "test", test)
    _dump(folder / "meta", {b"fine_label_names": [], b"coarse_label_names": []})
    return folder, train, test


# ---- reading ------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", [2, 4, 5])
@pytest.mark.parametrize("point_at", ["parent", "folder"])
def test_cifar10_round_trip(tmp_path, protocol, point_at):
    folder, batches = write_cifar10(tmp_path, protocol)
    dataset = load_dataset("cifar10", root=str(tmp_path if point_at == "parent" else folder))
    train_images = np.concatenate([batch[b"data"] for batch in batches[:5]])
    assert dataset.x_train.shape == (5 * PER_BATCH, 3072)
    assert dataset.x_test.shape == (PER_BATCH, 3072)
    assert dataset.x_train.dtype == torch.float32 and dataset.y_train.dtype == torch.int64
    assert torch.equal(dataset.x_train, torch.from_numpy(train_images.astype(np.float32) / 255))
    assert torch.equal(
        dataset.x_test, torch.from_numpy(batches[5][b"data"].astype(np.float32) / 255)
    )
    assert dataset.y_train.tolist() == [row % 10 for row in range(5 * PER_BATCH)]
    assert dataset.y_test.tolist() == [(15 + row) % 10 for row in range(PER_BATCH)]
    assert (dataset.num_classes, dataset.task, dataset.groups) == (10, "classification", None)
    assert dataset.name == "cifar10"


def test_pixels_keep_the_files_channel_first_order_scaled_to_the_unit_interval(tmp_path):
    folder, _ = write_cifar10(tmp_path)
    image = np.zeros((3, 32, 32), dtype=np.uint8)
    image[0] = 255  # red everywhere
    image[2] = 51  # blue at a fifth
    image[1, 2, 5] = 102  # one green pixel: row 2, column 5
    batch = {b"data": image.reshape(1, 3072), b"labels": [4]}
    _dump(folder / "data_batch_2", batch)
    dataset = load_dataset("cifar10", root=str(tmp_path))
    seen = dataset.x_train[PER_BATCH].view(3, 32, 32)  # the first image of batch 2
    assert torch.equal(seen[0], torch.ones(32, 32))
    assert torch.allclose(seen[2], torch.full((32, 32), 0.2))
    assert float(seen[1, 2, 5]) == pytest.approx(0.4)
    assert float(seen[1].sum()) == pytest.approx(0.4)  # no other green
    assert float(dataset.x_train[PER_BATCH, 1024 + 2 * 32 + 5]) == pytest.approx(0.4)
    assert dataset.y_train[PER_BATCH] == 4
    assert dataset.x_train.shape[0] == 4 * PER_BATCH + 1


def test_cifar100_reads_the_fine_labels(tmp_path):
    _, train, test = write_cifar100(tmp_path)
    dataset = load_dataset("cifar100", root=str(tmp_path))
    assert dataset.num_classes == 100 == DATASETS["cifar100"].classes
    assert dataset.y_train.tolist() == [0, 99, 42, 7, 63, 1]
    assert dataset.y_test.tolist() == [98, 3]
    assert torch.equal(dataset.x_train, torch.from_numpy(train[b"data"] / 255.0).float())
    assert torch.equal(dataset.x_test, torch.from_numpy(test[b"data"] / 255.0).float())


def test_the_catalogue_gives_the_official_sizes():
    for name, classes in (("cifar10", 10), ("cifar100", 100)):
        info = DATASETS[name]
        assert (info.train, info.test, info.features, info.classes) == (50000, 10000, 3072, classes)
        assert info.source == "on disk" and not info.sizes_vary and info.writers == 0


# ---- what is missing ----------------------------------------------------------------------


@pytest.mark.parametrize("root", [None, ""])
def test_no_root_says_where_to_get_the_files(root):
    with pytest.raises(UsageError, match="data.root is not set") as caught:
        load_dataset("cifar10", root=root)
    message = str(caught.value)
    assert CIFAR_URL in message and "cifar-10-python.tar.gz" in message
    assert "cifar-10-batches-py" in message


def test_a_root_that_does_not_exist_is_named(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(UsageError, match="does not exist") as caught:
        load_dataset("cifar100", root=str(missing))
    assert str(missing) in str(caught.value) and "cifar-100-python.tar.gz" in str(caught.value)


def test_a_root_without_the_folder_names_the_folder(tmp_path):
    with pytest.raises(UsageError) as caught:
        load_dataset("cifar10", root=str(tmp_path))
    assert f"{tmp_path} holds no cifar-10-batches-py folder" in str(caught.value)


@pytest.mark.parametrize("gone", [["data_batch_3"], ["data_batch_1", "test_batch"]])
def test_a_missing_batch_is_named_with_its_folder_and_how_to_get_it(tmp_path, gone):
    folder, _ = write_cifar10(tmp_path)
    for name in gone:
        (folder / name).unlink()
    with pytest.raises(UsageError) as caught:
        load_dataset("cifar10", root=str(tmp_path))
    message = str(caught.value)
    assert message.startswith(f"data.dataset=cifar10: {folder} lacks {', '.join(gone)};")
    assert CIFAR_URL in message and "set data.root" in message
    assert "\n" not in message


def test_a_missing_cifar100_file_is_named(tmp_path):
    folder, _, _ = write_cifar100(tmp_path)
    (folder / "test").unlink()
    with pytest.raises(UsageError, match=f"{folder} lacks test;"):
        load_dataset("cifar100", root=str(folder))


# ---- damaged files ------------------------------------------------------------------------


def _damage_batch(folder: Path, **changes: object) -> Path:
    """data_batch_4 with its entries changed (an entry set to None is removed)."""
    path = folder / "data_batch_4"
    batch = pickle.loads(path.read_bytes())
    for key, value in changes.items():
        if value is None:
            del batch[key.encode()]
        else:
            batch[key.encode()] = value
    _dump(path, batch)
    return path


def _refusal(tmp_path: Path, name: str = "cifar10") -> str:
    with pytest.raises(UsageError) as caught:
        load_dataset(name, root=str(tmp_path))
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    "changes, problem",
    [
        ({"data": np.zeros((3, 1024), dtype=np.uint8)}, "data is uint8 of shape (3, 1024)"),
        ({"data": np.zeros((3, 3072), dtype=np.float32)}, "data is float32 of shape (3, 3072)"),
        ({"data": [1, 2, 3]}, "data is a list of 3"),
        ({"labels": [1, 2]}, "holds 3 images but 2 labels"),
        ({"labels": [1, 10, 2]}, "label 10 is outside 0..9"),
        ({"labels": [1, -1, 2]}, "label -1 is outside 0..9"),
        ({"labels": [1.5, 2.0, 3.0]}, "labels is a list of 3, not a list of class numbers"),
        ({"labels": [[1], [2, 3], [4]]}, "not a list of class numbers"),
        ({"labels": None}, "it has no 'labels' entry"),
        ({"data": None}, "it has no 'data' entry"),
    ],
)
def test_a_damaged_batch_is_named(tmp_path, changes, problem):
    folder, _ = write_cifar10(tmp_path)
    path = _damage_batch(folder, **changes)
    message = _refusal(tmp_path)
    assert str(path) in message and problem in message


def test_cifar100_labels_beyond_its_classes_are_refused(tmp_path):
    folder, train, _ = write_cifar100(tmp_path)
    _dump(folder / "train", train | {b"fine_labels": [0, 100, 1, 1, 1, 1]})
    message = _refusal(tmp_path, "cifar100")
    assert f"{folder / 'train'}: label 100 is outside 0..99 of CIFAR-100" in message


@pytest.mark.parametrize(
    "payload, problem",
    [
        (b"this is no pickle at all", "is not a CIFAR batch (UnpicklingError"),
        (b"", "is not a CIFAR batch (EOFError"),
        (pickle.dumps({b"data": 1})[:-5], "is not a CIFAR batch"),
        (pickle.dumps([1, 2, 3]), "it holds a list, not a dict"),
    ],
)
def test_a_file_that_is_not_a_batch_is_named(tmp_path, payload, problem):
    folder, _ = write_cifar10(tmp_path)
    (folder / "test_batch").write_bytes(payload)
    message = _refusal(tmp_path)
    assert f"{folder / 'test_batch'}" in message and problem in message


class _Mkdir:
    """Unpickled, it would create a folder: what any pickle's code could do instead."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (str(self.path),))


class _Shell:
    def __reduce__(self):
        return (os.system, ("true",))


def test_a_pickle_that_would_run_code_is_refused_before_it_runs(tmp_path):
    folder, _ = write_cifar10(tmp_path)
    target = tmp_path / "made-by-the-pickle"
    _dump(folder / "data_batch_5", {b"data": _Mkdir(target), b"labels": []})
    message = _refusal(tmp_path)
    assert f"{folder / 'data_batch_5'} is not a CIFAR batch: its pickle calls" in message
    assert "mkdir" in message
    assert not target.exists()


@pytest.mark.parametrize("protocol", [2, 4])
def test_a_pickle_that_calls_os_system_is_refused(tmp_path, protocol):
    folder, _ = write_cifar10(tmp_path)
    _dump(folder / "test_batch", {b"data": _Shell(), b"labels": []}, protocol)
    message = _refusal(tmp_path)
    assert "system, which loading it would run" in message
    assert str(folder / "test_batch") in message


# ---- the command line ---------------------------------------------------------------------


def _cifar_run(root: Path, out: Path) -> list[str]:
    settings = [
        "data.dataset=cifar10",
        f"data.root={root}",
        "model.name=linear",
        "topology.agents=3",
        "run.iterations=4",
        "run.eval_every=2",
        "data.batch_size=2",
        "data.partition=iid",
        "algorithm.a=0.001",
    ]
    return [
        "run",
        "dsgd",
        *(arg for item in settings for arg in ("--set", item)),
        "--quiet",
        "--out",
        str(out),
    ]


def test_a_run_on_cifar10_finishes(tmp_path, capsys):
    write_cifar10(tmp_path / "data")
    assert main(_cifar_run(tmp_path / "data", tmp_path / "run")) == 0, capsys.readouterr().err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["dataset"], summary["agents"], summary["iterations"]) == ("cifar10", 3, 4)


def test_a_missing_batch_ends_a_run_with_one_line_and_status_2(tmp_path, capsys):
    folder, _ = write_cifar10(tmp_path / "data")
    (folder / "data_batch_3").unlink()
    code = main(_cifar_run(tmp_path / "data", tmp_path / "run"))
    out, err = capsys.readouterr()
    assert code == 2
    assert len(err.splitlines()) == 1 and "Traceback" not in out + err
    assert f"{folder} lacks data_batch_3" in err


def test_a_folder_that_cannot_be_looked_into_is_one_line(tmp_path, monkeypatch):
    import murmur.data.cifar as cifar

    def denied(name, root):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(cifar, "_batch_folder", denied)
    with pytest.raises(UsageError, match=f"cannot look into {tmp_path} \\(Permission denied\\)"):
        load_dataset("cifar10", root=str(tmp_path))


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(data=st.data())
def test_a_batch_with_any_bytes_changed_loads_or_is_refused_naming_it(tmp_path_factory, data):
    """Whatever the damage, reading ends in a Dataset or in one line naming the file."""
    root = tmp_path_factory.mktemp("cifar")
    folder, _ = write_cifar10(root)
    path = folder / "data_batch_1"
    payload = bytearray(path.read_bytes())
    head = data.draw(st.integers(0, 200))  # the pickle's opcodes and dtype come first
    for _ in range(data.draw(st.integers(1, 4))):
        payload[data.draw(st.integers(0, min(head, len(payload) - 1)))] = data.draw(
            st.integers(0, 255)
        )
    payload = payload[: data.draw(st.integers(0, len(payload)))]
    path.write_bytes(bytes(payload))
    try:
        dataset = load_dataset("cifar10", root=str(root))
    except UsageError as error:
        assert str(path) in str(error)
    else:
        assert dataset.x_train.shape[1] == 3072
