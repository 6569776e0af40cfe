"""Split a training set among agents: one index tensor per agent.

Schemes (:data:`PARTITIONS`):

- ``iid``: a seeded permutation cut into ``agents`` parts whose sizes differ by
  at most one; every sample is used.
- ``labels``: every agent holds exactly ``labels_per_agent`` (k) distinct
  classes. Over a seeded permutation ``perm`` of the C classes, agent i holds
  ``perm[(i*k + j) % C]`` for j < k; each class's shuffled samples are split
  evenly among the agents that hold it. With ``agents * k >= C`` every sample
  is used; otherwise the classes nobody holds are left out.
- ``dirichlet``: for each class, proportions p ~ Dirichlet(alpha * 1_agents)
  cut the class's shuffled samples at the cumulative proportions; every sample
  is used. Small alpha gives each agent few classes, large alpha approaches iid.
  Draws that leave an agent empty are redrawn.
- ``natural``: each writer's (speaker's) samples stay together on one agent, for the
  sets that record writers (:attr:`~murmur.data.datasets.Dataset.groups`: femnist,
  shakespeare). With as many writers as agents, agent i holds the i-th writer in id
  order. With more writers, they are dealt by sample count: the writers, largest
  first (ties: first in id order), each to the agent holding the fewest samples so
  far (ties: the lowest agent), so that the agents' sizes come close (within the
  largest writer's samples); then the agents are numbered in the order of their first
  writer. Fewer writers than agents is refused. It uses no seed: the writers are the
  split.

Every scheme returns disjoint, sorted int64 index sets, each non-empty, and is
deterministic for a given ``seed``.
"""

from __future__ import annotations

import heapq
import math

import numpy as np
import torch

from murmur.data.datasets import DATASETS
from murmur.errors import UsageError

PARTITIONS: tuple[str, ...] = ("iid", "labels", "dirichlet", "natural")

DIRICHLET_DRAWS = 100
"""How many Dirichlet draws to try before giving up on giving every agent a sample."""


def partition(
    labels: torch.Tensor | None,
    agents: int,
    scheme: str,
    *,
    labels_per_agent: int = 1,
    alpha: float = 0.5,
    num_classes: int | None = None,
    seed: int = 0,
    num_samples: int | None = None,
    groups: torch.Tensor | None = None,
) -> list[torch.Tensor]:
    """Split the training set into ``agents`` disjoint, non-empty index sets.

    ``labels`` are the int64 class indices of the training samples, or ``None``
    for a regression set, in which case ``num_samples`` gives the training set
    size and only ``iid`` and ``natural`` are possible. ``num_classes`` defaults to
    ``labels.max() + 1``. ``groups``: each training sample's writer
    (:attr:`~murmur.data.datasets.Dataset.groups`), which ``natural`` splits by.
    """
    if scheme not in PARTITIONS:
        raise UsageError(
            f"data.partition={scheme!r} is not a partition scheme; choose one of: "
            f"{', '.join(PARTITIONS)}"
        )
    samples = _count_samples(labels, num_samples)
    check_agents(agents, samples)
    if scheme == "natural":
        return _by_writer(groups, agents, samples)
    generator = torch.Generator().manual_seed(seed)
    if scheme == "iid":
        order = torch.randperm(samples, generator=generator)
        return [part.sort().values for part in torch.tensor_split(order, agents)]

    if labels is None:
        raise UsageError(
            f"data.partition={scheme} needs class labels but this dataset is a regression "
            "problem; use data.partition=iid"
        )
    classes = _count_classes(labels, num_classes)
    if scheme == "labels":
        return _by_labels(labels, agents, labels_per_agent, classes, generator)
    return _by_dirichlet(labels, agents, alpha, classes, seed)


def check_agents(agents: int, samples: int) -> None:
    """Every agent needs at least one of the ``samples`` training samples."""
    if agents < 1:
        raise UsageError(f"topology.agents={agents} must be at least 1")
    if agents > samples:
        raise UsageError(
            f"topology.agents={agents} exceeds the {samples} training samples; every agent "
            "needs at least one, so use fewer agents"
        )


def check_writers(agents: int, writers: int) -> None:
    """``natural`` gives every agent at least one whole writer of the ``writers`` (0:
    the dataset records none)."""
    if writers == 0:
        raise _no_writers()
    if agents > writers:
        raise UsageError(
            f"topology.agents={agents} exceeds the {writers} writers of the training set; "
            f"data.partition=natural gives every agent at least one whole writer, so use at "
            f"most {writers} agents"
        )


def _no_writers() -> UsageError:
    """The refusal of ``natural`` for a dataset without writers, naming those with some."""
    recorded = ", ".join(name for name, info in DATASETS.items() if info.writers)
    return UsageError(
        "data.partition=natural keeps each writer's samples on one agent, but this dataset "
        f"records no writers; only {recorded} do: use one of them or another data.partition"
    )


def _by_writer(groups: torch.Tensor | None, agents: int, samples: int) -> list[torch.Tensor]:
    """Whole writers to each agent, dealt by sample count (see the module)."""
    if groups is None:
        raise _no_writers()
    if groups.shape != (samples,):
        raise ValueError(f"groups has shape {tuple(groups.shape)}, expected ({samples},)")
    writers, writer_of = groups.unique(return_inverse=True)
    check_writers(agents, writers.numel())
    sizes = torch.bincount(writer_of).tolist()
    owner = torch.tensor(_deal(sizes, agents))[writer_of]  # each sample's agent
    order = torch.argsort(owner, stable=True)  # by agent, then by index
    counts = torch.bincount(owner, minlength=agents).tolist()
    return list(torch.split(order, counts))


def _deal(sizes: list[int], agents: int) -> list[int]:
    """The agent of each writer of ``sizes`` samples: largest first to the agent holding
    the fewest, then the agents numbered in the order of their first writer."""
    held = [(0, agent) for agent in range(agents)]  # (samples held, agent), a heap
    dealt = [0] * len(sizes)
    for writer in sorted(range(len(sizes)), key=lambda writer: (-sizes[writer], writer)):
        samples, agent = heapq.heappop(held)
        dealt[writer] = agent
        heapq.heappush(held, (samples + sizes[writer], agent))
    first: dict[int, int] = {}  # agent -> its number
    for agent in dealt:
        first.setdefault(agent, len(first))
    return [first[agent] for agent in dealt]


def _count_samples(labels: torch.Tensor | None, num_samples: int | None) -> int:
    if labels is None:
        if num_samples is None:
            raise ValueError("partition needs num_samples when labels is None")
        return num_samples
    if labels.ndim != 1 or labels.dtype.is_floating_point or labels.dtype == torch.bool:
        raise ValueError(
            f"labels must be a 1-D integer tensor of class indices, got dtype {labels.dtype} "
            f"and shape {tuple(labels.shape)}; pass labels=None with num_samples for regression"
        )
    if num_samples is not None and num_samples != labels.shape[0]:
        raise ValueError(f"num_samples={num_samples} but labels has {labels.shape[0]} entries")
    return labels.shape[0]


def _count_classes(labels: torch.Tensor, num_classes: int | None) -> int:
    smallest, largest = int(labels.min()), int(labels.max())
    classes = largest + 1 if num_classes is None else num_classes
    if smallest < 0 or largest >= classes:
        raise ValueError(f"labels must lie in 0..{classes - 1}, found {smallest}..{largest}")
    return classes


def _by_labels(
    labels: torch.Tensor,
    agents: int,
    per_agent: int,
    classes: int,
    generator: torch.Generator,
) -> list[torch.Tensor]:
    if not 1 <= per_agent <= classes:
        raise UsageError(
            f"data.labels_per_agent={per_agent} must be between 1 and the {classes} classes "
            "of this dataset"
        )
    class_order, holders = _label_holders(agents, per_agent, classes, generator)

    shards: list[list[torch.Tensor]] = [[] for _ in range(agents)]
    for cls in class_order:
        if not holders[cls]:
            continue
        members = torch.nonzero(labels == cls).flatten()
        if members.numel() < len(holders[cls]):
            raise UsageError(
                f"class {cls} has {members.numel()} training samples but {len(holders[cls])} "
                f"agents hold it; lower topology.agents or data.labels_per_agent"
            )
        members = members[torch.randperm(members.numel(), generator=generator)]
        parts = torch.tensor_split(members, len(holders[cls]))
        for agent, part in zip(holders[cls], parts, strict=True):
            shards[agent].append(part)
    return [torch.cat(parts).sort().values for parts in shards]


def covered_classes(agents: int, per_agent: int, classes: int, seed: int) -> list[int]:
    """The classes ``partition(..., "labels", seed=seed)`` gives to at least one of
    ``agents`` agents holding ``per_agent`` classes each, sorted: all ``classes`` when
    ``agents * per_agent >= classes``."""
    generator = torch.Generator().manual_seed(seed)
    _, holders = _label_holders(agents, per_agent, classes, generator)
    return [cls for cls in range(classes) if holders[cls]]


def _label_holders(
    agents: int, per_agent: int, classes: int, generator: torch.Generator
) -> tuple[list[int], dict[int, list[int]]]:
    """The seeded order of the classes, and the agents that hold each class."""
    class_order = torch.randperm(classes, generator=generator).tolist()
    holders: dict[int, list[int]] = {c: [] for c in range(classes)}
    for agent in range(agents):
        for j in range(per_agent):
            holders[class_order[(agent * per_agent + j) % classes]].append(agent)
    return class_order, holders


def _shards_of(shuffled: list[np.ndarray], per_agent: np.ndarray) -> list[torch.Tensor]:
    """Each agent's sorted indices: class c gives agent i the next ``per_agent[c, i]`` of
    ``shuffled[c]``, in agent order (what splitting each class at its cuts gives)."""
    agents = per_agent.shape[1]
    owners = np.concatenate([np.repeat(np.arange(agents), row) for row in per_agent])
    indices = np.concatenate(shuffled)
    order = np.lexsort((indices, owners))  # by agent, then by index
    totals = per_agent.sum(axis=0)
    parts = np.split(indices[order], np.cumsum(totals)[:-1])
    return [torch.from_numpy(part.copy()).long() for part in parts]


def _by_dirichlet(
    labels: torch.Tensor,
    agents: int,
    alpha: float,
    classes: int,
    seed: int,
) -> list[torch.Tensor]:
    if not (math.isfinite(alpha) and alpha > 0):
        raise UsageError(f"data.dirichlet_alpha={alpha} must be a positive number, e.g. 0.5")
    rng = np.random.default_rng(seed)
    members = [np.flatnonzero(labels.cpu().numpy() == cls) for cls in range(classes)]
    concentration = np.full(agents, float(alpha))
    for _ in range(DIRICHLET_DRAWS):
        shuffled, counts = [], []
        for indices in members:
            order = rng.permutation(indices)
            proportions = rng.dirichlet(concentration)
            cuts = np.round(np.cumsum(proportions)[:-1] * len(order)).astype(np.int64)
            shuffled.append(order)
            counts.append(np.diff(cuts, prepend=0, append=len(order)))
        per_agent = np.stack(counts)  # (classes, agents): what each class gives each agent
        if per_agent.sum(axis=0).min() > 0:
            return _shards_of(shuffled, per_agent)
    raise UsageError(
        f"data.partition=dirichlet left some agent without samples in {DIRICHLET_DRAWS} "
        f"draws with data.dirichlet_alpha={alpha}; raise data.dirichlet_alpha or lower "
        f"topology.agents (now {agents})"
    )
