"""murmur: train neural networks across many learners that talk rarely and asynchronously."""

from murmur import portable
from murmur.config import Config, Experiment, build_config, load_experiment
from murmur.errors import UsageError
from murmur.experiment import run
from murmur.metrics.records import RunResult
from murmur.training.checkpoint import load_checkpoint
from murmur.training.model_file import load_model

portable.pin_if_asked()  # MURMUR_PORTABLE=1: before torch computes anything

__all__ = [
    "Config",
    "Experiment",
    "RunResult",
    "UsageError",
    "build_config",
    "load_checkpoint",
    "load_experiment",
    "load_model",
    "run",
]
