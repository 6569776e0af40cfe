"""The consensus distance (1/N) sum_i ||x_i - x_bar||^2, against values worked out by hand."""

from __future__ import annotations

import pytest
import torch

from murmur.metrics.evaluation import consensus_distance


def test_three_agents_mean_squared_distance_to_their_average():
    """x_bar = [2, 2]; squared distances 8, 4 and 20 average to 32 / 3."""
    params = torch.tensor([[0.0, 0.0], [2.0, 0.0], [4.0, 6.0]])
    assert consensus_distance(params) == pytest.approx(32.0 / 3.0, rel=1e-6)


def test_the_average_is_over_agents_not_coordinates():
    """Rows equal, columns differ: agents agree, so the distance is 0."""
    params = torch.tensor([[1.0, -3.0, 5.0]] * 4)
    assert consensus_distance(params) == 0.0


def test_four_agents_in_float64():
    """x_bar = [0, 0, 1]; squared distances 9, 1, 5 and 5 (sum 20) over 4 agents: 5."""
    params = torch.tensor(
        [[3.0, 0.0, 1.0], [-1.0, 0.0, 1.0], [-1.0, 2.0, 1.0], [-1.0, -2.0, 1.0]],
        dtype=torch.float64,
    )
    assert consensus_distance(params) == 5.0


def test_a_single_agent_is_at_consensus():
    """One agent is its own average."""
    assert consensus_distance(torch.tensor([[1.5, -2.0, 7.0]])) == 0.0


def test_large_stacks_are_measured_in_blocks_of_rows_to_the_same_distance(monkeypatch):
    from murmur.metrics import evaluation

    params = torch.randn(7, 30, generator=torch.Generator().manual_seed(0))
    whole = evaluation.consensus_distance(params)
    monkeypatch.setattr(evaluation, "CONSENSUS_BLOCK", 60)  # 210 values: blocks of 2 rows
    blocked = evaluation.consensus_distance(params)
    exact = float((params.double() - params.double().mean(0)).pow(2).sum() / 7)
    assert blocked == pytest.approx(exact, rel=1e-6)
    assert whole == pytest.approx(exact, rel=1e-6)
