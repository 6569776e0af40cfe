"""Decentralized SSFN's claims (Liang et al., arXiv 2009.13982 and 2004.05082;
docs/methods/ssfn.md).

Runs, from the shipped presets (seed 0, 20 nodes on a ring, every layer's ADMM
run to its tolerance and gossip to its consensus tolerance), with two layers of
100 random nodes (the sweeps: one of 50) to fit in 20 minutes: centralized SSFN,
synchronous dSSFN and asynchronous dSSFN (ARock) on Vowel, Satimage, Letter and
mnist5k; the three with a single layer after layer 0, whose output matrices are
compared; and on Vowel, the two decentralized forms on rings of 5 to 40 nodes
and on circulant graphs of degree 2, 4 and 8 with 20 nodes. Times are the
simulator's virtual seconds (its default 10 GFLOP/s per node, 1 ms latency and
1 Gbit/s links), so they compare the two forms, not this machine with the
paper's.

The claims: both decentralized forms reach centralized SSFN's accuracy on every
dataset (and its output matrices), the asynchronous one in less time; its time
grows little with the number of nodes on a ring while the synchronous one's
grows steadily (mixing on a ring slows as it grows, so every gossip phase
takes more rounds); and it is furthest ahead on sparse graphs.

A quick run (:data:`QUICK`) decides every claim at reduced size, as each claim's
``reduced`` says: Vowel alone, one layer of 40 random nodes on 5 nodes with ADMM
and ARock stopped at 1e-3, rings of 4 and 8 and degrees 2 and 4 of 8 nodes, and
first-layer runs at the quick size with the full run's tolerances, as the output
matrices are compared at the same 1e-3.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from murmur.metrics.records import RunResult
from murmur.reproduce.claims import Claim, judge, percent
from murmur.reproduce.figures import new_figure, save
from murmur.reproduce.report import markdown_table
from murmur.reproduce.runs import PlannedRun, classification_accuracy, execute

TITLE = (
    'decentralized and asynchronous SSFN (Liang, Javid, Skoglund, Chatterjee, "A '
    'Decentralized Approach Towards Deep Learning" and "Asynchronous Decentralized '
    'Learning of a Neural Network")'
)

MEAN_POINTS = 0.5
"""A decentralized form matches centralized SSFN when its mean accuracy is within this
many percentage points of it ..."""
NODE_POINTS = 1.5
"""... and every node's within this many."""
MATRIX_TOLERANCE = 1e-3
"""Output matrices match when every node's is within this relative distance of
centralized SSFN's."""

PAPER_VOWEL = {"ssfn": None, "dssfn": (61.3, 34.9), "dssfn-async": (61.2, 7.8)}
"""The asynchronous paper's Vowel row: (accuracy %, training seconds) of each form."""

FORMS = {"ssfn": "centralized SSFN", "dssfn": "dSSFN (sync)", "dssfn-async": "dSSFN (async)"}


@dataclass(frozen=True)
class Scale:
    """The sizes of one reproduction, full or quick."""

    datasets: tuple[str, ...]
    shrink: tuple[str, ...]
    """Overrides that make every run of the table smaller: the presets' six layers of
    500 random nodes would take hours here in the simulator (docs/methods/ssfn.md gives them)."""
    ring_nodes: tuple[int, ...]
    degrees: tuple[int, ...]
    degree_nodes: int
    sweep: tuple[str, ...]
    """Overrides of the sweeps over nodes and degrees (Vowel)."""
    first_layer: tuple[str, ...]
    """Overrides of the first-layer runs (Vowel), whose output matrices are compared:
    the presets' tolerances, with ARock's tightened (:data:`FIRST_LAYER_TOLERANCE`)."""


FULL = Scale(
    datasets=("vowel", "satimage", "letter", "mnist5k"),
    shrink=("algorithm.layers=2", "algorithm.nodes=100"),
    ring_nodes=(5, 10, 20, 40),
    degrees=(2, 4, 8),
    degree_nodes=20,
    sweep=("algorithm.layers=1", "algorithm.nodes=50"),
    first_layer=("algorithm.layers=1", "algorithm.nodes=100"),
)
QUICK = Scale(
    datasets=("vowel",),
    shrink=(
        "algorithm.layers=1",
        "algorithm.nodes=40",
        "topology.agents=5",
        "algorithm.tolerance=1e-3",
    ),
    ring_nodes=(4, 8),
    degrees=(2, 4),
    degree_nodes=8,
    sweep=("algorithm.layers=1", "algorithm.nodes=20", "algorithm.tolerance=1e-3"),
    first_layer=("algorithm.layers=1", "algorithm.nodes=40", "topology.agents=5"),
)


FIRST_LAYER_TOLERANCE = {"dssfn-async": ("algorithm.tolerance=1e-5",)}
"""The first-layer runs check the fixed point, so ARock runs to a tighter tolerance
than its presets' 3e-5: its residual is measured on the edge variables, about gamma
times the output matrix, and at 3e-5 its nodes stop about 1.5e-3 (relative) from
centralized SSFN's matrix on Vowel; consensus ADMM's 1e-4 lands within 4.2e-4."""


_REDUCED_TABLE = (
    "Vowel alone, one layer of 40 random nodes on 5 nodes, ADMM and ARock stopped at "
    "tolerance 1e-3 (not four datasets, two layers of 100 on 20 nodes and the presets' "
    "tolerances): the same criterion, as a decentralized form must match centralized "
    "SSFN of the same size, which a smaller network and a looser tolerance do not excuse."
)
_REDUCED_FASTER = (
    "Vowel alone, at the quick table's size (one layer of 40 random nodes on 5 nodes, "
    "tolerance 1e-3): the same criterion, as both forms solve the same smaller problem."
)
_REDUCED_MATRICES = (
    "first-layer runs of 40 random nodes on 5 nodes (not 100 on 20), with the full run's "
    "tolerances (the quick table's 1e-3 stops ADMM and ARock 2e-3 and 2e-2 away, so its "
    "runs cannot test a fixed point): the same 1e-3 criterion, as the decentralized forms "
    "and centralized SSFN solve the same problem at any size."
)


def _reduced_sweep(tested: str, full: str) -> str:
    return (
        f"{tested} (not {full}), one layer of 20 random nodes, ADMM and ARock stopped at "
        "1e-3: the same criterion on a shorter sweep, whose ends still differ by a factor "
        "of two."
    )


def plan(quick: bool) -> list[PlannedRun]:
    """The table's runs, the first-layer runs, then the sweeps over nodes and degrees."""
    scale = QUICK if quick else FULL
    runs = []
    for dataset in scale.datasets:
        for form in FORMS:
            runs.append(PlannedRun(f"{form}-{dataset}", f"{form}-{dataset}", scale.shrink))
    for form in FORMS:
        tight = FIRST_LAYER_TOLERANCE.get(form, ())
        runs.append(
            PlannedRun(f"{form}-first-layer", f"{form}-vowel", (*scale.first_layer, *tight))
        )
    for form in ("dssfn", "dssfn-async"):
        for nodes in scale.ring_nodes:
            overrides = (*scale.sweep, f"topology.agents={nodes}")
            runs.append(PlannedRun(f"{form}-ring-{nodes}", f"{form}-vowel", overrides))
        for degree in scale.degrees:
            if _ring_run(scale, degree):
                continue
            overrides = (
                *scale.sweep,
                f"topology.agents={scale.degree_nodes}",
                "topology.graph=circular",
                f"topology.degree={degree}",
            )
            runs.append(PlannedRun(f"{form}-degree-{degree}", f"{form}-vowel", overrides))
    return runs


def _ring_run(scale: Scale, degree: int) -> str | None:
    """The ring run that is the circulant graph of ``degree`` (degree 2 is the ring)."""
    if degree == 2 and scale.degree_nodes in scale.ring_nodes:
        return f"ring-{scale.degree_nodes}"
    return None


def reproduce(out: Path, quick: bool, progress: bool, portable: bool) -> list[Claim]:
    """Run :func:`plan` into ``out/runs`` and check the claims; plots go to ``out``."""
    scale = QUICK if quick else FULL
    results = execute(plan(quick), out, progress, portable=portable)
    return [
        _match(results, scale, quick, out),
        _matrices(results, "first-layer", quick),
        _faster(results, scale, quick),
        _nodes(results, scale, quick, out),
        _degrees(results, scale, quick, out),
    ]


def virtual_seconds(result: RunResult) -> float:
    return float(result.extra["virtual_seconds"])


def _match(results: dict[str, RunResult], scale: Scale, quick: bool, out: Path) -> Claim:
    rows, gaps = [], []
    for dataset in scale.datasets:
        central = classification_accuracy(results[f"ssfn-{dataset}"]).mean
        row: list[object] = [dataset, percent(central)]
        for form in ("dssfn", "dssfn-async"):
            accuracy = classification_accuracy(results[f"{form}-{dataset}"])
            mean_gap = 100 * abs(accuracy.mean - central)
            node_gap = 100 * max(abs(value - central) for value in accuracy.per_agent)
            gaps.append((mean_gap, node_gap))
            row += [
                f"{percent(accuracy.mean)} (nodes {percent(accuracy.min)} to "
                f"{percent(accuracy.max)})",
                f"{virtual_seconds(results[f'{form}-{dataset}']):.3g}",
            ]
        rows.append(row)
    worst_mean = max(gap for gap, _ in gaps)
    worst_node = max(gap for _, gap in gaps)
    plot = _accuracy_bars(results, scale, out / "accuracy.png")
    return Claim(
        title="Both decentralized forms reach centralized SSFN's accuracy on every dataset",
        paper="synchronous and asynchronous dSSFN reach the accuracy of centralized SSFN on "
        "every dataset; on Vowel, asynchronous 61.2 % in 7.8 s against synchronous "
        "61.3 % in 34.9 s (arXiv 2004.05082, its table of results).",
        measured=f"the largest gap of a mean accuracy to centralized SSFN's is "
        f"{worst_mean:.2f} points, of a single node's {worst_node:.2f} points.",
        criterion=f"every form's mean accuracy within {MEAN_POINTS:g} points of centralized "
        f"SSFN's on the same dataset, and every node's within {NODE_POINTS:g}.",
        verdict=judge(worst_mean <= MEAN_POINTS and worst_node <= NODE_POINTS, quick=quick),
        reduced=_REDUCED_TABLE if quick else "",
        table=markdown_table(
            (
                "dataset",
                "centralized",
                "dSSFN (sync)",
                "sync virtual s",
                "dSSFN (async)",
                "async virtual s",
            ),
            rows,
        ),
        plots=(plot,),
        note="the paper's seconds are wall time on its cluster, murmur's the simulator's "
        "virtual time; only their ratio compares.",
    )


def _accuracy_bars(results: dict[str, RunResult], scale: Scale, path: Path) -> str:
    figure, (axes,) = new_figure()
    width = 0.27
    for k, form in enumerate(FORMS):
        values = [
            100 * classification_accuracy(results[f"{form}-{d}"]).mean for d in scale.datasets
        ]
        positions = [i + (k - 1) * width for i in range(len(scale.datasets))]
        axes.bar(positions, values, width, label=FORMS[form])
    axes.set_xticks(range(len(scale.datasets)), list(scale.datasets))
    axes.set_ylabel("test accuracy (%)")
    axes.set_title("Centralized, synchronous and asynchronous SSFN")
    axes.legend(loc="lower right", fontsize="small")
    return save(figure, path)


def _parameters(results: dict[str, RunResult], key: str) -> torch.Tensor:
    """The final parameters run ``key`` kept (every layer-wise run keeps them)."""
    parameters = results[key].parameters
    if parameters is None:
        raise ValueError(f"run {key} kept no parameters")
    return parameters


def _matrices(results: dict[str, RunResult], label: str, quick: bool) -> Claim:
    central = _parameters(results, f"ssfn-{label}")[0]
    rows, errors = [], []
    for form in ("dssfn", "dssfn-async"):
        outputs = _parameters(results, f"{form}-{label}")
        distances = [float((o - central).norm() / central.norm()) for o in outputs]
        errors.append(max(distances))
        mean = sum(distances) / len(distances)
        rows.append((FORMS[form], f"{max(distances):.2e}", f"{mean:.2e}"))
    return Claim(
        title="Every node's output matrix is centralized SSFN's",
        paper="the decentralized solution is the centralized one: consensus ADMM and ARock "
        "converge to the minimizer of the sum of the nodes' costs (arXiv 2009.13982, "
        "2004.05082).",
        measured=f"at the first layer after layer 0 on Vowel, the largest relative distance "
        f"of a node's output matrix to centralized SSFN's is {errors[0]:.1e} (synchronous) "
        f"and {errors[1]:.1e} (asynchronous).",
        criterion=f"every node within {MATRIX_TOLERANCE:g} relative (Frobenius) of "
        "centralized SSFN's output matrix.",
        verdict=judge(max(errors) <= MATRIX_TOLERANCE, quick=quick),
        reduced=_REDUCED_MATRICES if quick else "",
        table=markdown_table(("form", "largest distance", "mean distance"), rows),
    )


def _faster(results: dict[str, RunResult], scale: Scale, quick: bool) -> Claim:
    rows, ratios = [], []
    for dataset in scale.datasets:
        sync = virtual_seconds(results[f"dssfn-{dataset}"])
        asynchronous = virtual_seconds(results[f"dssfn-async-{dataset}"])
        ratios.append(sync / asynchronous)
        rows.append((dataset, f"{sync:.3g}", f"{asynchronous:.3g}", f"{sync / asynchronous:.2f}"))
    return Claim(
        title="Asynchronous dSSFN trains in less time than synchronous",
        paper="on Vowel 7.8 s against 34.9 s, on Caltech101 27.4 s against 427.5 s "
        "(arXiv 2004.05082).",
        measured="synchronous / asynchronous virtual time: "
        + ", ".join(f"{d} {r:.2f}" for d, r in zip(scale.datasets, ratios, strict=True))
        + ".",
        criterion="asynchronous virtual time below synchronous on every dataset.",
        verdict=judge(min(ratios) > 1, quick=quick),
        reduced=_REDUCED_FASTER if quick else "",
        table=markdown_table(("dataset", "sync virtual s", "async virtual s", "ratio"), rows),
    )


def _sweep(results: dict[str, RunResult], labels: list[str]):
    sync = [virtual_seconds(results[f"dssfn-{label}"]) for label in labels]
    asynchronous = [virtual_seconds(results[f"dssfn-async-{label}"]) for label in labels]
    return sync, asynchronous


def _time_plot(values, sync, asynchronous, xlabel: str, title: str, path: Path) -> str:
    figure, (axes,) = new_figure()
    axes.plot(values, sync, marker="o", label="dSSFN (sync)")
    axes.plot(values, asynchronous, marker="s", label="dSSFN (async)")
    axes.set_xlabel(xlabel)
    axes.set_ylabel("training time (virtual s)")
    axes.set_xticks(list(values))
    axes.set_title(title)
    axes.legend(fontsize="small")
    return save(figure, path)


def _nodes(results: dict[str, RunResult], scale: Scale, quick: bool, out: Path) -> Claim:
    nodes = scale.ring_nodes
    sync, asynchronous = _sweep(results, [f"ring-{n}" for n in nodes])
    ratios = [s / a for s, a in zip(sync, asynchronous, strict=True)]
    sync_growth, async_growth = sync[-1] / sync[0], asynchronous[-1] / asynchronous[0]
    widening = all(later >= earlier for earlier, later in zip(ratios[:-1], ratios[1:], strict=True))
    plot = _time_plot(
        nodes,
        sync,
        asynchronous,
        "nodes on a ring",
        "Training time against nodes (Vowel)",
        out / "time-nodes.png",
    )
    rows = [
        (n, f"{s:.3g}", f"{a:.3g}", f"{r:.2f}")
        for n, s, a, r in zip(nodes, sync, asynchronous, ratios, strict=True)
    ]
    return Claim(
        title="On a ring, synchronous time grows with the nodes, asynchronous barely",
        paper="on a ring (degree 2) the training time of asynchronous dSSFN grows only "
        "slightly with the number of nodes while that of synchronous dSSFN grows "
        "steadily (arXiv 2004.05082, its figure of time against nodes).",
        measured=f"from {nodes[0]} to {nodes[-1]} nodes the synchronous time grows "
        f"{sync_growth:.2f} times, the asynchronous {async_growth:.2f} times; the ratio "
        "of the two goes " + " → ".join(f"{r:.2f}" for r in ratios) + ".",
        criterion="the synchronous / asynchronous ratio never falls as nodes are added, and "
        "the synchronous time grows more than the asynchronous one.",
        verdict=judge(widening and sync_growth > async_growth, quick=quick),
        reduced=_reduced_sweep(f"rings of {', '.join(map(str, nodes))} nodes", "5 to 40")
        if quick
        else "",
        table=markdown_table(("nodes", "sync virtual s", "async virtual s", "ratio"), rows),
        plots=(plot,),
        note='with gossip rounds on "auto", every synchronous ADMM iteration gossips '
        "until the nodes agree, and on a ring that takes ~N^2 rounds.",
    )


def _degrees(results: dict[str, RunResult], scale: Scale, quick: bool, out: Path) -> Claim:
    degrees = scale.degrees
    labels = [_ring_run(scale, d) or f"degree-{d}" for d in degrees]
    sync, asynchronous = _sweep(results, labels)
    ratios = [s / a for s, a in zip(sync, asynchronous, strict=True)]
    plot = _time_plot(
        degrees,
        sync,
        asynchronous,
        "degree (circulant graph)",
        f"Training time against degree, {scale.degree_nodes} nodes (Vowel)",
        out / "time-degree.png",
    )
    rows = [
        (d, f"{s:.3g}", f"{a:.3g}", f"{r:.2f}")
        for d, s, a, r in zip(degrees, sync, asynchronous, ratios, strict=True)
    ]
    sparse_ahead = ratios[0] > 1 and ratios[0] == max(ratios)
    return Claim(
        title="Asynchronous dSSFN is furthest ahead on sparse graphs",
        paper="asynchronous dSSFN's advantage in training time is largest on sparse graphs "
        "and shrinks as the degree grows (arXiv 2004.05082, its figure of time against "
        "degree).",
        measured="synchronous / asynchronous virtual time by degree: "
        + ", ".join(f"{d}: {r:.2f}" for d, r in zip(degrees, ratios, strict=True))
        + ".",
        criterion=f"asynchronous ahead at degree {degrees[0]}, and by the most there.",
        verdict=judge(sparse_ahead, quick=quick),
        reduced=_reduced_sweep(
            f"degrees {', '.join(map(str, degrees))} of {scale.degree_nodes} nodes",
            "2, 4 and 8 of 20",
        )
        if quick
        else "",
        table=markdown_table(("degree", "sync virtual s", "async virtual s", "ratio"), rows),
        plots=(plot,),
    )
