"""A parameter-server run keeps its model where the run computes and reads nothing back.

The server's model is put on PyTorch's ``meta`` device, which holds shapes and no
numbers: an operation mixing a meta tensor with a CPU one fails as it would on a GPU,
and so does any read of a number (``item``, ``bool``, ``tolist``). A rule that passes
here keeps x, its optimizer state, the gradients in flight and AsySG-incon's stored
versions on a GPU, with no wait for the device between evaluations.
"""

from __future__ import annotations

import pytest
import torch

from murmur.algorithms.asysg import AsysgConfig, AsysgInconConfig, SyncPsConfig
from murmur.algorithms.param_server import ParameterServer
from murmur.training.checkpoint import _on_cpu

STEP = {"a": 0.5, "d2": 0.0}
RULES = [
    AsysgConfig(workers=3, group=2, **STEP),
    AsysgConfig(workers=2, optimizer="adam", **STEP),
    SyncPsConfig(workers=2, optimizer="nesterov", **STEP),
    AsysgInconConfig(workers=2, max_delay=3, **STEP),
]


def _server(config, device: str) -> ParameterServer:
    return ParameterServer(
        config,
        torch.zeros(5, device=device),
        100,
        1000,
        batch_size=4,
        reads=torch.Generator().manual_seed(3),
    )


@pytest.mark.parametrize("config", RULES, ids=lambda config: f"{config.name}-{config.optimizer}")
def test_the_rule_keeps_x_its_state_and_the_gradients_on_the_device_and_uploads_nothing_else(
    monkeypatch, config
):
    server = _server(config, "meta")
    uploads = []
    to = torch.Tensor.to

    def counted_to(self, *args, **kwargs):
        moved = to(self, *args, **kwargs)
        if self.device.type == "cpu" and moved.device.type == "meta":
            uploads.append((tuple(self.shape), self.dtype))
        return moved

    monkeypatch.setattr(torch.Tensor, "to", counted_to)
    for _ in range(6):
        model, read = server.read()
        assert model.device.type == "meta"
        for worker in range(server.workers):
            server.receive(worker, torch.empty(5, device="meta"), read)
    assert server.version > 0 and server.x.device.type == "meta"
    state = server.optimizer_state
    if state is not None:
        assert {value.device.type for value in state if value is not None} == {"meta"}
    # AsySG-incon's mixed read draws its choice on the CPU (the same choice on every
    # device) and sends it up unread, from the second read on (the first has one
    # version to read); nothing else goes up.
    expected = [((1, 5), torch.int64)] * 5 if config.name == "asysg-incon" else []
    assert uploads == expected


@pytest.mark.parametrize("config", RULES, ids=lambda config: f"{config.name}-{config.optimizer}")
def test_a_checkpoint_saved_on_the_cpu_resumes_onto_the_servers_device(config):
    """What the checkpoint holds (on the CPU) goes back where x lives: the pending
    gradients and the stored versions too."""
    saved = _server(config, "cpu")
    for version in range(3):
        saved.receive(0, torch.full((5,), float(version + 1)), saved.version)
    if saved.group > 1 or saved.synchronous:
        saved.receive(0, torch.ones(5), saved.version)  # one gradient left pending
    state = _on_cpu(saved.state_dict())
    resumed = _server(config, "meta")
    resumed.load_state_dict(state)
    assert resumed.version == saved.version
    assert {gradient.device.type for _, gradient, _ in resumed.pending} <= {"meta"}
    assert len(resumed.pending) == len(saved.pending)
    assert {version.device.type for version in resumed.history} == {"meta"}
