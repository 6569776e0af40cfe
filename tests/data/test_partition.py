import math

import pytest
import torch

from murmur.data import PARTITIONS, partition
from murmur.errors import UsageError


def _labels(classes: int = 10, per_class: int = 50, seed: int = 0) -> torch.Tensor:
    """Balanced class labels in a shuffled order."""
    ordered = torch.arange(classes).repeat_interleave(per_class)
    return ordered[torch.randperm(len(ordered), generator=torch.Generator().manual_seed(seed))]


def _assert_disjoint_nonempty(parts: list[torch.Tensor], samples: int) -> None:
    for part in parts:
        assert part.dtype == torch.int64 and part.ndim == 1
        assert part.numel() > 0
        assert 0 <= int(part.min()) and int(part.max()) < samples
    joined = torch.cat(parts)
    assert joined.unique().numel() == joined.numel(), "an index is given to two agents"


def _assert_covers(parts: list[torch.Tensor], samples: int) -> None:
    assert torch.equal(torch.cat(parts).sort().values, torch.arange(samples))


def _classes(labels: torch.Tensor, part: torch.Tensor) -> set[int]:
    return set(labels[part].tolist())


def _entropy(labels: torch.Tensor, part: torch.Tensor, classes: int) -> float:
    p = torch.bincount(labels[part], minlength=classes).double() / part.numel()
    p = p[p > 0]
    return float(-(p * p.log()).sum())


def test_schemes_are_named():
    assert PARTITIONS == ("iid", "labels", "dirichlet", "natural")


SEEDED = [scheme for scheme in PARTITIONS if scheme != "natural"]
"""The schemes that draw from the seed (``natural`` follows the writers)."""


# ---- iid ----------------------------------------------------------------------------------


@pytest.mark.parametrize("agents", [1, 3, 7, 499, 500])
def test_iid_is_a_balanced_disjoint_cover(agents):
    labels = _labels()
    parts = partition(labels, agents, "iid", seed=1)
    assert len(parts) == agents
    _assert_disjoint_nonempty(parts, 500)
    _assert_covers(parts, 500)
    sizes = [p.numel() for p in parts]
    assert max(sizes) - min(sizes) <= 1


def test_iid_mixes_the_samples():
    parts = partition(_labels(), 5, "iid", seed=0)
    assert not torch.equal(parts[0], torch.arange(100))  # not contiguous blocks


def test_iid_works_without_labels_for_regression():
    parts = partition(None, 4, "iid", num_samples=10, seed=0)
    _assert_covers(parts, 10)
    assert sorted(p.numel() for p in parts) == [2, 2, 3, 3]


@pytest.mark.parametrize("scheme", ["labels", "dirichlet"])
def test_regression_allows_only_iid(scheme):
    with pytest.raises(UsageError, match="data.partition=iid"):
        partition(None, 4, scheme, num_samples=10)


# ---- labels -------------------------------------------------------------------------------


def test_labels_one_digit_per_agent():
    labels = _labels()
    parts = partition(labels, 10, "labels", labels_per_agent=1, seed=3)
    _assert_disjoint_nonempty(parts, 500)
    _assert_covers(parts, 500)
    held = [_classes(labels, part) for part in parts]
    assert all(len(classes) == 1 for classes in held)
    assert set.union(*held) == set(range(10))  # each digit to exactly one agent
    assert all(part.numel() == 50 for part in parts)


def _expected_classes(agents: int, per_agent: int, classes: int, seed: int) -> list[set[int]]:
    order = torch.randperm(classes, generator=torch.Generator().manual_seed(seed)).tolist()
    return [{order[(i * per_agent + j) % classes] for j in range(per_agent)} for i in range(agents)]


@pytest.mark.parametrize(
    ("agents", "per_agent"),
    [(10, 1), (10, 2), (20, 1), (7, 3), (3, 2), (4, 1), (5, 10)],
)
def test_labels_gives_each_agent_its_round_robin_classes(agents, per_agent):
    labels = _labels()
    parts = partition(labels, agents, "labels", labels_per_agent=per_agent, seed=5)
    _assert_disjoint_nonempty(parts, 500)
    expected = _expected_classes(agents, per_agent, 10, seed=5)
    assert [_classes(labels, part) for part in parts] == expected
    held = set.union(*expected)
    used = torch.cat(parts)
    if agents * per_agent >= 10:
        _assert_covers(parts, 500)
    else:
        # classes nobody holds are left out; every sample of a held class is used
        assert held != set(range(10))
        assert used.numel() == 50 * len(held)
        assert set(labels[used].tolist()) == held


def test_labels_splits_each_class_evenly_among_its_holders():
    labels = _labels()
    parts = partition(labels, 20, "labels", labels_per_agent=1, seed=0)
    assert all(part.numel() == 25 for part in parts)  # each digit shared by two agents


def test_labels_passes_num_classes_through():
    labels = torch.tensor([0, 0, 1, 1, 2, 2])
    with pytest.raises(UsageError, match="class 3 has 0 training samples"):
        partition(labels, 4, "labels", num_classes=4, seed=0)


@pytest.mark.parametrize("per_agent", [0, -1, 11])
def test_labels_per_agent_out_of_range(per_agent):
    with pytest.raises(UsageError, match=f"data.labels_per_agent={per_agent}"):
        partition(_labels(), 10, "labels", labels_per_agent=per_agent)


def test_labels_class_smaller_than_its_holders():
    labels = torch.tensor([0] * 10 + [1] * 2)
    with pytest.raises(UsageError, match="class 1 has 2 training samples but 3 agents hold it"):
        partition(labels, 6, "labels", labels_per_agent=1)


# ---- dirichlet ----------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.1, 0.5, 100.0])
def test_dirichlet_is_a_disjoint_cover(alpha):
    labels = _labels()
    parts = partition(labels, 8, "dirichlet", alpha=alpha, seed=2)
    assert len(parts) == 8
    _assert_disjoint_nonempty(parts, 500)
    _assert_covers(parts, 500)


def test_dirichlet_small_alpha_skews_more_than_large():
    labels = _labels(per_class=200)

    def mean_entropy(alpha: float) -> float:
        parts = partition(labels, 10, "dirichlet", alpha=alpha, seed=0)
        return sum(_entropy(labels, part, 10) for part in parts) / len(parts)

    skewed, mild, near_iid = mean_entropy(0.1), mean_entropy(1.0), mean_entropy(1000.0)
    assert skewed < mild < near_iid
    assert skewed < 0.5 * math.log(10)
    assert near_iid > 0.95 * math.log(10)


@pytest.mark.parametrize("alpha", [0.0, -1.0, float("nan"), float("inf")])
def test_dirichlet_alpha_must_be_positive(alpha):
    with pytest.raises(UsageError, match="data.dirichlet_alpha"):
        partition(_labels(), 4, "dirichlet", alpha=alpha)


def test_dirichlet_gives_up_when_agents_stay_empty():
    labels = torch.tensor([0, 0, 1, 1, 2, 2])
    with pytest.raises(UsageError, match="raise data.dirichlet_alpha or lower topology.agents"):
        partition(labels, 6, "dirichlet", alpha=0.001, seed=0)


# ---- natural ------------------------------------------------------------------------------


def _writers(sizes: list[int], seed: int = 0) -> torch.Tensor:
    """Writer numbers of a training set whose writer w has ``sizes[w]`` samples, shuffled."""
    ordered = torch.arange(len(sizes)).repeat_interleave(torch.tensor(sizes))
    return ordered[torch.randperm(len(ordered), generator=torch.Generator().manual_seed(seed))]


def _writers_of(groups: torch.Tensor, parts: list[torch.Tensor]) -> list[list[int]]:
    return [sorted(set(groups[part].tolist())) for part in parts]


def test_natural_gives_one_writer_to_each_agent_in_writer_order():
    groups = _writers([3, 7, 1, 4])
    parts = partition(_labels(4, 15)[: len(groups)], 4, "natural", groups=groups)
    for writer, part in enumerate(parts):
        assert torch.equal(part, torch.nonzero(groups == writer).flatten())
    _assert_covers(parts, len(groups))


def test_natural_deals_writers_largest_first_to_the_agent_holding_fewest():
    groups = _writers([5, 1, 1, 1, 4, 2])
    parts = partition(None, 2, "natural", num_samples=len(groups), groups=groups)
    # 5 -> agent A, 4 -> B, 2 -> B (6), 1 -> A (6), 1 -> A (7), 1 -> B (7); A holds writer 0
    assert _writers_of(groups, parts) == [[0, 1, 2], [3, 4, 5]]
    assert [part.numel() for part in parts] == [7, 7]
    _assert_disjoint_nonempty(parts, len(groups))
    _assert_covers(parts, len(groups))
    for part in parts:
        assert torch.equal(part, part.sort().values)


@pytest.mark.parametrize("agents", [1, 3, 9, 30])
def test_natural_keeps_writers_whole_and_sizes_within_the_largest_writer(agents):
    sizes = [
        int(size)
        for size in torch.randint(1, 40, (30,), generator=torch.Generator().manual_seed(2))
    ]
    groups = _writers(sizes, seed=3)
    parts = partition(None, agents, "natural", num_samples=len(groups), groups=groups)
    held = _writers_of(groups, parts)
    assert sorted(writer for writers in held for writer in writers) == list(range(30))
    _assert_covers(parts, len(groups))
    counts = [part.numel() for part in parts]
    assert max(counts) - min(counts) <= max(sizes)
    assert [writers[0] for writers in held] == sorted(writers[0] for writers in held)


def test_natural_takes_writer_numbers_with_gaps_and_ignores_the_seed():
    groups = torch.tensor([7, 2, 7, 9, 2, 2])  # writers 2, 7, 9 (e.g. after a validation split)
    parts = partition(None, 3, "natural", num_samples=6, groups=groups, seed=1)
    assert [part.tolist() for part in parts] == [[1, 4, 5], [0, 2], [3]]
    again = partition(None, 3, "natural", num_samples=6, groups=groups, seed=2)
    assert all(torch.equal(a, b) for a, b in zip(parts, again, strict=True))


def test_natural_refuses_fewer_writers_than_agents():
    with pytest.raises(UsageError, match="topology.agents=4 exceeds the 3 writers") as caught:
        partition(_labels(2, 5), 4, "natural", groups=_writers([4, 3, 3]))
    assert "use at most 3 agents" in str(caught.value)


def test_natural_refuses_a_dataset_without_writers_naming_those_with_some():
    with pytest.raises(UsageError, match="records no writers; only femnist, shakespeare do"):
        partition(_labels(), 4, "natural")


def test_natural_checks_the_groups_shape():
    with pytest.raises(ValueError, match=r"groups has shape \(3,\), expected \(500,\)"):
        partition(_labels(), 2, "natural", groups=torch.tensor([0, 1, 1]))


# ---- every scheme -------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", SEEDED)
def test_deterministic_for_a_seed_and_different_across_seeds(scheme):
    labels = _labels()
    kwargs = {"labels_per_agent": 2, "alpha": 0.5}
    first = partition(labels, 10, scheme, seed=7, **kwargs)
    again = partition(labels, 10, scheme, seed=7, **kwargs)
    other = partition(labels, 10, scheme, seed=8, **kwargs)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(
        a.shape == b.shape and torch.equal(a, b) for a, b in zip(first, other, strict=True)
    )


@pytest.mark.parametrize("scheme", PARTITIONS)
def test_too_many_agents(scheme):
    with pytest.raises(UsageError, match="topology.agents=501 exceeds the 500 training samples"):
        partition(_labels(), 501, scheme)


@pytest.mark.parametrize("agents", [0, -3])
def test_at_least_one_agent(agents):
    with pytest.raises(UsageError, match=f"topology.agents={agents} must be at least 1"):
        partition(_labels(), agents, "iid")


def test_unknown_scheme_lists_the_valid_ones():
    with pytest.raises(UsageError, match="data.partition='shards'.*iid, labels, dirichlet"):
        partition(_labels(), 4, "shards")
