"""The field's standard networks of ``model.name``: ResNet-20, VGG-11, LEAF's FEMNIST
CNN and Shakespeare LSTM. Their sizes and shapes, their refusals, and their training on
the agent axis against plain PyTorch loops over the same batches."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from torch import nn
from torch.func import functional_call
from torch.nn import functional

from murmur import load_model
from murmur.cli import main
from murmur.config import build_config
from murmur.data import from_arrays
from murmur.data.batches import BatchSampler
from murmur.errors import UsageError
from murmur.experiment import run
from murmur.models import build_model
from murmur.models import stacked as stacked_module
from murmur.models.networks import layer_outputs
from murmur.models.stacked import StackedModel, takes_agents_in_turn
from murmur.sections import ModelConfig
from murmur.seeding import derive_seed

CIFAR, MNIST = 3072, 784


def _count(module: nn.Module) -> int:
    return sum(parameter.numel() for parameter in module.parameters())


def _accuracy(outputs: torch.Tensor, y: torch.Tensor) -> float:
    return float((outputs.argmax(dim=1) == y).double().mean())


@pytest.mark.parametrize(
    ("config", "features", "outputs", "parameters"),
    [
        (ModelConfig(name="resnet20"), CIFAR, 10, 272_474),
        (ModelConfig(name="resnet20", norm="batch"), CIFAR, 10, 272_474),
        (ModelConfig(name="resnet20", norm="none"), CIFAR, 10, 270_906),
        (ModelConfig(name="resnet20"), MNIST, 10, 272_186),  # 1 input channel, not 3
        (ModelConfig(name="vgg11"), CIFAR, 10, 9_750_922),
        (ModelConfig(name="vgg11", norm="group"), CIFAR, 10, 9_756_426),
        (ModelConfig(name="femnist-cnn"), MNIST, 62, 6_603_710),
        (ModelConfig(name="char-lstm"), 80, 80, 819_920),
        (ModelConfig(name="cnn"), CIFAR, 10, 62_006),
    ],
    ids=lambda value: getattr(value, "name", None) or str(value),
)
def test_each_network_has_its_parameter_count(config, features, outputs, parameters):
    assert _count(build_model(config, features, outputs, seed=0)) == parameters


def test_the_counts_are_the_published_ones():
    # He et al. 2016: ResNet-20 0.27 M (its option A shortcuts add nothing; the 1x1
    # convolutions add 2,752); LEAF: FEMNIST CNN 6.6 M; Lin et al. 2021: VGG-11 9.75 M.
    assert _count(build_model(ModelConfig(name="resnet20"), CIFAR, 10, 0)) == pytest.approx(
        0.27e6, rel=0.02
    )
    assert _count(build_model(ModelConfig(name="femnist-cnn"), MNIST, 62, 0)) == pytest.approx(
        6.6e6, rel=0.01
    )
    assert _count(build_model(ModelConfig(name="vgg11"), CIFAR, 10, 0)) == pytest.approx(
        9.75e6, rel=0.01
    )


def test_resnet20_is_three_stages_of_three_blocks_with_group_norm_of_two_groups():
    module = build_model(ModelConfig(name="resnet20"), CIFAR, 10, seed=0)
    convolutions = [layer for layer in module.modules() if isinstance(layer, nn.Conv2d)]
    kernels = [layer.kernel_size[0] for layer in convolutions]
    assert kernels.count(3) == 19 and kernels.count(1) == 2  # 1 + 18 in blocks; 2 shortcuts
    strided = [
        (c.in_channels, c.out_channels, c.kernel_size[0])
        for c in convolutions
        if c.stride == (2, 2)
    ]
    assert strided == [(16, 32, 3), (16, 32, 1), (32, 64, 3), (32, 64, 1)]
    norms = [layer for layer in module.modules() if isinstance(layer, nn.GroupNorm)]
    assert len(norms) == 21 and {norm.num_groups for norm in norms} == {2}
    assert not list(module.buffers())
    batch = build_model(ModelConfig(name="resnet20", norm="batch"), CIFAR, 10, seed=0)
    assert sum(isinstance(layer, nn.BatchNorm2d) for layer in batch.modules()) == 21
    four = build_model(ModelConfig(name="resnet20", groups=4), CIFAR, 10, seed=0)
    assert {layer.num_groups for layer in four.modules() if isinstance(layer, nn.GroupNorm)} == {4}


def test_vgg11_has_eight_convolutions_no_norm_and_the_dropout_classifier():
    module = build_model(ModelConfig(name="vgg11"), CIFAR, 10, seed=0)
    widths = [layer.out_channels for layer in module if isinstance(layer, nn.Conv2d)]
    assert widths == [64, 128, 256, 256, 512, 512, 512, 512]
    assert sum(isinstance(layer, nn.MaxPool2d) for layer in module) == 5
    assert not any(isinstance(layer, (nn.GroupNorm, nn.BatchNorm2d)) for layer in module)
    linears = [
        (layer.in_features, layer.out_features) for layer in module if isinstance(layer, nn.Linear)
    ]
    assert linears == [(512, 512), (512, 512), (512, 10)]
    assert StackedModel(module, "classification").random  # dropout, drawn per agent


@pytest.mark.parametrize(
    ("name", "features"),
    [
        ("resnet20", CIFAR),
        ("resnet20", MNIST),
        ("vgg11", CIFAR),
        ("femnist-cnn", MNIST),
        ("femnist-cnn", CIFAR),
        ("cnn", CIFAR),
        ("char-lstm", 80),
    ],
)
def test_each_network_reads_flat_rows_and_gives_class_scores(name, features):
    module = build_model(ModelConfig(name=name), features, 7, seed=0).eval()
    rows = (
        torch.randint(0, 7, (3, features)).float()
        if name == "char-lstm"
        else torch.randn(3, features)
    )
    assert module(rows).shape == (3, 7)


@pytest.mark.parametrize(
    ("name", "features", "supported"),
    [
        ("vgg11", MNIST, "vgg11 supports cifar10, cifar100 (3x32x32)"),
        (
            "resnet20",
            100,
            "resnet20 supports mnist5k, mnist, fashion-mnist, femnist (1x28x28), cifar",
        ),
        (
            "femnist-cnn",
            3073,
            "femnist-cnn supports mnist5k, mnist, fashion-mnist, femnist (1x28x28), ",
        ),
    ],
)
def test_images_of_another_shape_are_refused_in_one_line(name, features, supported):
    with pytest.raises(UsageError, match=f"a dataset with {features} features") as error:
        build_model(ModelConfig(name=name), features, 10, seed=0)
    assert supported in str(error.value) and "\n" not in str(error.value)


def test_norm_and_groups_are_checked():
    with pytest.raises(UsageError, match="model.norm is for model.name = resnet20 or vgg11"):
        ModelConfig(name="cnn", norm="batch")
    with pytest.raises(UsageError, match="model.groups must be at least 1"):
        ModelConfig(name="resnet20", groups=0)
    with pytest.raises(UsageError, match="model.groups = 3 does not divide the 16 channels"):
        build_model(ModelConfig(name="resnet20", groups=3), CIFAR, 10, seed=0)
    build_model(ModelConfig(name="resnet20", norm="none", groups=3), CIFAR, 10, seed=0)
    assert ModelConfig(name="vgg11").normalization == "none"
    assert ModelConfig(name="resnet20").normalization == "group"


@pytest.mark.parametrize(
    ("name", "features", "on_gpu"),
    [
        ("resnet20", CIFAR, False),
        ("vgg11", CIFAR, True),
        ("char-lstm", 20, True),
        ("mlp", 6, False),
    ],
)
def test_which_networks_go_agent_by_agent(name, features, on_gpu):
    """Convolutions on the CPU, dropout (VGG-11) and recurrent layers anywhere; the
    memory estimate counts one agent's activations for them."""
    module = build_model(ModelConfig(name=name), features, 10, 0)
    stacked = StackedModel(module, "classification")
    in_turn = stacked.per_agent or stacked.random
    assert in_turn == takes_agents_in_turn(module) == (name != "mlp")
    assert takes_agents_in_turn(module, "cuda") == on_gpu
    assert stacked.unbatched == (name == "char-lstm")


def test_the_lstm_outputs_count_as_activations():
    module = build_model(ModelConfig(name="char-lstm"), 20, 10, 0)
    assert layer_outputs(module, 20) > 20 * 256  # 20 steps of 256 units, at least


@pytest.mark.parametrize("norm", ["group", "batch"])
def test_resnet20_gradients_vmapped_as_on_a_gpu_equal_those_agent_by_agent(norm):
    # In float64: batch norm over 3 samples, 19 layers deep, rounds the two paths' float32
    # gradients apart by up to 0.2 %.
    module = build_model(ModelConfig(name="resnet20", norm=norm), CIFAR, 10, seed=0).double()
    one_by_one = StackedModel(copy.deepcopy(module), "classification")
    vmapped = StackedModel(copy.deepcopy(module), "classification")
    vmapped.per_agent = False  # the path of run.device = "cuda"
    generator = torch.Generator().manual_seed(1)
    noise = torch.randn(2, one_by_one.layout.total, generator=generator, dtype=torch.float64)
    flat = one_by_one.initial() + 0.01 * noise
    x = torch.randn(2, 3, CIFAR, generator=generator, dtype=torch.float64)
    y = torch.randint(0, 10, (2, 3), generator=generator)
    losses, grads = one_by_one.loss_and_grad(flat, x, y)
    expected_losses, expected_grads = vmapped.loss_and_grad(flat, x, y)
    torch.testing.assert_close(losses, expected_losses)
    torch.testing.assert_close(grads, expected_grads)
    if norm == "batch":
        assert one_by_one.statistics is not None and vmapped.statistics is not None
        torch.testing.assert_close(one_by_one.statistics.flat(), vmapped.statistics.flat())


def _batches(name: str, features: int, classes: int, agents: int, batch: int, steps: int):
    """``steps`` batches of ``agents`` x ``batch`` rows: CIFAR-shaped noise, or sequences
    of character indices."""
    generator = torch.Generator().manual_seed(7)
    for _ in range(steps):
        if name == "char-lstm":
            x = torch.randint(0, classes, (agents, batch, features), generator=generator).float()
        else:
            x = torch.randn(agents, batch, features, generator=generator)
        yield x, torch.randint(0, classes, (agents, batch), generator=generator)


@pytest.mark.parametrize(
    ("config", "features", "classes"),
    [
        (ModelConfig(name="resnet20"), CIFAR, 10),
        (ModelConfig(name="resnet20", norm="batch"), CIFAR, 10),
        (ModelConfig(name="char-lstm"), 12, 9),
    ],
    ids=["resnet20-group", "resnet20-batch", "char-lstm"],
)
def test_agents_trained_on_the_agent_axis_equal_separate_torch_models(config, features, classes):
    agents, batch, steps, step = 2, 3, 20, 0.05
    module = build_model(config, features, classes, seed=3)
    stacked = StackedModel(copy.deepcopy(module), "classification")
    generator = torch.Generator().manual_seed(4)
    flat = stacked.initial() + 0.01 * torch.randn(agents, stacked.layout.total, generator=generator)
    plains = []
    for row in flat:
        plain = copy.deepcopy(module)
        torch.nn.utils.vector_to_parameters(row.clone(), plain.parameters())  # not a view
        plains.append((plain, torch.optim.SGD(plain.parameters(), lr=step)))
    for x, y in _batches(config.name, features, classes, agents, batch, steps):
        _, grads = stacked.loss_and_grad(flat, x, y)
        flat.add_(grads, alpha=-step)  # as torch.optim.SGD rounds it
        for agent, (plain, optimizer) in enumerate(plains):
            optimizer.zero_grad()
            functional.cross_entropy(plain(x[agent]), y[agent]).backward()
            optimizer.step()
    for agent, (plain, _) in enumerate(plains):
        expected = torch.nn.utils.parameters_to_vector(plain.parameters())
        torch.testing.assert_close(flat[agent], expected, rtol=1e-4, atol=1e-5)
        for name, buffer in plain.named_buffers():  # batch norm's running statistics
            assert stacked.statistics is not None and stacked.statistics.per_agent is not None
            torch.testing.assert_close(stacked.statistics.per_agent[name][agent], buffer)
    x, y = next(_batches(config.name, features, classes, 1, 5, 1))
    accuracy, loss = stacked.evaluate(flat, x[0], y[0])
    for agent, (plain, _) in enumerate(plains):
        with torch.no_grad():
            outputs = plain.eval()(x[0])
        torch.testing.assert_close(loss[agent], functional.cross_entropy(outputs, y[0]))
        assert accuracy is not None
        assert float(accuracy[agent]) == pytest.approx(_accuracy(outputs, y[0]))


def test_lstm_evaluation_in_slices_equals_each_agent_alone(monkeypatch):
    module = build_model(ModelConfig(name="char-lstm"), 10, 6, seed=1)
    stacked = StackedModel(module, "classification")
    generator = torch.Generator().manual_seed(5)
    flat = stacked.initial() + 0.1 * torch.randn(3, stacked.layout.total, generator=generator)
    x = torch.randint(0, 6, (14, 10), generator=generator).float()
    y = torch.randint(0, 6, (14,), generator=generator)
    # Room for 2 agents on 3 samples per call: agent chunks of 2 and slices of 1 sample.
    monkeypatch.setattr(stacked_module, "EVAL_FLOATS", 3 * stacked._activations(x))
    accuracy, loss = stacked.evaluate(flat, x, y, chunk=2)
    for agent, values in enumerate(flat):
        params = {name: value[0] for name, value in stacked.layout.unflatten(values[None]).items()}
        outputs = functional_call(module, params, (x,))
        torch.testing.assert_close(loss[agent], functional.cross_entropy(outputs, y))
        assert accuracy is not None
        assert float(accuracy[agent]) == pytest.approx(_accuracy(outputs, y))


def test_a_module_vmap_cannot_batch_is_evaluated_agent_by_agent():
    class Recurrent(nn.Module):  # an LSTM inside a module of the user's own
        def __init__(self) -> None:
            super().__init__()
            self.cell = nn.LSTM(1, 4, batch_first=True)
            self.out = nn.Linear(4, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.out(self.cell(x.unsqueeze(-1))[0][:, -1])

    module = Recurrent()
    stacked = StackedModel(module, "classification")
    stacked.unbatched = stacked.per_agent = False  # as for a layer murmur does not know
    flat = stacked.initial().repeat(2, 1)
    x, y = torch.randn(5, 6), torch.randint(0, 3, (5,))
    _, loss = stacked.evaluate(flat, x, y)
    assert stacked.unbatched and stacked.per_agent
    with torch.no_grad():
        expected = functional.cross_entropy(module(x), y)
    torch.testing.assert_close(loss, expected.expand(2))


def test_gradients_go_agent_by_agent_once_vmap_finds_no_batching_rule(monkeypatch):
    stacked = StackedModel(nn.Sequential(nn.Linear(4, 3), nn.Tanh()), "classification")

    def unbatched(*_args: object) -> None:
        raise RuntimeError("Batching rule not implemented for aten::an_op_of_its_own.")

    monkeypatch.setattr(stacked, "_grad", unbatched)
    flat = stacked.initial().repeat(2, 1)
    x, y = torch.randn(2, 5, 4), torch.randint(0, 3, (2, 5))
    losses, _ = stacked.loss_and_grad(flat, x, y)
    assert stacked.unbatched and stacked.per_agent
    with torch.no_grad():
        expected = [functional.cross_entropy(stacked.module(x[row]), y[row]) for row in range(2)]
    torch.testing.assert_close(losses, torch.stack(expected))


def _centralized(name: str, features: int, classes: int, steps: int):
    """A centralized SGD config of ``name`` for 2 agents' batches of 2, and its data."""
    generator = torch.Generator().manual_seed(8)
    if name == "char-lstm":
        x = torch.randint(0, classes, (20, features), generator=generator).float()
    else:
        x = torch.randn(20, features, generator=generator)
    y = torch.arange(20) % classes
    data = from_arrays(x[:14], y[:14], x[14:], y[14:], num_classes=classes)
    config = build_config(
        {
            "run": {"iterations": steps, "eval_every": steps},
            "data": {"dataset": "arrays", "batch_size": 2},
            "model": {"name": name},
            "topology": {"agents": 2},
            "algorithm": {"name": "centralized", "a": 0.05, "eps": 0.0},
        }
    )
    return config, data


@pytest.mark.parametrize(
    ("name", "features", "classes"), [("resnet20", CIFAR, 3), ("char-lstm", 15, 5)]
)
def test_a_centralized_run_equals_a_plain_torch_loop_over_its_batches(name, features, classes):
    steps = 20
    config, data = _centralized(name, features, classes, steps)
    result = run(config, data=data)
    # The same network, initial weights and batches: one learner drawing agents x batch
    # samples a step from the whole training set, trained with torch.optim.SGD.
    module = build_model(config.model, features, classes, derive_seed(config.run.seed, "model"))
    optimizer = torch.optim.SGD(module.parameters(), lr=0.05)
    sampler = BatchSampler([torch.arange(14)], 2 * 2, seed=config.run.seed)
    for _ in range(steps):
        indices = sampler.next()[0]
        optimizer.zero_grad()
        functional.cross_entropy(module(data.x_train[indices]), data.y_train[indices]).backward()
        optimizer.step()
    expected = torch.nn.utils.parameters_to_vector(module.parameters())
    assert result.parameters is not None
    torch.testing.assert_close(result.parameters[0], expected, rtol=1e-4, atol=1e-5)


def test_resnet20_runs_from_the_command_line_on_a_file_of_cifar_images(tmp_path, capsys):
    rng = np.random.default_rng(0)
    path = tmp_path / "tiny-cifar.npz"
    np.savez(
        path,
        x_train=rng.normal(size=(24, CIFAR)).astype(np.float32),
        y_train=np.arange(24) % 3,
        x_test=rng.normal(size=(6, CIFAR)).astype(np.float32),
        y_test=np.arange(6) % 3,
    )
    settings = [
        "data.dataset=file",
        f"data.path={path}",
        "data.batch_size=2",
        "data.partition=iid",
        "model.name=resnet20",
        "topology.agents=4",
        "run.iterations=3",
        "run.eval_every=3",
    ]
    argv = ["run", "dsgd", *(arg for item in settings for arg in ("--set", item))]
    code = main([*argv, "--quiet", "--out", str(tmp_path / "run")])
    assert code == 0, capsys.readouterr().err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "finished"
    assert len(summary["accuracy"]["per_agent"]) == 4
    assert 0.0 <= summary["model"]["test_accuracy"] <= 1.0
    assert summary["model"]["parameters"] == 272_474 - 7 * 65  # 3 classes, not 10
    average = load_model(tmp_path / "run")  # rebuilt from config.toml
    assert isinstance(average[1], nn.Conv2d) and _count(average) == 272_474 - 7 * 65


def test_char_lstm_refuses_inputs_that_are_no_character_indices(tmp_path, capsys):
    import numpy as np

    from murmur.cli import main

    x = np.tile(np.arange(4, dtype=np.float32), (8, 3))  # indices 0..3 of 4 classes
    y = np.arange(8) % 4
    for name, bad in (("index", 4.0), ("fraction", 1.5)):
        x_bad = x.copy()
        x_bad[2, 5] = bad
        path = tmp_path / f"{name}.npz"
        np.savez(path, x_train=x_bad, y_train=y, x_test=x[:2], y_test=y[:2])
        argv = ["run", "dsgd", "--check"]
        for setting in (
            "data.dataset=file",
            f"data.path={path}",
            "data.partition=iid",
            "model.name=char-lstm",
            "topology.agents=2",
        ):
            argv += ["--set", setting]
        assert main(argv) == 2
        error = capsys.readouterr().err.strip()
        assert f"x_train[2, 5] is {bad:g}" in error and "\n" not in error
    np.savez(tmp_path / "good.npz", x_train=x, y_train=y, x_test=x[:2], y_test=y[:2])
    assert main([*argv, "--set", f"data.path={tmp_path / 'good.npz'}"]) == 0
