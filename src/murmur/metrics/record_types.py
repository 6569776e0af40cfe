"""The shapes of what a run writes: the lines of metrics.jsonl (evaluation records)
and summary.json, as TypedDicts.

A key the report reads carries its :class:`~murmur.metrics.fields.Field` as
``Annotated`` metadata; :mod:`murmur.reporting.run_schema` checks run folders by
these, a required key where the type requires it, any other where present.

This module does not use ``from __future__ import annotations``: a TypedDict
learns which keys are ``Required`` / ``NotRequired`` only from evaluated
annotations.
"""

import math
from typing import Annotated, Literal, Required, TypedDict

from murmur.metrics.fields import (
    COUNT,
    FINITE,
    FRACTION,
    INTEGER,
    NUMBER,
    POSITIVE,
    SECONDS,
    TEXT,
    Field,
    is_number,
    list_of,
    nullable,
    object_of,
)
from murmur.portable import MachineSummary

__all__ = [
    "AccuracySummary",
    "BestAccuracy",
    "EvaluationRecord",
    "FailedSummary",
    "FaultCounts",
    "LastKAccuracy",
    "LayerRecord",
    "LayerReport",
    "MessageColumns",
    "ModelColumns",
    "ModelSummary",
    "RunSummary",
    "ServerRecord",
    "SgdRecord",
    "SingleProcess",
    "FullExchange",
    "Staleness",
    "StopSummary",
    "SummaryExtra",
    "TestColumns",
    "ValidationBest",
    "ValidationColumns",
]

_FRACTIONS = nullable(list_of(FRACTION))


class AccuracySummary(TypedDict):
    """Accuracies over agents: mean, min, max and the per-agent list (all None for a
    regression task)."""

    mean: Annotated[float | None, nullable(FRACTION)]
    min: Annotated[float | None, nullable(FRACTION)]
    max: Annotated[float | None, nullable(FRACTION)]
    per_agent: Annotated[list[float] | None, _FRACTIONS]


class Staleness(TypedDict):
    """A parameter server's applied gradients: mean and max staleness, and the count
    of each staleness 0, 1, ..."""

    mean: Annotated[float, SECONDS]
    max: Annotated[int, COUNT]
    histogram: Annotated[list[int], list_of(COUNT)]


class SingleProcess(TypedDict):
    """Hogwild's comparison run with one process."""

    samples_per_second: Annotated[float, SECONDS]
    accuracy: Annotated[float | None, nullable(FRACTION)]


class FullExchange(TypedDict):
    """What DSGD sends on a run's graph in the run's iterations: every agent its whole
    model to each neighbour at every iteration. The baseline of the "vs DSGD" columns
    where a comparison has no DSGD run of the same set-up."""

    events: Annotated[int, COUNT]
    """Iterations x agents: one broadcast by each agent at each iteration."""
    messages: Annotated[int, COUNT]
    """Iterations x directed links."""
    bytes: Annotated[int, COUNT]
    """Messages x the bytes of one model (its numbers, at their size)."""


class FaultCounts(TypedDict, total=False):
    """What runs under ``[faults]`` count, in their summary and in every record; each
    only where its fault can happen."""

    dropped_messages: Annotated[int, COUNT]
    down_links: Annotated[int, COUNT]
    down_link_iterations: Annotated[int, COUNT]
    crashed_agents: Annotated[int, COUNT]
    lost_gradients: Annotated[int, COUNT]
    live_accuracy_mean: Annotated[float | None, nullable(FRACTION)]
    live_accuracy_min: Annotated[float | None, nullable(FRACTION)]


class TestColumns(TypedDict):
    """The test-set part of every record: per-agent accuracy and loss, and the
    accuracy's mean, min and max over agents."""

    test_accuracy: list[float] | None
    test_loss: list[float]
    accuracy_mean: float | None
    accuracy_min: float | None
    accuracy_max: float | None


class ValidationColumns(TypedDict, total=False):
    """The validation-set part of a record, where the run holds a validation split out
    (``data.validation``, ``data.validation_path``): per-agent accuracy (None for
    regression) and loss, of the same agents as ``test_accuracy``."""

    validation_accuracy: list[float] | None
    validation_loss: list[float]


class ModelColumns(TypedDict):
    """The average model's part of a mini-batch run's record: the test accuracy (None
    for regression) and loss of the mean of the agents' parameter rows, the model
    ``model.pt`` holds at the end (the one model of a server or Hogwild run)."""

    model_accuracy: float | None
    model_loss: float


class MessageColumns(TypedDict):
    """The message counts of every record, cumulative: all agents together, and the
    events (sends) per agent."""

    events: int
    messages: int
    bytes: int
    events_per_agent: list[int]


class _RecordFields(TypedDict, total=False):
    iteration: Required[Annotated[int, COUNT]]
    layer: Annotated[int, COUNT]
    """Layer-wise records: the layer (also their ``iteration``)."""
    accuracy_mean: Annotated[float | None, nullable(FRACTION)]
    accuracy_min: Annotated[float | None, nullable(FRACTION)]
    accuracy_max: Annotated[float | None, nullable(FRACTION)]
    test_accuracy: Annotated[list[float] | None, _FRACTIONS]
    events: Annotated[int, COUNT]
    messages: Annotated[int, COUNT]
    bytes: Annotated[int, COUNT]
    events_per_agent: Annotated[list[int], list_of(COUNT)]
    test_loss: list[float]
    validation_accuracy: Annotated[list[float] | None, _FRACTIONS]
    """Where the run holds a validation split out (:class:`ValidationColumns`)."""
    validation_loss: Annotated[list[float], list_of(nullable(NUMBER))]
    """Its loss per agent (null in the file where it is not finite)."""
    measured_agents: Annotated[list[int], list_of(COUNT)]
    """The agents ``test_accuracy`` and ``test_loss`` (and the validation columns) are of,
    in that order, where the run measures a sample of its agents (``run.eval_agents``);
    absent: every agent."""
    wall_seconds: float
    virtual_seconds: float
    """The simulator's clock; distributed runs and Hogwild have none."""
    consensus_distance: float
    model_accuracy: Annotated[float | None, nullable(FRACTION)]
    """Mini-batch runs: the average model's test accuracy (:class:`ModelColumns`)."""
    model_loss: Annotated[float, nullable(NUMBER)]
    """Its test loss (null in the file where it is not finite)."""


class EvaluationRecord(_RecordFields, FaultCounts, total=False):
    """One line of metrics.jsonl, as the report reads it: its ``iteration``, and what
    the producers below write. Every producer writes the test and message columns,
    ``wall_seconds`` and ``consensus_distance``; the simulator adds its clock and,
    under ``[faults]``, the fault counts."""


class SgdRecord(EvaluationRecord, total=False):
    """A mini-batch run's record (:func:`murmur.training.reducer.sgd_record`), in
    every runtime, Hogwild's included; with the average model's ``model_accuracy`` and
    ``model_loss`` (:class:`ModelColumns`), which a server's record has too."""

    samples: Required[int]
    train_loss: Required[float | None]
    """Mean training loss since the last evaluation; None before the first step."""


class ServerRecord(EvaluationRecord, total=False):
    """A parameter server's record of its one model."""

    samples: Required[int]
    train_loss: Required[float]

    train_accuracy: Required[float | None]
    staleness_mean: Required[float]
    gradient_norm_squared: float
    """Where the run asks for it (``gradient_norm``)."""


class LayerRecord(EvaluationRecord, total=False):
    """A layer-wise run's record of one layer
    (:func:`murmur.training.reducer.layer_record`)."""

    width: Required[int]
    admm_iterations: Required[int]
    train_accuracy: Required[list[float] | None]
    train_accuracy_mean: Required[float | None]
    train_nme: Required[float]
    relative_consensus_distance: Required[float]
    solver_steps: Required[int]
    gossip_rounds: Required[int]
    residual: Required[float]
    converged: Required[bool]


STEPS = Field(
    "an object of finite numbers",
    lambda v: isinstance(v, dict) and all(is_number(x) and math.isfinite(x) for x in v.values()),
)
ACCURACY = object_of(AccuracySummary)


class _FinishedFields(TypedDict, total=False):
    name: Required[Annotated[str, TEXT]]
    preset: Required[Annotated[str, TEXT]]
    algorithm: Required[Annotated[str, TEXT]]
    dataset: Required[Annotated[str, TEXT]]
    agents: Required[Annotated[int, POSITIVE]]
    topology: Required[Annotated[str, TEXT]]
    iterations: Required[Annotated[int, COUNT]]
    seed: Required[Annotated[int, INTEGER]]
    accuracy: Required[Annotated[AccuracySummary, ACCURACY]]
    test_loss: Required[Annotated[float | None, nullable(NUMBER)]]
    events: Required[Annotated[int, COUNT]]
    events_per_agent: Required[Annotated[list[int], list_of(COUNT)]]
    messages: Required[Annotated[int, COUNT]]
    bytes: Required[Annotated[int, COUNT]]
    communication_saving: Required[Annotated[float | None, nullable(FINITE)]]
    consensus_distance: Required[Annotated[float | None, nullable(NUMBER)]]
    wall_seconds: Required[Annotated[float, SECONDS]]
    train_seconds: Required[Annotated[float, SECONDS]]
    samples: Required[Annotated[int, COUNT]]
    samples_per_second: Required[Annotated[float, SECONDS]]
    run_dir: Required[str | None]
    """Not read by the report, which uses the folder it reads."""


class ModelSummary(TypedDict):
    """What ``summary.json`` says of the model a run leaves (its ``"model"`` entry)."""

    file: Annotated[str | None, nullable(TEXT)]
    """``model.pt`` where it was written (None: the run had no folder)."""
    agents: Annotated[int, POSITIVE]
    """Rows averaged: the agents, or 1 (the shared model of a server or Hogwild run)."""
    parameters: Annotated[int, POSITIVE]
    features: Annotated[int, POSITIVE]
    outputs: Annotated[int, POSITIVE]
    test_accuracy: Annotated[float | None, nullable(FRACTION)]
    """The average model's accuracy on the test split (None for regression)."""
    test_loss: Annotated[float, nullable(NUMBER)]
    """Its cross-entropy, or mean squared error, on the test split (null in the file
    where it is not finite: a run stopped as diverged)."""


class LastKAccuracy(TypedDict):
    """The mean of the last ``k`` evaluations' accuracy mean, min and max over agents."""

    k: Annotated[int, POSITIVE]
    """The evaluations averaged: ``run.last_k``, or all of them where the run made fewer."""
    mean: Annotated[float, FRACTION]
    min: Annotated[float, FRACTION]
    max: Annotated[float, FRACTION]


class BestAccuracy(TypedDict):
    """The evaluation of the highest accuracy mean over agents (the first, on ties): its
    iteration (layer, for layer-wise runs) and accuracy mean, min and max."""

    iteration: Annotated[int, COUNT]
    mean: Annotated[float, FRACTION]
    min: Annotated[float, FRACTION]
    max: Annotated[float, FRACTION]


class ValidationBest(BestAccuracy):
    """The evaluation of the highest validation accuracy mean over agents (the first, on
    ties), and the test accuracy mean it had: the iteration validation chooses, and
    what to report of it."""

    test_mean: Annotated[float | None, nullable(FRACTION)]


class _ExtraFields(TypedDict, total=False):
    virtual_seconds: Annotated[float, SECONDS]
    measured_agents: Annotated[list[int], list_of(COUNT)]
    """The agents the accuracy is of, where the run measures a sample of its agents
    (``run.eval_agents``); absent: every agent."""
    layers: Annotated[list[int], list_of(POSITIVE)]
    train_accuracy: Annotated[AccuracySummary, ACCURACY]
    mean_degree: Annotated[float, SECONDS]
    workers: Annotated[int, POSITIVE]
    staleness: Annotated[Staleness, object_of(Staleness)]
    target_loss: Annotated[float | None, nullable(SECONDS)]
    iterations_to_target: Annotated[int | None, nullable(COUNT)]
    virtual_seconds_to_target: Annotated[float | None, nullable(SECONDS)]
    wall_seconds_to_target: Annotated[float | None, nullable(SECONDS)]
    failed_agents: Annotated[list[int], list_of(COUNT)]
    failed_workers: Annotated[list[int], list_of(COUNT)]
    single_process: Annotated[SingleProcess, object_of(SingleProcess)]
    full_exchange: Annotated[FullExchange, object_of(FullExchange)]
    """Decentralized SGD on a fixed graph: what DSGD would send in the same iterations."""
    speedup: Annotated[float, SECONDS]
    steps: Annotated[dict[str, float], STEPS]
    """Every SGD algorithm's chosen step sizes for the run's graph."""
    mixing: Annotated[str, TEXT]
    """Decentralized SGD: the mixing matrix its agents average with."""
    mixing_per_graph: Annotated[str, TEXT]
    """A time-varying topology: what each graph mixes with, where ``steps`` (chosen for
    the run's graph) do not say it."""
    compile_fallback: Annotated[str, TEXT]
    """A run of ``run.compile`` whose compiled step failed to build or disagreed with
    the eager one on its machine, and so stepped eagerly: why."""
    model: Annotated[ModelSummary, object_of(ModelSummary)]
    """Mini-batch runs: the average model they leave (``model.pt``) and its test scores."""
    accuracy_last_k: Annotated[LastKAccuracy, object_of(LastKAccuracy)]
    """Classification runs: the mean accuracy of the last ``run.last_k`` evaluations."""
    accuracy_best: Annotated[BestAccuracy, object_of(BestAccuracy)]
    """Classification runs: the evaluation of the highest mean accuracy."""
    validation_accuracy: Annotated[AccuracySummary, ACCURACY]
    """Runs with a validation split: its accuracy over agents at the last evaluation
    (all None for regression)."""
    validation_loss: Annotated[float | None, nullable(NUMBER)]
    """Its loss at the last evaluation, mean over agents."""
    validation_last_k: Annotated[LastKAccuracy, object_of(LastKAccuracy)]
    """Classification runs with a validation split: ``accuracy_last_k`` of its accuracy."""
    validation_best: Annotated[ValidationBest, object_of(ValidationBest)]
    """Classification runs with a validation split: its best evaluation."""
    machine: Annotated[MachineSummary, object_of(MachineSummary)]
    """The torch, CPU kernels, BLAS and threads the run computed with (murmur.portable)."""


class LayerReport(TypedDict):
    """One layer's line of a layer-wise summary: what solving it took."""

    layer: int
    width: int
    solver_steps: int
    gossip_rounds: int
    residual: float
    relative_consensus_distance: float
    converged: bool


class SummaryExtra(_ExtraFields, FaultCounts, total=False):
    """What a runtime adds to its run's summary (``Outcome.extra``): the fields the
    report reads above, and these of each family and runtime."""

    train_nme: float
    admm_iterations: int
    layer_reports: list[LayerReport]
    unconverged_layers: list[int]
    """Layer-wise runs."""
    group: int
    train_loss: float | None
    server_messages: int
    """Parameter servers."""
    runtime: Literal["distributed"]
    world_size: int
    ranks: list[int]
    agents_per_rank: int
    messages_per_agent: list[int]
    bytes_per_agent: list[int]
    control_messages: int
    control_messages_per_agent: list[int]
    rejected_per_agent: list[int]
    failures: dict[str, str]
    """Distributed runs: per failed rank (or worker), why."""
    worker: int
    """A distributed parameter server's worker: which it is."""


class StopSummary(TypedDict):
    """Why a rule stopped a run early (its summary's ``stopped``): the rule's name
    ("chance", "non-finite", ...), the iteration and one line saying why."""

    rule: Annotated[str, TEXT]
    iteration: Annotated[int, COUNT]
    reason: Annotated[str, TEXT]


class ToAccuracy(TypedDict, total=False):
    """What a run had spent when its mean test accuracy first reached a target
    (:mod:`murmur.reporting.to_target`): only ``accuracy`` where it never did."""

    accuracy: Required[float]
    """The target, a fraction."""
    iteration: int
    wall_seconds: float
    virtual_seconds: float
    bytes: int
    messages: int


class RunSummary(_FinishedFields, SummaryExtra, total=False):
    """summary.json of a finished run (:meth:`murmur.metrics.records.RunResult.to_dict`,
    with ``"status": "finished"`` in the file): every field of the result, and the
    algorithm-specific ones where a run wrote them (``virtual_seconds``, ``layers``,
    ``staleness``, ``failed_agents``, the fault counts, ...). A run that a rule stopped
    early (``"status": "diverged"`` or ``"collapsed"``) writes the same fields, of its
    last evaluation, and ``stopped``."""

    status: Literal["finished", "diverged", "collapsed"]
    stopped: Annotated[StopSummary, object_of(StopSummary)]
    to_accuracy: ToAccuracy
    """Not in summary.json: what a report adds, computed from the run's records."""


class FailedSummary(TypedDict, total=False):
    """summary.json of a run that stopped during training: the line saying why, and
    what it could say of its run."""

    status: Required[Literal["failed"]]
    error: Required[Annotated[str, TEXT]]
    name: Annotated[str, TEXT]
    preset: Annotated[str, TEXT]
    algorithm: Annotated[str, TEXT]
    dataset: Annotated[str, TEXT]
    seed: Annotated[int, INTEGER]
    evaluations: int
    """The evaluation records it wrote before it stopped."""
    wall_seconds: float
    run_dir: str
    """Not read by the report, which uses the folder it reads."""
