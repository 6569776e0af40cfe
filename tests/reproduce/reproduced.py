"""What the tests of ``murmur reproduce`` share: a quick reproduction into a temporary
folder, and reading its runs' summaries and its report's sections and verdicts."""

from __future__ import annotations

import json
from pathlib import Path

from murmur.cli import main
from murmur.reproduce.report import VERDICT_PREFIX

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def quick(tmp_path_factory, paper: str) -> Path:
    """``murmur reproduce PAPER --quick`` into a new folder; returns the folder."""
    folder = tmp_path_factory.mktemp("reproduce") / paper
    assert main(["reproduce", paper, "--quick", "--quiet", "--out", str(folder)]) == 0
    return folder


def run_summary(out: Path, label: str) -> dict:
    return json.loads((out / "runs" / label / "summary.json").read_text())


def claim_section(report: str, number: int) -> str:
    """The report's section of claim ``number``."""
    return report.split(f"\n## {number}. ")[1].split("\n## ")[0]


def claim_verdict(text: str) -> str:
    """The verdict of a claim's section."""
    line = next(line for line in text.splitlines() if line.startswith(VERDICT_PREFIX))
    return line.removeprefix(VERDICT_PREFIX).strip()
