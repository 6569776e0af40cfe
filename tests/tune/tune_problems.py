"""Small problems for the tests of ``murmur tune``: a least-squares problem whose best
step is known, and blobs small enough that a trial takes a tenth of a second."""

from __future__ import annotations

from pathlib import Path

import numpy as np

SMALL = [
    "data.dataset=blobs",
    "model.hidden=[8]",
    "topology.agents=4",
    "data.batch_size=8",
    "run.iterations=40",
    "run.eval_every=10",
]
"""Settings that make any synchronous SGD member of a preset a quick trial."""

TRAINING_ROWS = 64


def least_squares(folder: Path) -> list[str]:
    """Write a noise-free linear least-squares problem whose loss has the identity as its
    Hessian, and return the settings that fit it by one full-batch step of centralized
    gradient descent from the model's random start.

    The model is ``nn.Linear(3, 2)`` and the loss ``mse_loss``, the mean of the squared
    errors over the n rows and the 2 outputs: L(W, b) = (1 / 2n) sum_i ||W x_i + b -
    y_i||^2. For each output, the Hessian in (w, b) is (2 / 2n) sum_i [x_i; 1][x_i; 1]^T,
    which is the identity when the features have mean 0 and X^T X / n = I: the training
    features are sqrt(n) times orthonormal columns that are also orthogonal to the
    all-ones column. With the identity Hessian, one step from theta_0 gives theta_1 -
    theta* = (1 - a)(theta_0 - theta*). The targets are exact (no noise), so the
    validation rows have the same minimizer theta*, and the validation loss after the
    step is (1 - a)^2 times its value at theta_0: zero at a = 1 and larger at every
    other step.
    """
    rng = np.random.default_rng(0)
    n, features = TRAINING_ROWS, 3
    columns = np.concatenate([np.ones((n, 1)), rng.normal(size=(n, features))], axis=1)
    orthonormal, _ = np.linalg.qr(columns)
    x_train = orthonormal[:, 1:] * np.sqrt(n)
    weights, bias = rng.normal(size=(features, 2)), np.array([0.5, -0.3])
    x_validation, x_test = rng.normal(size=(20, features)), rng.normal(size=(20, features))
    arrays = {
        "x_train": x_train,
        "y_train": x_train @ weights + bias,
        "x_test": x_test,
        "y_test": x_test @ weights + bias,
    }
    np.savez(folder / "train.npz", **{k: v.astype(np.float32) for k, v in arrays.items()})
    np.savez(
        folder / "validation.npz",
        x_validation=x_validation.astype(np.float32),
        y_validation=(x_validation @ weights + bias).astype(np.float32),
    )
    return [
        "data.dataset=file",
        f"data.path={folder / 'train.npz'}",
        f"data.validation_path={folder / 'validation.npz'}",
        "data.task=regression",
        "data.standardize=false",
        "model.name=linear",
        "topology.agents=1",
        f"data.batch_size={n}",  # one agent's batch is a whole epoch: the full gradient
        "run.iterations=1",
        "run.eval_every=1",
    ]


def settings(items: list[str]) -> list[str]:
    """``--set`` arguments for each of ``items``."""
    return [arg for item in items for arg in ("--set", item)]
