"""Each rank's checkpoints of a distributed run, and how the ranks agree on one to resume.

With ``run.checkpoint_every = k`` every rank of a synchronous SGD run saves its
own part every k iterations into the run folder's ``checkpoints/`` subfolder,
as ``rank{R}-{iteration}.pt``, written atomically in the simulator's format
(:mod:`murmur.training.checkpoint`): its algorithm state row, its transport's
state (own last broadcast, broadcast number, each neighbour's value as of that
number, counters), the batch streams, the loop's sums and its evaluation rows so
far. A rank holding a block of agents (``--agents-per-rank``) saves the block's rows,
and a run resumes only with the number of agents per rank it was saved with.
Synchronous dSSFN saves the same way every k layers, at a layer's end
(:func:`murmur.distributed.layer_ranks.restore_layers`): the rank's output matrices of every
layer so far, its rows and records, its counters. The parameter server saves on
rank 0 alone, every k updates (:mod:`murmur.distributed.server`). All ranks of ``murmur launch``
share the folder; on several machines each rank writes into its own copy of the path.

The ranks run in lockstep without barriers: a rank cannot finish an iteration
before its neighbours have sent theirs, so two ranks ``d`` hops apart are at
most ``d`` exchanges apart when one is killed (``d`` iterations, or ``d`` times
SPARQ-SGD's local steps). Each rank therefore keeps its last
``1 + ceil(diameter x span / k)`` checkpoints, among which is always the newest
iteration every rank has saved. A resumed rank tells the others which
iterations it holds (one all-gather) and every rank restores the newest they
all hold, so every message numbering restarts from the same broadcast; when
they hold none in common (killed before the first save) they start over.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import torch.distributed as dist

from murmur.config import Config
from murmur.errors import UsageError
from murmur.topology import Graph
from murmur.training.checkpoint import Checkpoints, read_checkpoint, write_atomic

Start = Literal["new", "resume", "restart"]
"""How a rank starts: a new run, resumed by hand, or restarted by torchrun."""

FOLDER = "checkpoints"
"""The subfolder of the run folder that holds every rank's checkpoints."""
_NAME = re.compile(r"rank(\d+)-(\d+)\.pt")


@dataclass
class RankCheckpoints(Checkpoints):
    """One rank's checkpoints: ``path`` is the ``checkpoints/`` folder, a file per
    saved iteration, the newest ``keep`` kept."""

    rank: int = 0
    keep: int = 2

    def save(self, done: int, state: Mapping[str, Any]) -> None:
        """Write this rank's ``state`` after ``done`` iterations; drop the older files."""
        if self.path is None:
            return
        self.path.mkdir(parents=True, exist_ok=True)
        payload = {**self.header, "done": done, "records": 0, "state": dict(state)}
        write_atomic(rank_file(self.path, self.rank, done), payload)
        for old in sorted(saved_iterations(self.path, self.rank))[: -self.keep]:
            rank_file(self.path, self.rank, old).unlink(missing_ok=True)

    def discard_after(self, done: int) -> None:
        """Remove this rank's files of iterations after ``done`` (the run continues from
        ``done`` and saves them again) and the partial files of a save cut short."""
        if self.path is None or not self.path.is_dir():
            return
        for later in saved_iterations(self.path, self.rank):
            if later > done:
                rank_file(self.path, self.rank, later).unlink(missing_ok=True)
        for partial in self.path.glob(f".rank{self.rank}-*"):
            partial.unlink(missing_ok=True)


def rank_file(folder: Path, rank: int, done: int) -> Path:
    return folder / f"rank{rank}-{done}.pt"


def saved_iterations(folder: Path, rank: int) -> list[int]:
    """The iterations of which ``rank`` has a checkpoint file in ``folder``, oldest first."""
    if not folder.is_dir():
        return []
    found = (_NAME.fullmatch(path.name) for path in folder.iterdir())
    return sorted(int(m[2]) for m in found if m is not None and int(m[1]) == rank)


def kept_checkpoints(graph: Graph, every: int, span: int = 1) -> int:
    """How many checkpoints a rank keeps so that the ranks always hold one in common;
    ``span``: the iterations from one exchange with the neighbours to the next (a
    rank steps alone in between, as SPARQ-SGD's local steps)."""
    return 1 + math.ceil(diameter(graph) * span / max(every, 1))


def diameter(graph: Graph) -> int:
    """The most hops between two agents of the (connected) graph."""
    longest = 0
    for source in range(graph.agents):
        hops, frontier = {source: 0}, [source]
        while frontier:
            reached = []
            for agent in frontier:
                for neighbour in graph.neighbors(agent):
                    if neighbour not in hops:
                        hops[neighbour] = hops[agent] + 1
                        reached.append(neighbour)
            frontier = reached
        longest = max(longest, *hops.values())
    return longest


def readable_iterations(folder: Path, rank: int, config: Config) -> list[int]:
    """The iterations whose checkpoint of ``rank`` reads back whole and fits ``config``."""
    readable = []
    for done in saved_iterations(folder, rank):
        try:
            read_checkpoint(rank_file(folder, rank, done), config, folder.parent)
        except UsageError:
            continue
        readable.append(done)
    return readable


def agree(held: list[int], keep: int) -> int | None:
    """Collective: the newest iteration every rank holds (``held``: this rank's), or None."""
    newest = sorted(held)[-keep:]
    mine = torch.full((keep,), -1, dtype=torch.int64)
    mine[: len(newest)] = torch.tensor(newest, dtype=torch.int64)
    parts = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, mine)
    common = set.intersection(*({int(v) for v in part if v >= 0} for part in parts))
    return max(common) if common else None


def agreed_state(
    saves: RankCheckpoints, rank: int, config: Config, start: Start, unit: str
) -> tuple[int, dict[str, Any]] | None:
    """Collective: the newest ``unit`` (iteration, layer) every rank saved and this
    rank's saved state there, its later files removed (the run saves them again);
    None, to start over, when the ranks were restarted before saving one in common.
    A rank resumed by hand stops in one line then, as every other rank does."""
    held = readable_iterations(saves.path, rank, config) if saves.path is not None else []
    done = agree(held, saves.keep)
    if done is None and start == "resume":
        raise UsageError(
            f"rank {rank}: the ranks hold no checkpoint of one same {unit} (this one "
            f"holds {held}); there is nothing to resume from"
        )
    saves.discard_after(-1 if done is None else done)
    if done is None or saves.path is None:
        return None
    return done, read_checkpoint(rank_file(saves.path, rank, done), config)["state"]


def check_agents_per_rank(run_dir: Path, config: Config, agents_per_rank: int) -> None:
    """UsageError when rank 0's newest readable checkpoint in ``run_dir`` was saved by a
    run of another number of agents per rank (older checkpoints: one)."""
    folder = run_dir / FOLDER
    for done in reversed(saved_iterations(folder, 0)):
        try:
            saved = read_checkpoint(rank_file(folder, 0, done), config, run_dir)
        except UsageError:
            continue
        held = saved["state"].get("agents_per_rank", 1)
        if held != agents_per_rank:
            raise UsageError(
                f"{run_dir} was run with --agents-per-rank {held}, not {agents_per_rank}; "
                f"resume it with --agents-per-rank {held}"
            )
        return


def check_resumable_ranks(run_dir: Path, world: int, config: Config) -> int:
    """The newest iteration all ``world`` ranks of the stopped run in ``run_dir`` saved,
    every rank's checkpoints read and checked; UsageError, in one line, when a rank's newest
    checkpoint is missing or damaged or no iteration is common. Nothing is written."""
    folder = run_dir / FOLDER
    held = []
    for rank in range(world):
        iterations = saved_iterations(folder, rank)
        if not iterations:
            raise UsageError(
                f"{run_dir} has no checkpoint of rank {rank} in {FOLDER}/ to resume from "
                "(a distributed run saves them only with run.checkpoint_every > 0)"
            )
        for done in iterations:
            read_checkpoint(rank_file(folder, rank, done), config, folder.parent)
        held.append(set(iterations))
    strays = sorted(
        int(m[1])
        for m in (_NAME.fullmatch(path.name) for path in folder.iterdir())
        if m is not None and int(m[1]) >= world
    )
    if strays:
        raise UsageError(
            f"{folder} holds checkpoints of rank {strays[-1]} but the run has {world} ranks"
        )
    common = set.intersection(*held)
    if not common:
        raise UsageError(
            f"the ranks' checkpoints in {folder} share no iteration "
            f"(rank 0 holds {sorted(held[0])}); the folder is damaged"
        )
    return max(common)
