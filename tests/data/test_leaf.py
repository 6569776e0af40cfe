"""FEMNIST and Shakespeare from tiny files in LEAF's JSON format: {"users", "num_samples",
"user_data": {user: {"x", "y"}}}, read from train/ and test/ or from all_data/."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from murmur.cli import main
from murmur.config import load_experiment
from murmur.data import DATASETS, load_dataset
from murmur.data.leaf import ALL_LETTERS, clear_cache, read_leaf
from murmur.errors import UsageError
from murmur.training.data_plan import resolve_data
from murmur.training.setup import prepare

Users = dict[str, tuple[list, list]]


@pytest.fixture(autouse=True)
def fresh_cache():
    clear_cache()
    yield
    clear_cache()


def femnist_user(seed: int, samples: int) -> tuple[list, list]:
    """A writer's images (784 values in [0, 1], rounded as LEAF's files print them) and
    classes 0..61."""
    rng = np.random.default_rng(seed)
    images = rng.random((samples, 784)).round(4)
    return images.tolist(), rng.integers(0, 62, samples).tolist()


def write_leaf(path: Path, users: Users, order: list[str] | None = None) -> Path:
    """A LEAF JSON file of ``users``, listed in ``order`` (default: as given)."""
    order = order or list(users)
    document = {
        "users": order,
        "num_samples": [len(users[user][1]) for user in order],
        "user_data": {user: {"x": users[user][0], "y": users[user][1]} for user in order},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))
    return path


def femnist_split(root: Path) -> tuple[Users, Users]:
    """LEAF's data/femnist/data under ``root`` with train/ (two files, writer f_b's
    samples in both) and test/; the training and test users, each writer's samples in
    file order."""
    data = root / "data"
    first = {"f_c": femnist_user(1, 3), "f_b": femnist_user(2, 2)}
    second = {"f_b": femnist_user(3, 1), "f_a": femnist_user(4, 4)}
    write_leaf(data / "train" / "all_data_0_niid_0_keep_0_train_9.json", first)
    write_leaf(data / "train" / "all_data_1_niid_0_keep_0_train_9.json", second)
    test = {"f_c": femnist_user(5, 1), "f_a": femnist_user(6, 2)}
    write_leaf(data / "test" / "all_data_0_niid_0_keep_0_test_9.json", test)
    train = {
        "f_a": second["f_a"],
        "f_b": (first["f_b"][0] + second["f_b"][0], first["f_b"][1] + second["f_b"][1]),
        "f_c": first["f_c"],
    }
    return train, test


def _features(users: Users, order: list[str]) -> torch.Tensor:
    return torch.tensor(np.array([row for user in order for row in users[user][0]], np.float32))


def _labels(users: Users, order: list[str]) -> list[int]:
    return [label for user in order for label in users[user][1]]


# ---- FEMNIST ------------------------------------------------------------------------------


@pytest.mark.parametrize("point_at", ["data", "its parent"])
def test_femnist_round_trip_from_train_and_test(tmp_path, point_at):
    train, test = femnist_split(tmp_path)
    root = tmp_path / "data" if point_at == "data" else tmp_path
    dataset = load_dataset("femnist", root=str(root))
    writers = ["f_a", "f_b", "f_c"]  # sorted by id, whatever the files' order
    assert dataset.x_train.shape == (10, 784) and dataset.x_train.dtype == torch.float32
    assert torch.equal(dataset.x_train, _features(train, writers))
    assert dataset.y_train.tolist() == _labels(train, writers)
    assert dataset.groups is not None and dataset.groups.dtype == torch.int64
    assert dataset.groups.tolist() == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert torch.equal(dataset.x_test, _features(test, ["f_a", "f_c"]))
    assert dataset.y_test.tolist() == _labels(test, ["f_a", "f_c"])
    assert (dataset.num_classes, dataset.features, dataset.writers) == (62, 784, 3)
    assert read_leaf("femnist", root).writers == ("f_a", "f_b", "f_c")


def test_a_writer_in_two_files_keeps_its_samples_in_file_order(tmp_path):
    train, _ = femnist_split(tmp_path)
    dataset = load_dataset("femnist", root=str(tmp_path / "data"))
    rows = (dataset.groups == 1).nonzero().flatten()
    assert torch.equal(dataset.x_train[rows], _features(train, ["f_b"]))  # 2 of file 0, then 1


def test_all_data_holds_out_the_last_tenth_of_each_writer(tmp_path):
    users = {
        name: femnist_user(seed, size)
        for seed, (name, size) in enumerate([("w25", 25), ("w1", 1), ("w2", 2), ("w10", 10)])
    }
    write_leaf(tmp_path / "all_data" / "all_data_0.json", users)
    dataset = load_dataset("femnist", root=str(tmp_path))
    # sorted: w1, w10, w2, w25 keep 1, 9, 1, 22 samples; test 0, 1, 1, 3
    kept = {"w1": 1, "w10": 9, "w2": 1, "w25": 22}
    order = sorted(users)
    expected_train = [row for user in order for row in users[user][0][: kept[user]]]
    expected_test = [row for user in order for row in users[user][0][kept[user] :]]
    assert torch.equal(dataset.x_train, torch.tensor(np.array(expected_train, np.float32)))
    assert torch.equal(dataset.x_test, torch.tensor(np.array(expected_test, np.float32)))
    assert dataset.y_test.tolist() == [y for u in order for y in users[u][1][kept[u] :]]
    assert torch.bincount(dataset.groups).tolist() == [1, 9, 1, 22]


def test_train_and_test_are_preferred_to_all_data(tmp_path):
    femnist_split(tmp_path)
    write_leaf(tmp_path / "data" / "all_data" / "all_data_0.json", {"z": femnist_user(9, 50)})
    assert load_dataset("femnist", root=str(tmp_path)).x_train.shape[0] == 10


def test_the_catalogue_sizes_are_the_whole_sets_and_marked_as_such():
    for name, features, classes, writers in (
        ("femnist", 784, 62, 3550),
        ("shakespeare", 80, 80, 1129),
    ):
        info = DATASETS[name]
        assert info.sizes_vary and info.writers == writers
        assert (info.features, info.classes, info.source) == (features, classes, "on disk")
    assert DATASETS["femnist"].train + DATASETS["femnist"].test == 805263
    assert DATASETS["shakespeare"].train + DATASETS["shakespeare"].test == 4226158


def test_the_plan_reads_the_real_sizes_of_a_users_copy(tmp_path):
    femnist_split(tmp_path)
    config = load_experiment(
        "dsgd", ["data.dataset=femnist", f"data.root={tmp_path}", "data.validation=0.2"]
    ).runs[0][1]
    _, info, dataset = resolve_data(config, None, "simulator")
    assert dataset is not None and dataset.x_train.shape[0] == 10
    assert (info.train, info.test, info.writers) == (8, 3, 3)  # 2 of 10 held out


def test_files_are_parsed_once_and_again_when_they_change(tmp_path):
    femnist_split(tmp_path)
    first = read_leaf("femnist", tmp_path)
    assert read_leaf("femnist", tmp_path) is first
    write_leaf(
        tmp_path / "data" / "test" / "all_data_0_niid_0_keep_0_test_9.json",
        {"f_a": femnist_user(7, 5)},
    )
    again = read_leaf("femnist", tmp_path)
    assert again is not first and again.x_test.shape == (5, 784)


# ---- Shakespeare --------------------------------------------------------------------------


def _line(seed: int) -> str:
    rng = np.random.default_rng(seed)
    return "".join(ALL_LETTERS[index] for index in rng.integers(0, 80, 80))


def test_shakespeare_maps_each_character_to_its_index_in_leafs_alphabet(tmp_path):
    assert len(ALL_LETTERS) == 80 and ALL_LETTERS[0] == "\n" and ALL_LETTERS[-1] == "}"
    edges = "\n" + "A" * 39 + "}" + "a" * 37 + " z"  # 80 characters
    romeo = ([edges, _line(1)], ["}", "\n"])
    juliet = ([_line(2)], ["e"])
    write_leaf(
        tmp_path / "train" / "a.json", {"THE_TRAGEDY_ROMEO": romeo, "THE_TRAGEDY_JULIET": juliet}
    )
    write_leaf(tmp_path / "test" / "a.json", {"THE_TRAGEDY_ROMEO": ([_line(3)], ["!"])})
    dataset = load_dataset("shakespeare", root=str(tmp_path))
    assert dataset.x_train.shape == (3, 80) and dataset.x_train.dtype == torch.float32
    # JULIET sorts first
    assert dataset.x_train[0].tolist() == [float(ALL_LETTERS.index(c)) for c in _line(2)]
    first = dataset.x_train[1]
    assert first[0] == 0 and first[1] == ALL_LETTERS.index("A") == 25 and first[40] == 79
    assert first[78] == 1 and first[79] == ALL_LETTERS.index("z") == 78
    assert dataset.y_train.tolist() == [ALL_LETTERS.index("e"), 79, 0]
    assert dataset.y_test.tolist() == [2]  # "!"
    assert dataset.groups.tolist() == [0, 1, 1]
    assert (dataset.num_classes, dataset.features) == (80, 80)


@pytest.mark.parametrize(
    "x, y, character",
    [
        (["~" + "a" * 79], ["a"], "'~'"),
        (["a" * 79 + "é"], ["a"], "'é'"),
        (["a" * 80], ["@"], "'@'"),
        (["a" * 80], ["\t"], "'\\t'"),
    ],
)
def test_a_character_outside_the_alphabet_is_refused_naming_file_and_user(
    tmp_path, x, y, character
):
    path = write_leaf(tmp_path / "all_data" / "plays.json", {"HAMLET_OPHELIA": (x, y)})
    with pytest.raises(UsageError) as caught:
        load_dataset("shakespeare", root=str(tmp_path))
    message = str(caught.value)
    assert message.startswith(f"{path}: user 'HAMLET_OPHELIA': the character {character} is not")
    assert "80-character alphabet" in message


# ---- what is missing ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["femnist", "shakespeare"])
def test_no_root_says_how_to_make_the_files(name):
    with pytest.raises(UsageError, match="data.root is not set") as caught:
        load_dataset(name)
    message = str(caught.value)
    assert f"data/{name}" in message and "github.com/TalwalkarLab/leaf" in message
    assert "preprocess.sh" in message


def test_a_root_that_does_not_exist_is_named(tmp_path):
    with pytest.raises(UsageError, match=f"directory {tmp_path / 'gone'} does not exist"):
        load_dataset("femnist", root=str(tmp_path / "gone"))


@pytest.mark.parametrize(
    "folders, lacks",
    [([], "train/ and test/"), (["train"], "test/"), (["test"], "train/")],
)
def test_a_root_without_leafs_folders_says_which_are_missing(tmp_path, folders, lacks):
    for folder in folders:
        write_leaf(tmp_path / folder / "a.json", {"u": femnist_user(0, 1)})
    with pytest.raises(UsageError) as caught:
        load_dataset("femnist", root=str(tmp_path))
    message = str(caught.value)
    assert message.startswith(f"data.dataset=femnist: {tmp_path} lacks {lacks} (or all_data/)")
    assert "data/femnist/data" in message


def test_a_folder_without_json_files_is_named(tmp_path):
    write_leaf(tmp_path / "train" / "a.json", {"u": femnist_user(0, 1)})
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "notes.txt").write_text("no json here")
    with pytest.raises(UsageError, match=f"{tmp_path / 'test'} holds no .json file"):
        load_dataset("femnist", root=str(tmp_path))


def test_a_split_without_samples_is_refused(tmp_path):
    write_leaf(tmp_path / "all_data" / "a.json", {"u": femnist_user(0, 1), "v": femnist_user(1, 1)})
    with pytest.raises(UsageError, match="hold no test sample"):
        load_dataset("femnist", root=str(tmp_path))


# ---- damaged files ------------------------------------------------------------------------


def _document(users: Users) -> dict:
    return {
        "users": list(users),
        "num_samples": [len(y) for _, y in users.values()],
        "user_data": {user: {"x": x, "y": y} for user, (x, y) in users.items()},
    }


def _good() -> dict:
    return _document({"f_1": femnist_user(0, 3)})


def _with(change) -> dict:
    document = _good()
    change(document)
    return document


DAMAGED = [
    ("[1, 2", "is not JSON"),
    (b"\xff\xfe\x00garbage", "is not JSON"),
    (json.dumps([1, 2]), "is not in LEAF's form: it holds a JSON list, not an object"),
    (json.dumps({"users": ["f_1"]}), 'needs a "users" list and a "user_data" object'),
    (_with(lambda d: d["users"].append("f_1")), '"users" must list distinct strings'),
    (_with(lambda d: d["users"].append(7)), '"users" must list distinct strings'),
    (_with(lambda d: d["users"].append("f_2")), 'has no "x" and "y" lists of user \'f_2\''),
    (_with(lambda d: d["user_data"]["f_1"].pop("y")), 'no "x" and "y" lists of user \'f_1\''),
    (_with(lambda d: d["user_data"]["f_1"]["y"].pop()), "user 'f_1' has 3 samples in x but 2"),
    (_with(lambda d: d.update(num_samples=[4])), '"num_samples" does not count the samples'),
    (
        _with(lambda d: d["user_data"]["f_1"]["x"][1].pop()),
        "user 'f_1': x is not a list of images of 784 numbers",
    ),
    (
        _with(lambda d: d["user_data"]["f_1"]["x"][0].__setitem__(5, "dark")),
        "user 'f_1': x is not a list of images of 784 numbers",
    ),
    (
        _with(lambda d: d["user_data"]["f_1"]["x"][2].__setitem__(0, 255)),
        "user 'f_1': x holds pixel values outside [0, 1]",
    ),
    (
        _with(lambda d: d["user_data"]["f_1"]["y"].__setitem__(1, 62)),
        "user 'f_1': label 62 is outside 0..61",
    ),
    (
        _with(lambda d: d["user_data"]["f_1"]["y"].__setitem__(1, 2.5)),
        "user 'f_1': y is not a list of class numbers",
    ),
]


@pytest.mark.parametrize("content, problem", DAMAGED)
def test_a_damaged_femnist_file_is_named(tmp_path, content, problem):
    femnist_split(tmp_path)
    path = tmp_path / "data" / "train" / "all_data_1_niid_0_keep_0_train_9.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(UsageError) as caught:
        load_dataset("femnist", root=str(tmp_path))
    message = str(caught.value)
    assert message.startswith(str(path)) and problem in message and "\n" not in message


@pytest.mark.parametrize(
    "x, y, problem",
    [
        (["a" * 79], ["b"], "x is not a list of 80-character strings"),
        ([["a"] * 80], ["b"], "x is not a list of 80-character strings"),
        (["a" * 80], ["bc"], "y is not a list of single characters"),
        (["a" * 80], [3], "y is not a list of single characters"),
    ],
)
def test_a_damaged_shakespeare_file_is_named(tmp_path, x, y, problem):
    path = write_leaf(tmp_path / "all_data" / "a.json", {"KING_LEAR": (x, y)})
    with pytest.raises(UsageError) as caught:
        load_dataset("shakespeare", root=str(tmp_path))
    assert str(caught.value).startswith(f"{path}: user 'KING_LEAR': {problem}")


# ---- runs split by writer -----------------------------------------------------------------


def _four_writers(root: Path) -> None:
    users = {f"w{index}": femnist_user(index, 4 + index) for index in range(4)}
    write_leaf(root / "data" / "all_data" / "all_data_0.json", users)


def _natural_run(root: Path, out: Path, agents: int) -> list[str]:
    settings = [
        "data.dataset=femnist",
        f"data.root={root}",
        "data.partition=natural",
        "model.name=linear",
        f"topology.agents={agents}",
        "run.iterations=4",
        "run.eval_every=2",
        "data.batch_size=2",
        "algorithm.a=0.01",
    ]
    return [
        "run",
        "dsgd",
        *(arg for item in settings for arg in ("--set", item)),
        "--quiet",
        "--out",
        str(out),
    ]


@pytest.mark.parametrize("agents", [4, 2])
def test_a_run_split_by_writer_finishes(tmp_path, capsys, agents):
    _four_writers(tmp_path)
    code = main(_natural_run(tmp_path, tmp_path / "run", agents))
    assert code == 0, capsys.readouterr().err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["dataset"], summary["agents"], summary["iterations"]) == ("femnist", agents, 4)


def test_each_agent_of_a_natural_run_trains_on_whole_writers(tmp_path):
    _four_writers(tmp_path)  # writers of 4, 5, 6, 7 samples keep 3, 4, 5, 6
    config = load_experiment(
        "dsgd",
        [
            "data.dataset=femnist",
            f"data.root={tmp_path}",
            "data.partition=natural",
            "topology.agents=2",
            "model.name=linear",
        ],
    ).runs[0][1]
    setup = prepare(config)
    groups = setup.dataset.groups
    writers = [sorted(set(groups[shard].tolist())) for shard in setup.shards]
    assert writers == [[0, 3], [1, 2]]  # 6+3 and 5+4 samples: dealt largest first
    assert [shard.numel() for shard in setup.shards] == [9, 9]


def test_more_agents_than_writers_is_refused_before_the_run_starts(tmp_path, capsys):
    _four_writers(tmp_path)
    code = main(_natural_run(tmp_path, tmp_path / "run", 5))
    out, err = capsys.readouterr()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in out + err
    assert "topology.agents=5 exceeds the 4 writers of the training set" in err
    assert not (tmp_path / "run").exists()


def test_natural_on_a_set_without_writers_is_refused_naming_those_with(tmp_path, capsys):
    argv = _natural_run(tmp_path, tmp_path / "run", 4)
    argv[argv.index("data.dataset=femnist")] = "data.dataset=blobs"
    code = main(argv)
    _, err = capsys.readouterr()
    assert code == 2 and len(err.splitlines()) == 1
    assert "records no writers; only femnist, shakespeare do" in err
    assert not (tmp_path / "run").exists()


def test_a_damaged_file_ends_a_run_with_one_line_naming_it(tmp_path, capsys):
    _four_writers(tmp_path)
    path = tmp_path / "data" / "all_data" / "all_data_0.json"
    path.write_text(path.read_text()[:-10])
    code = main(_natural_run(tmp_path, tmp_path / "run", 4))
    out, err = capsys.readouterr()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in out + err
    assert f"{path} is not JSON" in err


def test_a_folder_that_cannot_be_looked_into_is_one_line(tmp_path, monkeypatch):
    import murmur.data.leaf as leaf

    def denied(name, root):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(leaf, "_json_files", denied)
    with pytest.raises(UsageError) as caught:
        load_dataset("femnist", root=str(tmp_path))
    assert str(caught.value) == (
        f"data.dataset=femnist: cannot look into {tmp_path} (Permission denied); make it readable"
    )


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 100) | st.floats() | st.text(max_size=3),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=2), children, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(x=json_values, y=json_values, name=st.sampled_from(["femnist", "shakespeare"]))
def test_a_user_of_any_x_and_y_loads_or_is_refused_in_one_line(tmp_path_factory, x, y, name):
    """Whatever a file's ``x`` and ``y`` hold, reading ends in a Dataset or one line."""
    root = tmp_path_factory.mktemp("leaf")
    document = {"users": ["u", "v"], "user_data": {"u": {"x": x, "y": y}, "v": {"x": x, "y": y}}}
    (root / "all_data").mkdir()
    (root / "all_data" / "a.json").write_text(json.dumps(document))
    try:
        dataset = load_dataset(name, root=str(root))
    except UsageError as error:
        assert "\n" not in str(error)
    else:
        assert dataset.x_train.shape[1] == DATASETS[name].features
