"""``murmur reproduce PAPER``: a paper's experiments scaled to murmur's bundled data.

Each paper is a module with the same entry point,
``reproduce(out: Path, quick: bool, progress: bool) -> list[Claim]``: it plans its
runs (shipped presets with overrides, :mod:`murmur.reproduce.runs`), trains them
into ``out/runs/``, draws its PNG plots into ``out`` and returns its claims, each
with the paper's words, murmur's figure and a verdict computed from the measured
numbers (:mod:`murmur.reproduce.claims`). :func:`reproduce` writes ``report.md``
from them (:mod:`murmur.reproduce.report`). A paper is added by one more entry in
:data:`PAPERS`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from murmur.errors import UsageError
from murmur.reproduce import asysg, detsgrad, dssfn
from murmur.reproduce.claims import Claim, Verdict, judge
from murmur.reproduce.report import write_report
from murmur.training.runs import create_run_dir

__all__ = ["PAPERS", "Paper", "Claim", "Verdict", "judge", "reproduce"]


@dataclass(frozen=True)
class Paper:
    """A reproducible paper: its title and its module's entry point."""

    title: str
    reproduce: Callable[[Path, bool, bool, bool], list[Claim]]
    """``(out, quick, progress) -> claims``; trains into ``out/runs``, plots into ``out``."""


PAPERS: dict[str, Paper] = {
    "detsgrad": Paper(detsgrad.TITLE, detsgrad.reproduce),
    "asysg": Paper(asysg.TITLE, asysg.reproduce),
    "dssfn": Paper(dssfn.TITLE, dssfn.reproduce),
}


def reproduce(
    name: str, out: Path, *, quick: bool = False, progress: bool = True, portable: bool = False
) -> Path:
    """Reproduce paper ``name`` into the empty or new folder ``out``; returns report.md.
    ``portable``: every run with ``run.portable = true`` (the same numbers on any x86-64
    machine, :mod:`murmur.portable`)."""
    paper = PAPERS.get(name)
    if paper is None:
        raise UsageError(f"unknown paper '{name}'; valid papers: {', '.join(PAPERS)}")
    create_run_dir(out)
    if progress:
        print(f"reproducing {paper.title} into {out}", file=sys.stderr)
    started = time.perf_counter()
    claims = paper.reproduce(out, quick, progress, portable)
    seconds = time.perf_counter() - started
    return write_report(out, paper.title, claims, quick=quick, seconds=seconds, portable=portable)
