"""What every column of murmur's tables means: one table, read by every footer.

``comparison.md`` and ``report.md`` end their tables with the meaning of each column
they show (:func:`footer`), and the terminal's compact table shows the columns of
:data:`COMPACT` under their short headers. A header that holds a number (the k of
"last-5 acc %", the target of "bytes to 88 %", the 95 of "95 % CI") is looked up with
the number as ``N`` and its meaning says the number.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["MEANINGS", "COMPACT", "meaning", "short_header", "footer"]

MEANINGS: dict[str, str] = {
    "name": "the run's label in its comparison (its algorithm where it has none)",
    "algorithm": "the method trained",
    "dataset": "the data it trained on",
    "agents": "learners that train a model each (1: one model)",
    "topology": "the graph the agents talk over; a varying one names its family and period",
    "mixing": (
        "the weights the agents average with and the steps chosen for the run's graph; "
        "on a time-varying topology, what each graph mixes with"
    ),
    "iterations": "steps every agent took (server runs: server updates; layer-wise: layers)",
    "seed": "the run's seed",
    "seeds": "runs in the row, one per seed",
    "layers": 'widths of the layers a layer-wise run built ("3 x 122": three of 122)',
    "final acc mean %": "test accuracy at the final evaluation, mean over agents",
    "final acc min %": "the same, of the worst agent",
    "final acc max %": "the same, of the best agent",
    "last-N acc %": "the agents' mean test accuracy averaged over the last {n} evaluations",
    "last-N val acc %": (
        "the same of the validation split (data.validation): the figure to choose by"
    ),
    "avg model acc %": "test accuracy of the average of the agents' models (model.pt)",
    "train acc %": "training accuracy, mean over agents",
    "N % CI": (
        "the {n} % confidence interval of the mean final accuracy across seeds: "
        "mean ± t · sd / √n (Student's t, n - 1 degrees of freedom)"
    ),
    "stopped": "the seeds a rule stopped early (collapsed or diverged), in no mean",
    "messages": (
        "point-to-point messages sent, all agents together: a method that sends its model "
        "and its tracker as two messages (BEER, compressed DETSGRAD-GT) counts two, one "
        "that sends them in one message (DETSGRAD-GT uncompressed) one"
    ),
    "bytes": "encoded bytes of those messages (what crosses the links)",
    "messages vs DSGD %": (
        "messages over those of the DSGD run of the same seed, dataset, graph, agents and "
        "iterations (else over what DSGD would send on the run's graph)"
    ),
    "bytes vs DSGD %": "bytes over DSGD's, likewise: the measure that compares every method",
    "lost msgs %": "share of the messages lost under [faults]",
    "wall s": "wall-clock seconds of training",
    "virtual s": (
        "simulated seconds on the virtual clock ([timing]): each step's compute "
        "(its flops over timing.flops_per_second) and its messages' latency and "
        "bytes / bandwidth; agents compute side by side, so one learner that computes "
        "every agent's batch alone (centralized) takes longer"
    ),
    "its to N %": (
        "iterations until the agents' mean test accuracy first reached {n} % at an "
        "evaluation (the target: --target, else 95 % of the table's best final mean "
        'accuracy, rounded down); "-": never reached'
    ),
    "s to N %": "wall-clock seconds until then",
    "virtual s to N %": "virtual seconds until then",
    "bytes to N %": "bytes all agents had sent until then",
    "reached N %": "seeds that reached {n} %, of those that finished",
    "failed ranks": "distributed ranks that failed; the run went on without them",
    "W": "workers of a parameter server or of shared memory",
    "gradients": (
        "gradients the server applied: W per iteration for a synchronous server, one "
        "for an asynchronous one"
    ),
    "staleness mean/max": "updates between a gradient's model and the model it updated",
    "staleness mean": "updates between a gradient's model and the model it updated, mean",
    "its to target": "server iterations until the training loss reached its target",
    "virtual s to target": "virtual seconds until then",
    "s to target": "wall-clock seconds until then",
    "iteration speedup": "W · its(1) / its(W), over the W = 1 run of the same set-up",
    "time speedup": "s(1) / s(W), over the W = 1 run of the same set-up",
    "reached": "seeds that reached the target training loss",
    "samples/s": "training samples per wall-clock second, all workers together",
    "N-process samples/s": "the same with one process, for comparison",
    "N-process acc %": "test accuracy of that one-process run",
    "speedup": "samples/s over the one-process run's",
    "run folder": "where the run's files are, relative to the current folder",
}
"""Each column's meaning, by its header (numbers as ``N``; ``{n}``: the number)."""

COMPACT: dict[str, str] = {
    "name": "name",
    "seed": "seed",
    "seeds": "seeds",
    "final acc mean %": "acc %",
    "final acc min %": "worst agent %",
    "stopped": "stopped",
    "messages vs DSGD %": "msgs vs DSGD %",
    "bytes vs DSGD %": "bytes vs DSGD %",
    "bytes to N %": "bytes to {n}%",
    "lost msgs %": "lost msgs %",
    "wall s": "wall s",
    "virtual s": "virtual s",
    "failed ranks": "failed ranks",
    "W": "W",
    "gradients": "gradients",
    "iteration speedup": "its speedup",
    "time speedup": "time speedup",
    "speedup": "speedup",
    "reached": "reached",
    "run folder": "run folder",
}
"""The columns the terminal shows, by their key in :data:`MEANINGS`, with the short
header each has there; ``comparison.md``, ``report.md`` and ``summary.json`` keep
every one."""

_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _key(header: str) -> tuple[str, str]:
    """A header's key in :data:`MEANINGS` and the number it holds ("" for none)."""
    found = _NUMBER.search(header)
    return _NUMBER.sub("N", header), found.group() if found else ""


def meaning(header: str) -> str | None:
    """What a column means; None for a header no table has."""
    key, number = _key(header)
    text = MEANINGS.get(key)
    return None if text is None else text.format(n=number)


def short_header(header: str) -> str | None:
    """A column's header in the compact table; None: the compact table leaves it out."""
    key, number = _key(header)
    short = COMPACT.get(key)
    return None if short is None else short.format(n=number)


def footer(headers: Sequence[str], markdown: bool = True) -> str:
    """The meaning of each column of a table, in its order: "Columns:" and one line
    each (a Markdown list, or plain lines)."""
    lines = []
    for header in headers:
        text = meaning(header)
        if text is not None:
            lines.append(f"- **{header}**: {text}" if markdown else f"  {header}: {text}")
    return "\n".join(["Columns:", *([""] if markdown else []), *lines])
