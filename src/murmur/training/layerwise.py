"""Layer-by-layer training (SSFN and its decentralized forms) on the virtual clock.

Every node m builds its layer features Y_m locally (the random weights R_l come
from a seed all nodes share), reduces them to the layer problem's data
G_m = Y_m^T Y_m and C_m = T_m^T Y_m, and a :class:`LayerSolver` finds every
node's output matrix O_m, talking through the network it is given and moving
the virtual clock. After each layer every node is evaluated (train accuracy on
its own shard, test accuracy on the whole test set) and one record is written.

Centralized SSFN may grow itself (``algorithm.grow``): random nodes are added
in steps while the training error improves enough, then layers likewise.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from tqdm import tqdm

from murmur.algorithms.protocols import LayerNetwork, LayerSolver
from murmur.algorithms.ssfn import (
    Ball,
    LayerwiseConfig,
    Regularizer,
    Ridge,
    SsfnConfig,
    matmul_flops,
    next_features,
    nme_db,
    norm_bound,
    one_hot,
    random_weights,
)
from murmur.errors import UsageError
from murmur.metrics.evaluation import accuracy_summary
from murmur.seeding import derive_seed


@dataclass
class LayerwiseResult:
    """The end of a layer-wise run."""

    outputs: torch.Tensor
    """Last layer's output matrices, (M, Q, n)."""
    history: list[torch.Tensor]
    """Every kept layer's output matrices, layer 0 first."""
    sizes: list[int]
    """Width of each layer after layer 0 (2Q + random nodes)."""
    train_seconds: float
    virtual_seconds: float
    admm_iterations: int
    """ADMM iterations (or asynchronous updates) per node, all layers together."""
    last_record: dict[str, Any]


def train_layerwise(
    config: LayerwiseConfig,
    solver: LayerSolver,
    network: LayerNetwork,
    x_train: torch.Tensor,
    y_train: torch.Tensor,
    x_test: torch.Tensor,
    y_test: torch.Tensor,
    shards: list[torch.Tensor],
    classes: int,
    seed: int,
    on_record,
    progress: bool = False,
) -> LayerwiseResult:
    """Train layer 0 and then ``config.layers`` layers (fewer when growing stops)."""
    started = time.perf_counter()
    nodes = len(shards)
    inputs = [x_train[shard].to(torch.float64) for shard in shards]
    targets = [one_hot(y_train[shard], classes) for shard in shards]
    labels = [y_train[shard] for shard in shards]
    test_inputs = [x_test.to(torch.float64)] * nodes
    state = _LayerState(inputs, targets, labels, test_inputs, y_test)
    grow = isinstance(config, SsfnConfig) and config.grow
    radius = norm_bound(config, classes)

    outputs = _solve(state, solver, Ridge(config.lam), network, [0.0] * nodes)
    history = [outputs]
    record = state.record(0, outputs, network, started, solver.iterations_per_layer)
    on_record(record)
    sizes: list[int] = []
    iterations = solver.iterations_per_layer
    bar = tqdm(total=config.layers, disable=not progress, unit="layer", leave=False)
    for layer in range(1, config.layers + 1):
        if grow:
            candidate = _grow_layer(state, outputs, solver, network, config, layer, radius, seed)
        else:
            candidate = _next_layer(
                state, outputs, solver, network, config.nodes, layer, radius, seed
            )
        next_state, next_outputs, iterations_used = candidate
        next_record = next_state.record(
            layer, next_outputs, network, started, iterations + iterations_used
        )
        if (
            grow
            and _improvement(record["train_nme"], next_record["train_nme"]) < config.layer_tolerance
        ):
            break
        state, outputs, record = next_state, next_outputs, next_record
        iterations += iterations_used
        sizes.append(outputs.shape[2])
        history.append(outputs)
        on_record(record)
        bar.update(1)
        bar.set_postfix(acc=f"{record['accuracy_mean']:.3f}")
    bar.close()
    return LayerwiseResult(
        outputs=outputs,
        history=history,
        sizes=sizes,
        train_seconds=time.perf_counter() - started,
        virtual_seconds=network.virtual_seconds,
        admm_iterations=iterations,
        last_record=record,
    )


def train_layerwise_run(
    setup: Any,
    solver: LayerSolver,
    network: LayerNetwork,
    shards: list[torch.Tensor],
    on_record,
    progress: bool = False,
) -> LayerwiseResult:
    """:func:`train_layerwise` on a prepared run (``experiment.prepare``): its
    algorithm config, dataset and seed, on the nodes of ``shards``."""
    config, dataset = setup.config, setup.dataset
    return train_layerwise(
        config.algorithm,
        solver,
        network,
        dataset.x_train,
        dataset.y_train,
        dataset.x_test,
        dataset.y_test,
        shards,
        dataset.num_classes,
        seed=derive_seed(config.run.seed, "ssfn"),
        on_record=on_record,
        progress=progress,
    )


@dataclass
class _LayerState:
    """Every node's current layer features, on its shard and on the test set."""

    inputs: list[torch.Tensor]
    targets: list[torch.Tensor]
    labels: list[torch.Tensor]
    test_inputs: list[torch.Tensor]
    test_labels: torch.Tensor

    def advanced(self, outputs: torch.Tensor, weights: torch.Tensor) -> _LayerState:
        """The next layer's features given this layer's output matrices and R."""
        return _LayerState(
            [next_features(y, o, weights) for y, o in zip(self.inputs, outputs, strict=True)],
            self.targets,
            self.labels,
            [next_features(y, o, weights) for y, o in zip(self.test_inputs, outputs, strict=True)],
            self.test_labels,
        )

    def problem(self) -> tuple[torch.Tensor, torch.Tensor, list[float]]:
        grams = torch.stack([y.T @ y for y in self.inputs])
        crosses = torch.stack([t.T @ y for t, y in zip(self.targets, self.inputs, strict=True)])
        width, classes = self.inputs[0].shape[1], self.targets[0].shape[1]
        flops = [
            matmul_flops(width, y.shape[0], width) + matmul_flops(classes, y.shape[0], width)
            for y in self.inputs
        ]
        return grams, crosses, flops

    def record(
        self,
        layer: int,
        outputs: torch.Tensor,
        network: LayerNetwork,
        started: float,
        iterations: int,
    ) -> dict[str, Any]:
        train_accuracy, test_accuracy, test_loss = [], [], []
        residual, total = 0.0, 0.0
        for node, output in enumerate(outputs):
            estimate = self.inputs[node] @ output.T
            residual += float((self.targets[node] - estimate).square().sum())
            total += float(self.targets[node].square().sum())
            train_accuracy.append(_accuracy(estimate, self.labels[node]))
            test_estimate = self.test_inputs[node] @ output.T
            test_accuracy.append(_accuracy(test_estimate, self.test_labels))
            test_target = one_hot(self.test_labels, output.shape[0])
            test_loss.append(float((test_estimate - test_target).square().sum(1).mean()))
        summary = accuracy_summary(test_accuracy)
        train = accuracy_summary(train_accuracy)
        mean = outputs.mean(dim=0, keepdim=True)
        counters = network.counters
        return {
            "iteration": layer,
            "layer": layer,
            "width": outputs.shape[2],
            "admm_iterations": iterations,
            "test_accuracy": summary["per_agent"],
            "test_loss": test_loss,
            "accuracy_mean": summary["mean"],
            "accuracy_min": summary["min"],
            "accuracy_max": summary["max"],
            "train_accuracy": train["per_agent"],
            "train_accuracy_mean": train["mean"],
            "train_nme": nme_db(residual, total),
            "consensus_distance": float((outputs - mean).square().sum() / outputs.shape[0]),
            "events": counters.events,
            "messages": counters.messages,
            "bytes": counters.bytes,
            "events_per_agent": counters.events_per_agent.tolist(),
            "virtual_seconds": network.virtual_seconds,
            "wall_seconds": time.perf_counter() - started,
        }


def _solve(
    state: _LayerState,
    solver: LayerSolver,
    regularizer: Regularizer,
    network: LayerNetwork,
    extra_flops: list[float],
) -> torch.Tensor:
    grams, crosses, flops = state.problem()
    setup = [a + b for a, b in zip(flops, extra_flops, strict=True)]
    try:
        outputs = solver.solve(grams, crosses, regularizer, setup, network)
    except torch.linalg.LinAlgError:
        outputs = None
    if outputs is None or not bool(torch.isfinite(outputs).all()):
        raise UsageError(
            "the layer problem diverged (non-finite output matrices); lower algorithm.mu, "
            "or raise algorithm.gossip_rounds for dssfn"
        )
    return outputs


def _next_layer(state, outputs, solver, network, nodes, layer, radius, seed):
    previous = state.inputs[0].shape[1]
    weights = random_weights(seed, layer, nodes, previous)
    next_state = state.advanced(outputs, weights)
    width = next_state.inputs[0].shape[1]
    feature_flops = [matmul_flops(y.shape[0], previous, width) for y in state.inputs]
    next_outputs = _solve(next_state, solver, Ball(radius), network, feature_flops)
    return next_state, next_outputs, solver.iterations_per_layer


def _grow_layer(state, outputs, solver, network, config: SsfnConfig, layer, radius, seed):
    """Add ``node_step`` random nodes at a time while the training NME improves enough."""
    best = None
    used = 0
    count = min(config.node_step, config.nodes)
    while True:
        candidate_state, candidate_outputs, iterations = _next_layer(
            state, outputs, solver, network, count, layer, radius, seed
        )
        used += iterations
        error = _train_nme(candidate_state, candidate_outputs)
        if best is not None and _improvement(best[0], error) < config.node_tolerance:
            break
        best = (error, candidate_state, candidate_outputs)
        if count >= config.nodes:
            break
        count = min(count + config.node_step, config.nodes)
    return best[1], best[2], used


def _train_nme(state: _LayerState, outputs: torch.Tensor) -> float:
    residual = sum(
        float((t - y @ o.T).square().sum())
        for t, y, o in zip(state.targets, state.inputs, outputs, strict=True)
    )
    total = sum(float(t.square().sum()) for t in state.targets)
    return nme_db(residual, total)


def _improvement(before: float, after: float) -> float:
    """Relative decrease of an NME in dB (negative numbers; lower is better)."""
    return (before - after) / max(abs(before), 1e-12)


def _accuracy(estimate: torch.Tensor, labels: torch.Tensor) -> float:
    return float((estimate.argmax(dim=1) == labels).to(torch.float64).mean())
