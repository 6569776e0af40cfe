"""Datasets (bundled, on disk, generated) and their partition among agents."""

from murmur.data.datasets import (
    DATASETS,
    Dataset,
    DatasetInfo,
    load_dataset,
    synthetic_optimum,
)
from murmur.data.partition import PARTITIONS, partition

__all__ = [
    "DATASETS",
    "PARTITIONS",
    "Dataset",
    "DatasetInfo",
    "load_dataset",
    "partition",
    "synthetic_optimum",
]
