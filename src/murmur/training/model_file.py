"""The trained model a run leaves in its folder, and how to load it back.

Every finished mini-batch run (synchronous SGD, a parameter server, Hogwild)
writes two files with ``torch.save``, plain tensors only, so that
``torch.load(path, weights_only=True)`` reads them and runs no pickled code:

- ``model.pt``: the ``state_dict`` of the consensus average of the agents' final
  models (the mean of their parameter rows; the one model of a server or
  Hogwild run), ready for ``module.load_state_dict``; a model with buffers
  (BatchNorm) holds the mean of the agents' running statistics, counts rounded;
- ``agents.pt``: every agent's final parameters, stacked: ``{name: tensor of shape
  (agents, *shape)}``, with the same names, and its own running statistics.

The run's ``summary.json`` says under ``"model"`` what the average model scores
on the test set, computed by calling the module on the whole test split once, as
a user does after :func:`load_model`, so that the figure comes back exactly.
Layer-wise (SSFN) runs build a network of random and solved layers that is not
a ``torch.nn.Module``; they write no model file.
"""

from __future__ import annotations

import copy
import json
import typing
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional

from murmur.config import load_experiment
from murmur.errors import UsageError
from murmur.metrics.record_types import ModelSummary
from murmur.metrics.stops import STOPPED
from murmur.models import build_model
from murmur.models.flat import ParamLayout
from murmur.models.statistics import AgentStatistics, Stacked

MODEL_FILE = "model.pt"
"""The average model's ``state_dict`` in the run folder."""
AGENTS_FILE = "agents.pt"
"""Every agent's parameters, stacked, in the run folder."""


def average_state(
    module: nn.Module, rows: torch.Tensor, statistics: Stacked | None = None
) -> dict[str, torch.Tensor]:
    """The ``state_dict`` of ``module``'s architecture whose parameters are the mean of
    ``rows`` ((agents, P) flat parameters, in ``module``'s parameter order), its buffers
    the mean of the agents' ``statistics`` (``{name: (agents, *shape)}``)."""
    layout = ParamLayout.of(module)
    mean = rows.detach().to(torch.float32).mean(dim=0, keepdim=True).cpu()
    state = {name: tensor[0].clone() for name, tensor in layout.unflatten(mean).items()}
    kept = AgentStatistics.of(module)
    if kept is not None and statistics:
        kept.load_state_dict(statistics)
        state.update(kept.mean())
    return state


def stacked_state(
    module: nn.Module, rows: torch.Tensor, statistics: Stacked | None = None
) -> dict[str, torch.Tensor]:
    """Every row of ``rows`` as named tensors, and every agent's ``statistics``:
    ``{name: (agents, *shape)}``."""
    rows = rows.cpu()
    # torch.save writes a storage once, however many views of it it is given: views of
    # rows that own their storage are saved without a copy of every agent's model.
    owned = rows.is_contiguous() and rows.untyped_storage().nbytes() == rows.nbytes
    views = ParamLayout.of(module).unflatten(rows)
    state = {name: tensor if owned else tensor.clone() for name, tensor in views.items()}
    state.update({name: tensor.cpu().clone() for name, tensor in (statistics or {}).items()})
    return state


def with_state(module: nn.Module, state: dict[str, torch.Tensor]) -> nn.Module:
    """A copy of ``module`` holding ``state`` (the module is left as it was)."""
    trained = copy.deepcopy(module).cpu()
    trained.load_state_dict(state)
    return trained.eval()


@torch.no_grad()
def test_scores(
    module: nn.Module, x: torch.Tensor, y: torch.Tensor, classification: bool
) -> tuple[float | None, float, int]:
    """``module``'s accuracy (None for regression) and loss on ``(x, y)``, from one
    forward call on all of ``x``, and the width of its outputs."""
    outputs = module(x.cpu())
    target = y.cpu()
    if not classification:
        return None, float(functional.mse_loss(outputs, target)), outputs.shape[-1]
    correct = (outputs.argmax(dim=-1) == target).to(torch.float64).mean()
    return float(correct), float(functional.cross_entropy(outputs, target)), outputs.shape[-1]


def write_model_files(
    folder: Path | None,
    module: nn.Module,
    rows: torch.Tensor,
    test: tuple[torch.Tensor, torch.Tensor],
    classification: bool,
    statistics: Stacked | None = None,
) -> ModelSummary:
    """Write ``model.pt`` and ``agents.pt`` for the final parameter ``rows`` (and, for a
    model with buffers, running ``statistics``) of a run of ``module``'s architecture
    into ``folder`` (None: write nothing); what the summary says of the average model."""
    average = average_state(module, rows, statistics)
    accuracy, loss, outputs = test_scores(with_state(module, average), *test, classification)
    if folder is not None:
        torch.save(average, folder / MODEL_FILE)
        torch.save(stacked_state(module, rows, statistics), folder / AGENTS_FILE)
    x_test = test[0]
    return {
        "file": MODEL_FILE if folder is not None else None,
        "agents": rows.shape[0],
        "parameters": rows.shape[1],
        "features": int(x_test[0].numel()),
        "outputs": outputs,
        "test_accuracy": accuracy,
        "test_loss": loss,
    }


def read_state(path: Path) -> dict[str, torch.Tensor]:
    """A ``state_dict`` file written by murmur (``model.pt``, ``agents.pt``)."""
    if not path.is_file():
        raise UsageError(
            f"{path.parent} has no {path.name}: only a finished mini-batch run writes one"
        )
    try:
        state = torch.load(path, weights_only=True)
    except Exception as error:
        raise UsageError(f"{path} is not a model file ({type(error).__name__})") from None
    if not isinstance(state, dict) or not all(
        isinstance(key, str) and isinstance(value, torch.Tensor) for key, value in state.items()
    ):
        raise UsageError(f"{path} is not a state_dict of named tensors")
    return state


def load_model(
    folder: str | Path, module: nn.Module | None = None, *, agent: int | None = None
) -> nn.Module:
    """The model the finished run in ``folder`` left: the average of its agents'
    models (``model.pt``), or agent ``agent``'s own (a row of ``agents.pt``).

    ``module``: the network to load it into (a copy is returned, ``module`` is left as
    it was); needed for runs of a module given to ``murmur.run(config, model=...)``
    (``model.name = "custom"``), otherwise the network ``model.name`` names is built
    from the run's ``config.toml``. The model is returned in evaluation mode.
    """
    run_dir = Path(folder)
    summary = _model_summary(run_dir)
    if module is None:
        module = _network(run_dir, summary)
    if agent is None:
        state = read_state(run_dir / MODEL_FILE)
    else:
        stacked = read_state(run_dir / AGENTS_FILE)
        if not 0 <= agent < summary["agents"]:
            raise UsageError(
                f"agent={agent}: the run in {run_dir} has agents 0..{summary['agents'] - 1}"
            )
        state = {name: tensor[agent] for name, tensor in stacked.items()}
    try:
        return with_state(module, state)
    except RuntimeError as error:
        raise UsageError(
            f"{run_dir / MODEL_FILE} does not fit the module given "
            f"({str(error).splitlines()[0]}); give a module of the run's architecture"
        ) from None


def _model_summary(run_dir: Path) -> ModelSummary:
    """The ``"model"`` entry of ``run_dir``'s summary.json."""
    path = run_dir / "summary.json"
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError):
        raise UsageError(f"{run_dir} holds no finished run (no readable summary.json)") from None
    if not isinstance(summary, dict) or summary.get("status") not in ("finished", *STOPPED):
        raise UsageError(f"{run_dir} holds no finished run: nothing to load")
    model = summary.get("model")
    if not isinstance(model, dict):
        raise UsageError(
            f"the run in {run_dir} left no model (only mini-batch runs write model.pt)"
        )
    return typing.cast(ModelSummary, model)


def _network(run_dir: Path, summary: ModelSummary) -> nn.Module:
    """The network the run's ``config.toml`` names, for the data shape it trained on."""
    config = load_experiment(str(run_dir / "config.toml")).runs[0][1]
    if config.model.name == "custom":
        raise UsageError(
            f"the run in {run_dir} trained a module given from Python (model.name = "
            '"custom"); pass that module: load_model(folder, module)'
        )
    return build_model(config.model, summary["features"], summary["outputs"], seed=0)
