"""Datasets (bundled, on disk, generated, a user's own) and their partition among agents."""

from murmur.data.datasets import (
    DATASETS,
    Dataset,
    DatasetInfo,
    load_dataset,
    synthetic_optimum,
)
from murmur.data.partition import PARTITIONS, partition
from murmur.data.user_arrays import dataset_sha256, from_arrays, from_torch_dataset, save_npz

__all__ = [
    "DATASETS",
    "PARTITIONS",
    "Dataset",
    "DatasetInfo",
    "dataset_sha256",
    "from_arrays",
    "from_torch_dataset",
    "load_dataset",
    "partition",
    "save_npz",
    "synthetic_optimum",
]
