"""Layer-by-layer training (SSFN and its decentralized forms) on the virtual clock.

Every node m builds its layer features Y_m locally (the random weights R_l come
from a seed all nodes share), reduces them to the layer problem's data
G_m = Y_m^T Y_m and C_m = T_m^T Y_m, and a :class:`LayerSolver` finds every
node's output matrix O_m, talking through the network it is given and moving
the virtual clock. After each layer every node is evaluated (train accuracy on
its own shard, test accuracy on the whole test set) and one record is written.

Centralized SSFN may grow itself (``algorithm.grow``): random nodes are added
in steps while the training error improves enough, then layers likewise.

A runtime hands the loop the data (:class:`LayerData`) and what it adds
(:class:`LayerHooks`: where each record goes, checkpoints, a rule that stops the
run). One that saves checkpoints is handed the :class:`LayerProgress` after
every ``checkpoint_every`` layers; a run continued from one rebuilds the layer
features from the kept output matrices and the seeded random weights.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, NotRequired, TypedDict

import torch

from murmur.algorithms.protocols import (
    LayerNetwork,
    LayerProblem,
    LayerSolution,
    LayerSolver,
)
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
from murmur.errors import RunFailed
from murmur.metrics.counters import MessageCounters
from murmur.metrics.evaluation import accuracy_summary
from murmur.metrics.record_types import LayerRecord, LayerReport, RunSummary
from murmur.metrics.records import OutcomeExtra
from murmur.seeding import derive_seed
from murmur.topology import Graph
from murmur.training.checkpoint import Checkpoints
from murmur.training.progress import progress_bar
from murmur.training.reducer import LayerRows, layer_record
from murmur.training.setup import LayerSetup


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
    virtual_seconds: float | None
    """Virtual time at which the last node finished (None: real time only)."""
    admm_iterations: int
    """ADMM iterations (or asynchronous updates) per node, all layers together."""
    last_record: LayerRecord
    rows: list[LayerRows]
    """Every kept layer's per-node measurements, layer 0 first."""
    records: list[LayerRecord]
    """Every kept layer's record, layer 0 first."""


class LayerProgressState(TypedDict):
    """A :class:`LayerProgress` as a checkpoint holds it."""

    layer: int
    history: list[torch.Tensor]
    sizes: list[int]
    iterations: int
    rows: list[dict[str, Any]]
    """Each layer's :class:`LayerRows`, as ``dataclasses.asdict`` gives them."""
    records: list[LayerRecord]


class LayerSnapshot(TypedDict):
    """What a checkpoint of layer-wise training holds: the layers so far, and the
    runtime's own part (the simulator's network, or a rank's counts)."""

    layers: LayerProgressState
    network: NotRequired[dict[str, Any]]
    """The simulator: its clock, crashed nodes and counters."""
    counters: NotRequired[dict[str, torch.Tensor]]
    """A distributed rank: its node's message counters."""
    control: NotRequired[int]
    """A distributed rank: the control messages it sent."""
    rejected: NotRequired[int]
    """A distributed rank: the messages it refused."""


@dataclass
class LayerProgress:
    """Where a layer-wise run stands after layer ``layer``: all it carries on."""

    layer: int
    history: list[torch.Tensor]
    """Every kept layer's output matrices, layer 0 first."""
    sizes: list[int]
    iterations: int
    rows: list[LayerRows]
    records: list[LayerRecord]

    def copy(self) -> LayerProgress:
        """A copy whose lists a run may extend, leaving these as they are."""
        return replace(
            self,
            history=list(self.history),
            sizes=list(self.sizes),
            rows=list(self.rows),
            records=list(self.records),
        )

    def keep(
        self,
        layer: int,
        solution: LayerSolution,
        rows: LayerRows,
        record: LayerRecord,
        iterations: int,
    ) -> None:
        """Layer ``layer`` is kept: its output matrices, rows and record, solved in
        ``iterations`` more."""
        self.layer = layer
        self.history.append(solution.outputs)
        self.sizes.append(solution.outputs.shape[2])
        self.iterations += iterations
        self.rows.append(rows)
        self.records.append(record)

    def to_plain(self) -> LayerProgressState:
        """The progress as plain values, for a checkpoint."""
        return {
            "layer": self.layer,
            "history": self.history,
            "sizes": self.sizes,
            "iterations": self.iterations,
            "rows": [dataclasses.asdict(rows) for rows in self.rows],
            "records": self.records,
        }

    def result(self, train_seconds: float, virtual_seconds: float | None) -> LayerwiseResult:
        """The end of a run that stands here."""
        return LayerwiseResult(
            outputs=self.history[-1],
            history=self.history,
            sizes=self.sizes,
            train_seconds=train_seconds,
            virtual_seconds=virtual_seconds,
            admm_iterations=self.iterations,
            last_record=self.records[-1],
            rows=self.rows,
            records=self.records,
        )

    @classmethod
    def from_plain(cls, saved: Mapping[str, Any]) -> LayerProgress:
        return cls(
            layer=saved["layer"],
            history=list(saved["history"]),
            sizes=list(saved["sizes"]),
            iterations=saved["iterations"],
            rows=[LayerRows(**rows) for rows in saved["rows"]],
            records=list(saved["records"]),
        )


@dataclass(frozen=True)
class LayerData:
    """What a layer-wise run learns from: the training and test sets, each node's shard
    (indices of training rows) and the number of classes."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    shards: list[torch.Tensor]
    classes: int


@dataclass(frozen=True)
class LayerHooks:
    """What a runtime adds to the layer-wise loop, each part optional."""

    on_record: Callable[[LayerRecord], None] | None = None
    """Given each kept layer's record (layer 0's too)."""
    checkpoints: Checkpoints | None = None
    """Where to save, when due, what ``snapshot`` makes of the progress."""
    snapshot: Callable[[LayerProgress], Mapping[str, Any]] | None = None
    on_layer: Callable[[LayerProgress], None] | None = None
    """Given the progress after each layer kept, after its record's ``on_record``."""
    stop: Callable[[], bool] | None = None
    """Asked before every layer; true ends the run at the layer just kept (a rule of
    ``[collapse]`` stopped it)."""

    def tell(self, at: LayerProgress) -> None:
        """Hand the layer just kept to ``on_record`` (its record) and ``on_layer``."""
        if self.on_record is not None:
            self.on_record(at.records[-1])
        if self.on_layer is not None:
            self.on_layer(at)


@dataclass(frozen=True)
class _Solving:
    """What every layer of a run is solved with: the algorithm's config, the solver, the
    network it talks through, the norm bound of the output matrices and the seed of
    the random weights."""

    config: LayerwiseConfig
    solver: LayerSolver
    network: LayerNetwork
    radius: float
    seed: int


def train_layerwise(
    config: LayerwiseConfig,
    solver: LayerSolver,
    network: LayerNetwork,
    data: LayerData,
    seed: int,
    hooks: LayerHooks,
    *,
    progress: bool = False,
    start: LayerProgress | None = None,
) -> LayerwiseResult:
    """Train layer 0 and then ``config.layers`` layers (fewer when growing stops) on the
    nodes of ``data.shards``; ``seed`` draws every layer's random weights.

    ``start``: continue after this layer of an earlier run (its records are written).
    """
    started = time.perf_counter()
    state = _LayerState.first(data)
    growing = config if isinstance(config, SsfnConfig) and config.grow else None
    solving = _Solving(config, solver, network, norm_bound(config, data.classes), seed)
    if start is None:
        start = _layer_zero(state, solving, started)
        hooks.tell(start)
    else:
        state = _replayed(state, start.history, data.classes, seed)
    at = start.copy()
    bar = progress_bar(progress, config.layers, initial=start.layer, unit="layer")
    for layer in range(start.layer + 1, config.layers + 1):
        if hooks.stop is not None and hooks.stop():
            break
        next_state, solution, iterations = _layer_after(state, at.history[-1], solving, layer)
        record, rows = next_state.evaluate(
            layer, solution, network, started, at.iterations + iterations, at.rows[-1]
        )
        gain = _improvement(at.records[-1]["train_nme"], record["train_nme"])
        if growing is not None and gain < growing.layer_tolerance:
            break
        state = next_state
        at.keep(layer, solution, rows, record, iterations)
        hooks.tell(at)
        if hooks.checkpoints is not None and hooks.snapshot is not None:
            if hooks.checkpoints.due(layer, config.layers):
                hooks.checkpoints.save(layer, hooks.snapshot(replace(at)))
        bar.update(1)
        bar.set_postfix(acc=f"{record['accuracy_mean']:.3f}")
    bar.close()
    return at.result(time.perf_counter() - started, network.virtual_seconds)


def _layer_zero(state: _LayerState, solving: _Solving, started: float) -> LayerProgress:
    """Where a run stands after layer 0, the ridge problem on the inputs themselves."""
    network = solving.network
    network.begin_layer(0)
    ridge = Ridge(solving.config.lam)
    solution = _solve(state, solving.solver, ridge, network, [0.0] * len(state.inputs))
    record, rows = state.evaluate(0, solution, network, started, max(solution.steps), None)
    return LayerProgress(0, [solution.outputs], [], max(solution.steps), [rows], [record])


def _replayed(
    state: _LayerState, history: list[torch.Tensor], classes: int, seed: int
) -> _LayerState:
    """The features of the last layer of ``history``, rebuilt from layer 0's: each
    layer's random weights come from the seed, its width from its output matrices."""
    for layer, (before, after) in enumerate(zip(history, history[1:], strict=False), start=1):
        rows = after.shape[2] - 2 * classes
        state = state.advanced(before, random_weights(seed, layer, rows, before.shape[2]))
    return state


def train_layerwise_run(
    setup: LayerSetup,
    solver: LayerSolver,
    network: LayerNetwork,
    shards: list[torch.Tensor],
    hooks: LayerHooks,
    progress: bool = False,
    start: LayerProgress | None = None,
) -> LayerwiseResult:
    """:func:`train_layerwise` on a prepared run (``experiment.prepare``): its
    algorithm config, dataset and seed, on the nodes of ``shards``."""
    config, dataset = setup.config, setup.dataset
    if not isinstance(config.algorithm, LayerwiseConfig):
        raise TypeError(f"{config.algorithm.name} is not trained layer by layer")
    data = LayerData(
        dataset.x_train,
        dataset.y_train,
        dataset.x_test,
        dataset.y_test,
        shards,
        dataset.num_classes,
    )
    return train_layerwise(
        config.algorithm,
        solver,
        network,
        data,
        derive_seed(config.run.seed, "ssfn"),
        hooks,
        progress=progress,
        start=start,
    )


@dataclass
class _LayerState:
    """Every node's current layer features, on its shard and on the test set."""

    inputs: list[torch.Tensor]
    targets: list[torch.Tensor]
    labels: list[torch.Tensor]
    test_inputs: list[torch.Tensor]
    test_labels: torch.Tensor

    @classmethod
    def first(cls, data: LayerData) -> _LayerState:
        """Layer 0's features: each node's shard of the inputs, in float64."""
        shards, y_train = data.shards, data.y_train
        return cls(
            [data.x_train[shard].to(torch.float64) for shard in shards],
            [one_hot(y_train[shard], data.classes) for shard in shards],
            [y_train[shard] for shard in shards],
            [data.x_test.to(torch.float64)] * len(shards),
            data.y_test,
        )

    def advanced(self, outputs: torch.Tensor, weights: torch.Tensor) -> _LayerState:
        """The next layer's features given this layer's output matrices and R."""
        return _LayerState(
            [next_features(y, o, weights) for y, o in zip(self.inputs, outputs, strict=True)],
            self.targets,
            self.labels,
            [next_features(y, o, weights) for y, o in zip(self.test_inputs, outputs, strict=True)],
            self.test_labels,
        )

    def problem(self, regularizer: Regularizer, extra_flops: list[float]) -> LayerProblem:
        """This layer's problem: each node's G_m and C_m, whose setup work is their two
        products plus ``extra_flops[m]`` (building the node's features)."""
        grams = torch.stack([y.T @ y for y in self.inputs])
        crosses = torch.stack([t.T @ y for t, y in zip(self.targets, self.inputs, strict=True)])
        width, classes = self.inputs[0].shape[1], self.targets[0].shape[1]
        flops = [
            matmul_flops(width, y.shape[0], width) + matmul_flops(classes, y.shape[0], width)
            for y in self.inputs
        ]
        setup = [a + b for a, b in zip(flops, extra_flops, strict=True)]
        return LayerProblem(grams, crosses, regularizer, setup)

    def evaluate(
        self,
        layer: int,
        solution: LayerSolution,
        network: LayerNetwork,
        started: float,
        iterations: int,
        previous: LayerRows | None,
    ) -> tuple[LayerRecord, LayerRows]:
        """This layer's record and the per-node rows it was made from. A crashed node
        keeps its ``previous`` rows (the network it had) and is left out of the
        consensus distance."""
        outputs = solution.outputs
        rows = self.measure(solution, network.counters)
        crashed = sorted(network.crashed)
        if crashed:
            if previous is None:
                raise ValueError("nodes crashed before the first layer; nothing to keep")
            rows = _frozen(rows, previous, crashed)
            live = [node for node in range(outputs.shape[0]) if node not in network.crashed]
            outputs = outputs[live]
        record = layer_record(
            layer,
            rows,
            width=outputs.shape[2],
            admm_iterations=iterations,
            outputs=outputs,
            wall_seconds=time.perf_counter() - started,
            virtual_seconds=network.virtual_seconds,
        )
        return record, rows

    def measure(self, solution: LayerSolution, counters: MessageCounters) -> LayerRows:
        """Each node's test accuracy and loss, training accuracy and squared residual
        on its shard, message counts and what solving the layer took."""
        outputs = solution.outputs
        train_accuracy, test_accuracy, test_loss = [], [], []
        residuals, targets = [], []
        for node, output in enumerate(outputs):
            estimate = self.inputs[node] @ output.T
            residuals.append(float((self.targets[node] - estimate).square().sum()))
            targets.append(float(self.targets[node].square().sum()))
            train_accuracy.append(_accuracy(estimate, self.labels[node]))
            test_estimate = self.test_inputs[node] @ output.T
            test_accuracy.append(_accuracy(test_estimate, self.test_labels))
            test_target = one_hot(self.test_labels, output.shape[0])
            test_loss.append(float((test_estimate - test_target).square().sum(1).mean()))
        return LayerRows(
            test_accuracy=test_accuracy,
            test_loss=test_loss,
            events=counters.events_per_agent.tolist(),
            messages=counters.messages_per_agent.tolist(),
            bytes=counters.bytes_per_agent.tolist(),
            train_accuracy=train_accuracy,
            train_residual=residuals,
            train_target=targets,
            steps=list(solution.steps),
            rounds=list(solution.rounds),
            residual=list(solution.residual),
            converged=list(solution.converged),
        )


def _frozen(rows: LayerRows, previous: LayerRows, crashed: list[int]) -> LayerRows:
    """``rows`` with each crashed node's measurements as they were in ``previous``, and
    no work done this layer (its message counts stay as they are)."""
    fields = {}
    for name in (
        "test_accuracy",
        "test_loss",
        "train_accuracy",
        "train_residual",
        "train_target",
        "residual",
        "converged",
    ):
        values = getattr(rows, name)
        if values is None:
            continue
        values = list(values)
        for node in crashed:
            values[node] = getattr(previous, name)[node]
        fields[name] = values
    fields["steps"] = [0 if node in crashed else s for node, s in enumerate(rows.steps)]
    fields["rounds"] = [0 if node in crashed else r for node, r in enumerate(rows.rounds)]
    return replace(rows, **fields)


def _solve(
    state: _LayerState,
    solver: LayerSolver,
    regularizer: Regularizer,
    network: LayerNetwork,
    extra_flops: list[float],
) -> LayerSolution:
    problem = state.problem(regularizer, extra_flops)
    try:
        solution = solver.solve(problem, network)
    except torch.linalg.LinAlgError:
        solution = None
    if solution is None or not bool(torch.isfinite(solution.outputs).all()):
        raise RunFailed(
            "the layer problem diverged (non-finite output matrices); lower algorithm.mu, "
            "or raise algorithm.gossip_rounds for dssfn"
        )
    return solution


def _layer_after(
    state: _LayerState, outputs: torch.Tensor, solving: _Solving, layer: int
) -> tuple[_LayerState, LayerSolution, int]:
    """Layer ``layer``, after the one whose output matrices are ``outputs``: grown node
    by node where the config grows (SSFN's ``grow``), else of ``config.nodes`` random
    nodes; its features, its solution and the iterations it took."""
    config = solving.config
    if isinstance(config, SsfnConfig) and config.grow:
        return _grow_layer(state, outputs, solving, config, layer)
    return _next_layer(state, outputs, solving, layer)


def _next_layer(
    state: _LayerState,
    outputs: torch.Tensor,
    solving: _Solving,
    layer: int,
    nodes: int | None = None,
) -> tuple[_LayerState, LayerSolution, int]:
    """The next layer with ``nodes`` random nodes (``config.nodes`` by default): its
    features, its solution and the most iterations a node took."""
    nodes = solving.config.nodes if nodes is None else nodes
    network = solving.network
    network.begin_layer(layer)
    previous = state.inputs[0].shape[1]
    weights = random_weights(solving.seed, layer, nodes, previous)
    next_state = state.advanced(outputs, weights)
    width = next_state.inputs[0].shape[1]
    feature_flops = [matmul_flops(y.shape[0], previous, width) for y in state.inputs]
    ball = Ball(solving.radius)
    solution = _solve(next_state, solving.solver, ball, network, feature_flops)
    return next_state, solution, max(solution.steps)


def _grow_layer(
    state: _LayerState,
    outputs: torch.Tensor,
    solving: _Solving,
    config: SsfnConfig,
    layer: int,
) -> tuple[_LayerState, LayerSolution, int]:
    """From zero random nodes, add ``node_step`` at a time while the training NME
    improves enough: the best layer's features and solution, and the iterations of
    every layer tried (``config`` is ``solving.config``, growing)."""
    best_state, best, used = _next_layer(state, outputs, solving, layer, nodes=0)
    best_error = _train_nme(best_state, best.outputs)
    count = 0
    while count < config.nodes:
        count = min(count + config.node_step, config.nodes)
        candidate_state, candidate, iterations = _next_layer(
            state, outputs, solving, layer, nodes=count
        )
        used += iterations
        error = _train_nme(candidate_state, candidate.outputs)
        if _improvement(best_error, error) < config.node_tolerance:
            break
        best_error, best_state, best = error, candidate_state, candidate
    return best_state, best, used


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


def layerwise_extra(
    trained: LayerwiseResult, records: list[LayerRecord], graph: Graph, decentralized: bool
) -> OutcomeExtra:
    """What a layer-wise run adds to its summary, in either runtime, from its layers'
    records (of every node): sizes, training figures, and per layer what solving it
    took and whether it converged before its cap."""
    last = records[-1]
    return {
        "layers": trained.sizes,
        "train_accuracy": accuracy_summary(last["train_accuracy"]),
        "train_nme": last["train_nme"],
        "admm_iterations": trained.admm_iterations,
        "mean_degree": float(graph.degrees().double().mean()) if decentralized else 0.0,
        "layer_reports": [layer_report(record) for record in records],
        "unconverged_layers": [record["layer"] for record in records if not record["converged"]],
    }


def layer_report(record: LayerRecord) -> LayerReport:
    """One layer's line of the summary: what solving it took, and how close it got."""
    return {
        "layer": record["layer"],
        "width": record["width"],
        "solver_steps": record["solver_steps"],
        "gossip_rounds": record["gossip_rounds"],
        "residual": record["residual"],
        "relative_consensus_distance": record["relative_consensus_distance"],
        "converged": record["converged"],
    }


def cap_warnings(summary: RunSummary, config: LayerwiseConfig) -> list[str]:
    """One line per layer that stopped at its cap before meeting the tolerance."""
    lines = []
    for report in summary.get("layer_reports", []):
        if not report["converged"]:
            lines.append(
                f"layer {report['layer']} stopped at its cap of {config.admm_iterations} "
                f"(residual {report['residual']:.2g} > tolerance {config.tolerance:g}); "
                "raise algorithm.admm_iterations or algorithm.tolerance"
            )
    return lines
