"""The memory estimate: parameter counts of the real models, and runs that cannot fit."""

from __future__ import annotations

import pytest
import torch

from murmur.config import build_config
from murmur.data import DATASETS
from murmur.errors import UsageError
from murmur.models import build_model
from murmur.training.memory import (
    EDGE_BYTES,
    check_memory,
    estimate_memory,
    machine_memory,
    parameter_count,
)
from murmur.training.plan import plan
from murmur.training.setup import prepare
from murmur.units import human_bytes


def config(**sections):
    return build_config({"algorithm": {"name": "dsgd"}, **sections})


def planned_estimate(run, info):
    """The estimate of ``run`` with its plan's transport."""
    return estimate_memory(run, info, per_edge=plan(run).transport == "per-edge")


@pytest.mark.parametrize(
    "dataset, model",
    [
        ("mnist5k", {"name": "mlp", "hidden": [100]}),
        ("mnist5k", {"name": "mlp", "hidden": [30, 20, 10]}),
        ("blobs", {"name": "linear"}),
        ("synthetic", {"name": "mlp", "hidden": [7]}),
        ("mnist5k", {"name": "cnn"}),
        ("digits", {"name": "cnn"}),
    ],
)
def test_parameter_count_is_that_of_the_built_model(dataset, model):
    run = config(data={"dataset": dataset}, model=model)
    info = DATASETS[dataset]
    module = build_model(run.model, info.features, max(info.classes, 1), seed=0)
    assert parameter_count(run, info) == sum(p.numel() for p in module.parameters())


def test_the_models_part_grows_with_agents_times_parameters():
    info = DATASETS["mnist5k"]
    small = estimate_memory(config(topology={"agents": 10}), info).parts["the models"]
    large = estimate_memory(config(topology={"agents": 40}), info).parts["the models"]
    assert large == 4 * small
    assert small >= 10 * parameter_count(config(), info) * 4  # at least one float32 copy


def test_lost_messages_count_a_mailbox_per_directed_edge_and_agent():
    info = DATASETS["mnist5k"]
    lossless = planned_estimate(config(topology={"agents": 10}), info)
    lossy = planned_estimate(config(topology={"agents": 10}, faults={"drop": 0.1}), info)
    assert "the mailboxes of faulty or varying links" not in lossless.parts
    mailboxes = lossy.parts.pop("the mailboxes of faulty or varying links")
    edges = 20  # the estimate's bound for a ring, torus or star: 2 x agents
    assert mailboxes == (10 + 2 * edges) * 2 * parameter_count(config(), info) * 4
    assert lossy.parts == lossless.parts


def test_a_varying_graph_counts_a_mailbox_per_link_it_may_use():
    info = DATASETS["mnist5k"]
    size = 2 * parameter_count(config(), info) * 4

    def detsgrad(**sections):
        return build_config({"algorithm": {"name": "detsgrad"}, **sections})

    matching = planned_estimate(detsgrad(topology={"agents": 10, "varying": "matching"}), info)
    assert matching.parts["the mailboxes of faulty or varying links"] == (10 + 2 * 20) * size
    resampled = {"agents": 10, "graph": "erdos_renyi", "varying": "resample"}
    every_pair = planned_estimate(detsgrad(topology=resampled), info)
    assert every_pair.parts["the mailboxes of faulty or varying links"] == (10 + 90) * size
    # DSGD sends every model every step: a varying graph without faults needs no mailbox.
    dsgd = planned_estimate(config(topology={"agents": 10, "varying": "matching"}), info)
    assert "the mailboxes of faulty or varying links" not in dsgd.parts


def test_a_complete_graph_counts_its_edges():
    info = DATASETS["mnist5k"]
    ring = estimate_memory(config(topology={"agents": 1000}), info)
    complete = estimate_memory(config(topology={"agents": 1000, "graph": "complete"}), info)
    per_agent = 6 * 1000 * 8
    assert ring.parts["the graph's edge lists"] == EDGE_BYTES * 2 * 1000 + per_agent
    edges = 1000 * 999 // 2
    assert complete.parts["the graph's edge lists"] == EDGE_BYTES * edges + per_agent


@pytest.mark.parametrize("graph", ["ring", "exponential", "torus"])
def test_a_large_graph_with_a_closed_form_spectrum_counts_no_agents_by_agents_matrix(graph):
    info = DATASETS["letter"]
    sizes = [
        sum(estimate_memory(config(topology={"agents": n, "graph": graph}), info).parts.values())
        for n in (10_000, 100_000)
    ]
    assert (
        "the graph's dense matrices"
        not in estimate_memory(config(topology={"agents": 100_000, "graph": graph}), info).parts
    )
    assert sizes[1] < 11 * sizes[0]  # linear in the agents, not quadratic


def test_compressed_gossip_and_a_small_random_graph_count_their_dense_matrices():
    info = DATASETS["mnist5k"]
    random = {"agents": 500, "graph": "erdos_renyi", "probability": 0.1}
    assert "the graph's dense matrices" in estimate_memory(config(topology=random), info).parts
    choco = build_config({"algorithm": {"name": "choco-sgd"}, "topology": {"agents": 500}})
    assert estimate_memory(choco, info).parts["the graph's dense matrices"] == 3 * 500 * 500 * 8


def test_a_run_that_fits_is_accepted_and_one_that_cannot_is_refused():
    info = DATASETS["mnist5k"]
    assert check_memory(estimate_memory(config(), info), config()).total < machine_memory()
    with pytest.raises(UsageError) as error:
        huge = config(model={"hidden": [10**11]})
        check_memory(estimate_memory(huge, info), huge)
    message = str(error.value)
    assert message.startswith("this run needs about ")
    assert f"but this machine has {human_bytes(machine_memory())}" in message
    assert "a smaller model.hidden" in message


def test_the_cnn_is_counted_by_its_parameters_and_layer_outputs():
    info = DATASETS["mnist5k"]
    run = config(model={"name": "cnn"})
    module = build_model(run.model, info.features, 10, seed=0)
    estimate = estimate_memory(run, info, module)
    mlp = estimate_memory(config(), info)
    assert estimate.parts["the models"] == 10 * 4 * 61706 * 4  # DSGD's four copies
    # Over 15,000 layer outputs a sample against the MLP's 894 units, for one agent at a
    # time on the CPU, for all 10 at once on a GPU.
    assert estimate.parts["the batches"] > 1.5 * mlp.parts["the batches"]
    on_gpu = estimate_memory(config(model={"name": "cnn"}, run={"device": "cuda"}), info, module)
    assert on_gpu.parts["the batches"] == 10 * estimate.parts["the batches"]
    assert on_gpu.parts["the batches"] > 15 * mlp.parts["the batches"]


def test_the_stacked_initial_parameters_hold_one_row_not_one_per_agent():
    setup = prepare(config(topology={"agents": 12}))
    initial = setup.initial
    assert initial.shape[0] == 12
    assert initial.untyped_storage().nbytes() == initial.shape[1] * initial.element_size()
    assert torch.equal(initial[11], initial[0])
