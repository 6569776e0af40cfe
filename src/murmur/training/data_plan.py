"""What a run's ``[data]`` names, checked by the plan and loaded by the setup.

``data.dataset`` is a name of :data:`~murmur.data.DATASETS`, ``"file"`` (the user's
``data.path``, read and checked by the plan, whose config then carries the file's
SHA-256 in ``data.sha256``), or ``"arrays"``: a Dataset given from Python
(``murmur.run(config, data=...)``), hashed the same way. The plan also refuses a
``labels`` split that leaves classes out of every agent, unless
``data.allow_missing_classes`` says that is meant, and a ``natural`` split of a dataset
without writers, or with fewer writers than agents.

A set whose sizes depend on what the user's copy holds (``DatasetInfo.sizes_vary``:
LEAF's) is read by the plan, which checks its real sizes; the run then gets the copy
parsed once per process.

A validation split (``data.validation``: a share of the training rows, held out
before the agents' split; ``data.validation_path``: a file) comes with the run's
dataset (:func:`run_dataset`); the plan checks the sizes of the training rows left.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from murmur.config import Config
from murmur.data import DATASETS, Dataset, DatasetInfo, dataset_sha256, load_dataset
from murmur.data.datasets import Source, Task
from murmur.data.partition import check_writers, covered_classes
from murmur.data.user_files import ARRAYS, FILE, FILE_KEYS, read_file_data
from murmur.data.validation import hold_out, validation_size
from murmur.errors import UsageError
from murmur.registry import Runtime
from murmur.sections import DataConfig
from murmur.seeding import derive_seed

NO_ARRAYS = (
    'data.dataset = "arrays" stands for a Dataset given from Python '
    "(murmur.run(config, data=dataset)), which a config alone cannot rebuild"
)
SAVE_ARRAYS = (
    'save it with murmur.data.save_npz(dataset, path) and set data.dataset = "file", '
    "data.path = path"
)


def resolve_data(
    config: Config, given: Dataset | None, runtime: Runtime
) -> tuple[Config, DatasetInfo, Dataset | None]:
    """The config with what its data resolved to (``data.sha256`` of a file or of the
    given arrays), the data's sizes for the plan's checks, and the dataset when it is
    already loaded; UsageError, in one line, for data that cannot be had."""
    data = config.data
    _check_keys(data)
    if given is not None and data.dataset != ARRAYS:
        raise UsageError(
            f'a Dataset given from Python runs as data.dataset = "arrays", not {data.dataset!r}'
        )
    if data.dataset == ARRAYS:
        dataset = _given(given, runtime)
        digest = dataset_sha256(dataset)
        if data.sha256 and digest != data.sha256:
            raise UsageError(
                f"the dataset given as data= is not the run's: sha256 {digest}, expected "
                f'{data.sha256}; give the same arrays, or set data.sha256 = ""'
            )
        resolved = _with_data(config, sha256=digest, task=dataset.task)
        info = dataset_info(dataset, "python", "arrays given from Python")
        return resolved, _training_left(info, data), dataset
    if data.dataset == FILE:
        loaded = read_file_data(data)
        info = dataset_info(loaded.dataset, "file", f"data.path {data.path}")
        return _with_data(config, sha256=loaded.sha256), _training_left(info, data), loaded.dataset
    named = DATASETS.get(data.dataset)
    if named is None:
        raise UsageError(
            f"data.dataset={data.dataset!r} is not a dataset; choose one of: "
            f"{', '.join(DATASETS)}, {FILE} (data.path) or {ARRAYS} (from Python)"
        )
    if named.sizes_vary:
        dataset = load_dataset(data.dataset, root=data.root or None)
        info = dataset_info(dataset, named.source, named.description)
        return config, _training_left(info, data), dataset
    return config, _training_left(named, data), None


def run_dataset(config: Config, given: Dataset | None) -> Dataset:
    """The dataset of a planned run: the given one, the file's (parsed once per process,
    its SHA-256 checked against the plan's), or the named one loaded; with the
    ``data.validation`` share of its training rows held out as its validation split."""
    data = config.data
    if data.dataset == ARRAYS:
        dataset = _given(given, "simulator")
    elif data.dataset == FILE:
        dataset = read_file_data(data).dataset
    else:
        dataset = load_dataset(data.dataset, root=data.root or None)
    return hold_out(dataset, data.validation, data.validation_seed)


def check_training_left(config: Config, decentralized: bool, info: DatasetInfo) -> None:
    """UsageError when ``data.validation`` leaves fewer training rows (``info.train``)
    than a decentralized run has agents, each of which needs one."""
    data, agents = config.data, config.topology.agents
    if data.validation == 0 or not decentralized or agents <= info.train:
        return
    raise UsageError(
        f"data.validation = {data.validation:g} leaves {info.train} training "
        f"row{'s' * (info.train != 1)} for "
        f"topology.agents = {agents}, and every agent needs one: lower data.validation or "
        "topology.agents"
    )


def _training_left(info: DatasetInfo, data: DataConfig) -> DatasetInfo:
    """``info`` with the training rows ``data.validation`` leaves for the agents."""
    held = validation_size(info.train, data.validation)
    return dataclasses.replace(info, train=info.train - held) if held else info


def given_data_config(config: Config) -> Config:
    """``config`` for a Dataset given from Python: ``data.dataset = "arrays"``, the keys
    of a file at their defaults, and no SHA-256 unless the config was one of arrays."""
    data = config.data
    defaults = DataConfig()
    reset = {key: getattr(defaults, key) for key in FILE_KEYS}
    sha256 = data.sha256 if data.dataset == ARRAYS else ""
    fields = {**reset, "dataset": ARRAYS, "root": "", "sha256": sha256}
    return dataclasses.replace(config, data=dataclasses.replace(data, **fields))


def dataset_info(dataset: Dataset, source: Source, description: str) -> DatasetInfo:
    """The sizes of a loaded dataset, as the plan checks them."""
    return DatasetInfo(
        name=dataset.name,
        description=description,
        train=dataset.x_train.shape[0],
        test=dataset.x_test.shape[0],
        features=dataset.features,
        classes=dataset.num_classes,
        source=source,
        targets=1 if dataset.task == "classification" else dataset.outputs,
        writers=dataset.writers,
    )


def check_natural(config: Config, decentralized: bool, info: DatasetInfo) -> None:
    """UsageError when ``data.partition = "natural"`` cannot give every agent a whole
    writer: the dataset records none (``info.writers`` 0), or fewer than the agents.
    (A validation split can still take all of a writer's samples; the split itself
    checks the writers left.)"""
    if decentralized and config.data.partition == "natural":
        check_writers(config.topology.agents, info.writers)


def check_classes_covered(
    config: Config, decentralized: bool, info: DatasetInfo, dataset: Dataset | None
) -> None:
    """UsageError when ``data.partition = "labels"`` gives no agent some of the classes
    (agents x labels_per_agent < classes), unless ``data.allow_missing_classes``: the
    message says what share of the test set the covered classes are, the accuracy the
    agents cannot pass."""
    data = config.data
    agents, per_agent, classes = config.topology.agents, data.labels_per_agent, info.classes
    if not decentralized or data.partition != "labels" or data.allow_missing_classes:
        return
    if classes == 0 or agents * per_agent >= classes:
        return
    if dataset is None:
        dataset = load_dataset(data.dataset, root=data.root or None)
    seed = derive_seed(config.run.seed, "partition")
    covered = covered_classes(agents, per_agent, classes, seed)
    share = torch.isin(dataset.y_test, torch.tensor(covered)).double().mean().item()
    raise UsageError(
        f"{agents} agents x {per_agent} label{'s' * (per_agent > 1)} cover {len(covered)} of "
        f"{classes} classes: test accuracy cannot pass {100 * share:.1f} %; use at least "
        f"{math.ceil(classes / per_agent)} agents, data.labels_per_agent >= "
        f"{math.ceil(classes / agents)}, or set data.allow_missing_classes = true"
    )


def _given(given: Dataset | None, runtime: Runtime) -> Dataset:
    """The Dataset given from Python; UsageError without one, or for ranks of the
    distributed runtime, which read their data from a file."""
    if runtime == "distributed":
        raise UsageError(
            "the ranks of the distributed runtime read their data from a file, not "
            f'data.dataset = "arrays"; {SAVE_ARRAYS}'
        )
    if given is None:
        raise UsageError(f"{NO_ARRAYS}; give it as data=, or {SAVE_ARRAYS}")
    return given


def _check_keys(data: DataConfig) -> None:
    """UsageError for a key of a user's file set for data that is no file."""
    if data.dataset == FILE:
        return
    defaults = DataConfig()
    for key in FILE_KEYS:
        if key == "task" and data.dataset == ARRAYS:
            continue  # the resolved config of given arrays says what they are
        if getattr(data, key) != getattr(defaults, key):
            raise UsageError(
                f'data.{key} is for data.dataset = "file", not {data.dataset!r}: drop it, or '
                'set data.dataset = "file" with data.path'
            )
    if data.sha256 and data.dataset != ARRAYS:
        raise UsageError(
            f"data.sha256 identifies a file or arrays, not data.dataset = {data.dataset!r}: drop it"
        )


def _with_data(config: Config, sha256: str, task: Task | None = None) -> Config:
    """``config`` whose ``data.sha256`` (and ``data.task``) say what the data is."""
    data = dataclasses.replace(config.data, sha256=sha256, task=task or config.data.task)
    return dataclasses.replace(config, data=data)
