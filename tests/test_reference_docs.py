"""The generated reference pages match the code: every configuration key of every
section and algorithm is on docs/reference/config-keys.md with its default, and
docs/reference/cli.md is what the argument parser prints."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest

from murmur.config import SECTIONS, Config
from murmur.registry import ALGORITHMS

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "reference_docs.py"


@pytest.fixture(scope="module")
def reference():
    spec = importlib.util.spec_from_file_location("reference_docs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["reference_docs"] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules["reference_docs"]


def test_the_committed_pages_are_what_the_code_generates(reference):
    assert reference.main(["--check"]) == 0, "run python scripts/reference_docs.py"


def test_every_key_is_listed_with_its_default_and_a_meaning(reference):
    page = reference.config_keys()
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    configs = [type(getattr(Config(), s)) for s in SECTIONS if s != "algorithm"]
    for cls, prefix in [
        *((c, "") for c in configs),
        *((m.config, "algorithm") for m in ALGORITHMS.values()),
    ]:
        section = prefix or next(s for s in SECTIONS if type(getattr(Config(), s)) is cls)
        for field in dataclasses.fields(cls):
            key = f"| `{section}.{field.name}` |"
            assert any(row.startswith(key) for row in rows), key
    assert all(not row.endswith("| - |") for row in rows), "a key without a docstring"
    assert "| `run.iterations` | `int` | `3000` |" in page


def test_the_cli_page_holds_every_command(reference):
    page = reference.cli()
    for command in ("run", "launch", "presets", "datasets", "report", "reproduce"):
        assert f"## murmur {command}\n" in page
    assert "--portable" in page and "--seeds SEEDS" in page
