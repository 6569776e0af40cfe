"""``report.md`` of a reproduction: one section per claim, its verdict on its own line."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from murmur.reproduce.claims import Claim

VERDICT_PREFIX = "**Verdict:**"
"""Every claim's section has exactly one line starting with this."""

PORTABLE = (
    " in portable mode (every run pinned to the same CPU kernels: these numbers are "
    "those of any x86-64 machine)"
)


def write_report(
    out: Path,
    title: str,
    claims: Sequence[Claim],
    *,
    quick: bool,
    seconds: float,
    portable: bool = False,
) -> Path:
    """Write ``out/report.md`` and return its path."""
    kind = (
        "quick run (short runs: each claim is decided on the reduced criterion it states, "
        'its verdict marked "(quick)")'
        if quick
        else "full run"
    )
    lines = [
        f"# Reproducing {title}",
        "",
        f"murmur's {kind}{PORTABLE if portable else ''}, {seconds:.0f} s of wall time; "
        "every run's folder is under "
        "`runs/` (`murmur report runs/LABEL` plots one). Each verdict is computed from "
        "the measured numbers with the criterion stated beside it.",
        "",
        "| # | claim | verdict |",
        "|---|---|---|",
    ]
    lines += [f"| {n} | {claim.title} | {claim.verdict} |" for n, claim in enumerate(claims, 1)]
    for number, claim in enumerate(claims, 1):
        lines += _section(number, claim)
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _section(number: int, claim: Claim) -> list[str]:
    lines = [
        "",
        f"## {number}. {claim.title}",
        "",
        f"**Paper:** {claim.paper}",
        "",
        f"**murmur:** {claim.measured}",
        "",
        f"**Criterion:** {claim.criterion}",
        "",
    ]
    if claim.reduced:
        lines += [f"**Quick run:** {claim.reduced}", ""]
    lines += [f"{VERDICT_PREFIX} {claim.verdict}"]
    if claim.note:
        lines += ["", f"Note: {claim.note}"]
    if claim.table:
        lines += ["", claim.table]
    for plot in claim.plots:
        lines += ["", f"![{claim.title}]({plot})"]
    return lines


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A markdown table; cells are written with ``str``."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)
