"""``--max-bytes-vs-dsgd``: a limit on what a tuned point may send.

Tuned on accuracy alone, a method that talks less by a threshold (DETSGRAD's v0 x a,
SPARQ-SGD's) is free to lower its threshold until it sends at every step, as DSGD
does: the tune then picks the most accurate point and the comparison loses what it
was about. A limit keeps each member's trials within a communication budget: a
trial whose runs sent more bytes than the limit (the mean over its seeds of each
run's bytes over what DSGD sends on the run's graph in its iterations, the "bytes vs
DSGD" figure of the tables) is infeasible, is never chosen, and Optuna's TPE sampler
learns to avoid its region (``optuna.Trial.set_constraint``).

The limit is one of

- ``own``: no more than the member's own steps send, measured by the study's first
  trial, which runs them (TPE only: a grid has no such trial); each member keeps the
  communication its preset was set for, and tuning looks for the best accuracy at it;
- a percentage of DSGD's bytes, the same for every member (``25`` or ``25%``).

Members whose runs have no DSGD baseline (one learner, a parameter server) are not
limited: their trials record no bytes figure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from murmur.errors import UsageError
from murmur.metrics.records import RunResult

BytesLimit = float | Literal["own"]
"""A share of DSGD's bytes (0.25: a quarter), or ``own``."""

OWN_TRIAL = "own_steps"
"""The user attribute marking the trial that runs the member's own steps."""
BYTES = "bytes_vs_dsgd"
"""The user attribute holding a trial's bytes over DSGD's (mean over its seeds)."""
CONSTRAINT = "bytes_vs_dsgd"
"""The name of the trial's constraint (``bytes - limit``, feasible at most 0)."""
SLACK = 1e-9
"""Rounding left to a trial that sends exactly the limit (the own-steps trial)."""


def parse_bytes_limit(text: str) -> BytesLimit:
    """``own``, or a percentage of DSGD's bytes (``25``, ``25%``, ``0.5``) as a share;
    UsageError for anything else."""
    word = text.strip().lower()
    if word == "own":
        return "own"
    try:
        percent = float(word.removesuffix("%"))
    except ValueError:
        percent = math.nan
    if not math.isfinite(percent) or percent <= 0:
        raise UsageError(
            f"--max-bytes-vs-dsgd {text!r}: give 'own' (no more than the member's own steps "
            "send) or a positive percentage of DSGD's bytes, e.g. 25"
        )
    return percent / 100.0


def describe_limit(limit: BytesLimit | None) -> str:
    """The limit in words, for reports and the tuned file's header."""
    if limit is None:
        return "none"
    if limit == "own":
        return "no more bytes than the member's own steps send (its first trial)"
    return f"at most {100 * limit:g} % of DSGD's bytes"


def bytes_share(result: RunResult) -> float | None:
    """A run's bytes over what DSGD sends on its graph in its iterations; None where it
    has no such baseline."""
    exchange = result.extra.get("full_exchange")
    if exchange is None or exchange["bytes"] <= 0:
        return None
    return result.bytes / exchange["bytes"]


def mean_share(shares: Sequence[float | None]) -> float | None:
    """The mean of the seeds' shares; None unless every seed has one."""
    known = [share for share in shares if share is not None]
    if not shares or len(known) < len(shares):
        return None
    return sum(known) / len(known)


def over_limit(share: float, limit: float) -> float:
    """The trial's constraint value: above 0 where it sent more than ``limit``."""
    return share - limit * (1.0 + SLACK)
