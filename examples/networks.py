"""Networks of one's own, built by a function murmur calls with the data's sizes:

    murmur run dsgd --set model.name=factory \
        --set model.factory=examples/networks.py:dropout_mlp --set 'model.options=["p=0.2"]'
"""

from torch import nn


def dropout_mlp(features: int, outputs: int, hidden: int = 64, p: float = 0.1) -> nn.Module:
    """A ReLU MLP with dropout after its hidden layer: each agent draws its own masks."""
    return nn.Sequential(
        nn.Linear(features, hidden), nn.ReLU(), nn.Dropout(p), nn.Linear(hidden, outputs)
    )


def layer_norm_mlp(features: int, outputs: int, hidden: int = 64) -> nn.Module:
    """A ReLU MLP whose hidden layer is normalized per sample (no running statistics)."""
    return nn.Sequential(
        nn.Linear(features, hidden), nn.LayerNorm(hidden), nn.ReLU(), nn.Linear(hidden, outputs)
    )


def batch_norm_mlp(features: int, outputs: int, hidden: int = 64) -> nn.Module:
    """A ReLU MLP with batch norm: each agent keeps its own running statistics, which
    are not exchanged; the average model uses their mean."""
    return nn.Sequential(
        nn.Linear(features, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Linear(hidden, outputs)
    )
