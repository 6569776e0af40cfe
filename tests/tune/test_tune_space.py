"""What each algorithm tunes, over which range, as the registry declares it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from murmur.config import load_experiment
from murmur.errors import UsageError
from murmur.registry import ALGORITHMS, OPTIMIZER_STEPS, SearchRange
from murmur.tune.space import (
    RangeSetting,
    check_ends,
    narrowed,
    parse_range,
    search_space,
    with_point,
)

TUNED = {
    "dsgd": ["a"],
    "detsgrad": ["a", "v0"],
    "detsgrad-gt": ["a", "v0", "vy"],
    "choco-sgd": ["a", "gamma"],
    "sparq-sgd": ["a", "gamma"],
    "beer": ["a", "gamma"],
    "motef": ["a", "gamma", "lam"],
    "lead": ["a", "gamma"],
    "centralized": ["a"],
    "asysg-con": ["a"],
    "sync-ps": ["a"],
    "asysg-incon": ["a"],
    "hogwild": ["a"],
}


def test_each_algorithm_declares_the_keys_of_its_steps():
    declared = {
        name: [searched.key for searched in member.capabilities.tuned.allowed]
        for name, member in ALGORITHMS.items()
        if member.capabilities.tuned.allowed
    }
    assert declared == TUNED
    for name in ("ssfn", "dssfn", "dssfn-async"):
        assert "takes no gradient steps" in ALGORITHMS[name].capabilities.tuned.why_not


@pytest.mark.parametrize("preset", sorted(TUNED))
def test_every_point_of_every_declared_grid_is_a_config_the_algorithm_takes(preset):
    config = load_experiment(preset).runs[0][1]
    space = search_space(config)
    check_ends(config, space)
    for searched in space:
        grid = searched.grid()
        assert grid[0] == searched.low and grid[-1] == searched.high
        assert list(grid) == sorted(set(grid)) and len(grid) == searched.points
        for value in grid:
            assert (
                getattr(with_point(config, {searched.key: value}).algorithm, searched.key) == value
            )


def test_a_local_optimizer_searches_its_own_step_range():
    plain = load_experiment("detsgrad").runs[0][1]
    adam = load_experiment("detsgrad", ["algorithm.optimizer=adam"]).runs[0][1]
    assert search_space(adam)[0] == OPTIMIZER_STEPS["adam"]
    assert search_space(adam)[1:] == search_space(plain)[1:]
    assert OPTIMIZER_STEPS["adam"].grid() == (1e-5, 1e-4, 1e-3, 1e-2)
    momentum = load_experiment("dsgd", ["algorithm.optimizer=momentum"]).runs[0][1]
    assert search_space(momentum) == (OPTIMIZER_STEPS["momentum"],)


def test_a_grid_is_evenly_spaced_on_its_scale_to_three_digits():
    assert SearchRange("a", 0.01, 1.0, points=5).grid() == (0.01, 0.0316, 0.1, 0.316, 1.0)
    assert SearchRange("m", 0.0, 0.9, points=4, log=False).grid() == (0.0, 0.3, 0.6, 0.9)
    with pytest.raises(ValueError, match="not a log scale"):
        SearchRange("a", 0.0, 1.0)
    with pytest.raises(ValueError, match="2 points or more"):
        SearchRange("a", 0.1, 1.0, points=1)


def test_a_range_given_keeps_the_scale_and_the_number_of_grid_points():
    space = search_space(load_experiment("detsgrad").runs[0][1])
    given = narrowed(space, [parse_range("algorithm.a=0.05:0.8")])
    assert given[0] == SearchRange("a", 0.05, 0.8, points=5)
    assert given[0].grid() == (0.05, 0.1, 0.2, 0.4, 0.8)
    assert given[1] == space[1]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("algorithm.a=1:1", "is empty"),
        ("algorithm.a=2:1", "is empty"),
        ("algorithm.a=", "must look like"),
        ("algorithm.a=x:1", "must look like"),
        ("algorithm.a=0.1:inf", "finite numbers"),
        ("run.iterations=1:5", "keys of [algorithm] only"),
        ("a=1:2", "keys of [algorithm] only"),
    ],
)
def test_a_bad_range_is_a_usage_error(text, words):
    with pytest.raises(UsageError, match=words.replace("[", r"\[").replace("]", r"\]")):
        parse_range(text)


def test_a_range_parses():
    assert parse_range(" algorithm.v0 = 1e-1:5") == RangeSetting("v0", 0.1, 5.0)
    assert str(RangeSetting("a", 0.01, 0.5)) == "algorithm.a=0.01:0.5"


GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "tuning.md"


def _shown(searched: SearchRange) -> tuple[str, str]:
    """A range and its grid as the guide's tables write them."""
    grid = ", ".join(f"{value:g}" for value in searched.grid())
    return f"{searched.low:g} to {searched.high:g}", grid


def _guide_rows(first: str) -> set[tuple[str, ...]]:
    """The rows of the guide's table whose header starts with ``first``, one per name of
    its first cell."""
    text = GUIDE.read_text()
    table = re.search(rf"^\| {first} \|.*?\n\n", text, flags=re.S | re.M)
    assert table is not None
    rows = set()
    for line in table.group(0).splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        for name in re.findall(r"`([\w-]+)`", cells[0]):
            rows.add((name, *(cell.strip("`") for cell in cells[1:])))
    return rows


def test_the_guide_shows_each_algorithms_ranges_as_the_registry_declares_them():
    declared = {
        (name, searched.key, *_shown(searched))
        for name, member in ALGORITHMS.items()
        for searched in member.capabilities.tuned.allowed
    }
    assert _guide_rows("algorithm") == declared
    optimizers = {(name, *_shown(searched)) for name, searched in OPTIMIZER_STEPS.items()}
    assert _guide_rows("`algorithm.optimizer`") == optimizers
