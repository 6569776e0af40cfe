"""A simulator step stays on the device its state lives on and reads nothing back.

The state is put on PyTorch's ``meta`` device, which holds shapes and no numbers:
an operation mixing a meta tensor with a CPU one fails as it would on a GPU, and so
does any read of a number (``item``, ``bool``, ``tolist``, ``nonzero``). A step that
passes here runs on a GPU with no per-step wait for the device. The numbers of the
path a GPU takes are checked on the CPU against the indexed path's.
"""

from __future__ import annotations

import pytest
import torch

from murmur import load_experiment
from murmur.experiment import run
from murmur.sim import runners
from murmur.sim import transport as sim_transport
from murmur.sim.lossy import LossyTransport
from murmur.sim.transport import InMemoryTransport
from murmur.training.runs import check_run

SMALL = ["topology.agents=6", "run.iterations=3", "data.partition=iid"]

CASES = [
    ("dsgd", []),
    ("dsgd", ["algorithm.order=atc", "algorithm.weights=metropolis"]),
    ("dsgd", ["algorithm.optimizer=adam", "algorithm.weight_decay=0.01"]),
    ("detsgrad", []),
    ("detsgrad", ["algorithm.optimizer=nesterov"]),
    ("detsgrad", ["algorithm.compress=topk"]),
    ("detsgrad", ["algorithm.compress=randk"]),
    ("detsgrad", ["algorithm.compress=qsgd"]),
    ("detsgrad", ["algorithm.compress=lowrank"]),
    ("detsgrad", ["algorithm.trigger=layer", "algorithm.compress=sign"]),
    ("detsgrad-gt", []),
    ("detsgrad-gt", ["algorithm.compress=topk"]),
    ("choco-sgd", []),
    ("choco-sgd", ["algorithm.compress=qsgd", "algorithm.gamma=0.3"]),  # no gossip probe
    ("sparq-sgd", []),
    ("beer", ["algorithm.compress=sign", "algorithm.gamma=0.3"]),
    ("centralized", []),
]


@pytest.mark.parametrize(("preset", "settings"), CASES, ids=lambda case: str(case))
def test_a_step_keeps_state_values_and_counters_on_the_device_uploads_and_reads_nothing(
    monkeypatch, preset, settings
):
    ((_, config),) = load_experiment(preset, SMALL + settings).runs
    setup = check_run(config)
    algorithm = setup.algorithm
    initial = setup.initial.to("meta")
    transport = InMemoryTransport(setup.graph, algorithm.initial_sent(initial))
    state = algorithm.init(initial)
    uploads = []
    to = torch.Tensor.to

    def counted_to(self, *args, **kwargs):
        moved = to(self, *args, **kwargs)
        if self.device.type == "cpu" and moved.device.type == "meta":
            uploads.append(tuple(self.shape))
        return moved

    monkeypatch.setattr(torch.Tensor, "to", counted_to)
    for iteration in range(3):
        if iteration == 1:  # what the first step copies over once is kept
            uploads.clear()
        state = algorithm.step(state, torch.empty_like(initial), iteration, transport)
    assert uploads == []  # the random draws of randk, qsgd and lowrank are computed there
    assert algorithm.params(state).device.type == "meta"
    assert transport.sent.device.type == "meta"
    counters = transport.counters
    assert {counters.events_per_agent.device.type, counters.bytes_per_agent.device.type} == {"meta"}


@pytest.mark.parametrize(
    ("preset", "settings", "segments"),
    [
        ("detsgrad", [], 1),
        ("detsgrad", ["algorithm.trigger=layer", "algorithm.compress=topk"], 4),
        ("choco-sgd", ["algorithm.compress=randk", "algorithm.gamma=0.3"], 1),
    ],
    ids=lambda case: str(case),
)
def test_writing_rows_through_a_mask_gives_the_indexed_writes_numbers(
    monkeypatch, preset, settings, segments
):
    """The masked row writes a GPU takes (no read of the mask) against the CPU's indexed
    ones: the same summary, bit for bit."""
    common = ["topology.agents=8", "run.iterations=30", "run.eval_every=10", "data.partition=iid"]

    def summary() -> dict:
        ((_, config),) = load_experiment(preset, common + settings).runs
        result = run(config).to_dict()
        return {key: value for key, value in result.items() if "second" not in key}

    indexed = summary()
    monkeypatch.setattr(sim_transport, "INDEXED_DEVICES", set())
    assert summary() == indexed
    if preset == "detsgrad":  # the masks left rows out
        assert 0 < indexed["events"] < 8 * 30 * segments


FAULTY = [
    ("dsgd", ["faults.drop=0.2"]),
    ("detsgrad", ["faults.drop=0.2", "faults.link_down=0.1"]),
    ("detsgrad", ["algorithm.compress=topk", "faults.drop=0.2"]),
    ("choco-sgd", ["faults.crashes=2", "faults.crash_at=1", "faults.drop=0.1"]),
    ("detsgrad-gt", ["faults.link_down=0.2"]),
    ("dsgd", ["faults.drop=0.1", "topology.varying=matching"]),
]


@pytest.mark.parametrize(("preset", "settings"), FAULTY, ids=lambda case: str(case))
def test_a_faulty_step_keeps_the_mailboxes_on_the_device_and_reads_nothing_of_them(
    preset, settings
):
    """Lost messages, down links, crashes and varying graphs: the schedule draws its
    masks on the CPU, and the per-edge mailboxes, flags and counters stay on the device."""
    ((_, config),) = load_experiment(preset, SMALL + ["topology.graph=complete", *settings]).runs
    setup = check_run(config)
    initial = setup.initial.to("meta")
    schedule = runners._schedule(setup)
    transport = runners._transport(setup, setup.algorithm, schedule, initial)
    assert isinstance(transport, LossyTransport)
    algorithm = runners._under_schedule(setup.algorithm, schedule, transport, "own")
    state = algorithm.init(initial)
    for iteration in range(3):
        state = algorithm.step(state, torch.empty_like(initial), iteration, transport)
    assert algorithm.params(state).device.type == "meta"
    assert {transport.store.device.type, transport.synced.device.type} == {"meta"}
    assert transport.counters.messages_per_agent.device.type == "meta"


@pytest.mark.parametrize(
    "settings",
    [
        ["algorithm.name=detsgrad", "faults.drop=0.2", "faults.link_down=0.1"],
        ["algorithm.name=detsgrad", "algorithm.compress=topk", "faults.drop=0.2"],
        ["algorithm.name=detsgrad", "faults.drop=0.3", "faults.resend=true"],
        ["algorithm.name=choco-sgd", "faults.drop=0.3", "faults.resend=true"],
        ["algorithm.name=dsgd", "faults.crashes=2", "faults.crash_at=10", "faults.drop=0.1"],
    ],
    ids=lambda settings: " ".join(settings),
)
def test_faulty_mailboxes_written_through_masks_give_the_indexed_numbers(monkeypatch, settings):
    common = ["topology.agents=8", "run.iterations=30", "run.eval_every=10", "data.partition=iid"]

    def summary() -> dict:
        ((_, config),) = load_experiment(settings[0].split("=")[1], common + settings[1:]).runs
        result = run(config).to_dict()
        return {key: value for key, value in result.items() if "second" not in key}

    indexed = summary()
    monkeypatch.setattr(sim_transport, "INDEXED_DEVICES", set())
    assert summary() == indexed
    assert indexed["dropped_messages"] > 0 or indexed.get("crashed_agents", 0) > 0
