"""Write the reference pages that are generated from the code, so that they cannot
drift from it: docs/reference/config-keys.md, every configuration key from the config
dataclasses (their types, defaults and field docstrings), docs/reference/cli.md,
every command's ``--help``, and docs/reference/algorithms.md, what runs where, from
each algorithm's registered capabilities.

    python scripts/reference_docs.py           # rewrite them
    python scripts/reference_docs.py --check   # exit 1 if one is stale

The sections ``run``, ``data``, ``model``, ``topology``, ``timing``, ``faults`` and
``collapse`` come first, then each algorithm's keys (``algorithm.name = "..."``), with
the keys it shares with others (steps, local optimizer, compression) listed under it
too.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import os
import sys
import textwrap
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "reference"


@cache
def _field_docs(cls: type) -> dict[str, tuple[str, str]]:
    """{field: (annotation, docstring)} written in ``cls``'s own body."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    found: dict[str, tuple[str, str]] = {}
    for statement, following in zip(body, [*body[1:], None], strict=True):
        if not isinstance(statement, ast.AnnAssign) or not isinstance(statement.target, ast.Name):
            continue
        doc = ""
        if isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant):
            doc = " ".join(str(following.value.value).split())
        found[statement.target.id] = (ast.unparse(statement.annotation), doc)
    return found


def _described(cls: type, name: str) -> tuple[str, str]:
    """The field's annotation where it is last declared, and the nearest docstring (a
    subclass that only changes a default keeps its base's)."""
    found = [
        _field_docs(klass)[name]
        for klass in cls.__mro__
        if dataclasses.is_dataclass(klass) and name in _field_docs(klass)
    ]
    docs = [doc for _, doc in found if doc]
    return (found[0][0] if found else ""), (docs[0] if docs else "")


def _default(field: dataclasses.Field[object]) -> str:
    if field.default is not dataclasses.MISSING:
        value: object = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "required"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, tuple):
        value = list(value)
    return f"`{value}`"


def _table(cls: type, prefix: str) -> list[str]:
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for field in dataclasses.fields(cls):
        kind, doc = _described(cls, field.name)
        cell = doc.replace("|", "\\|") or "-"
        kind = kind.replace("|", "\\|")
        rows.append(f"| `{prefix}.{field.name}` | `{kind}` | {_default(field)} | {cell} |")
    return rows


def config_keys() -> str:
    """The configuration keys page, from the code as it is."""
    from murmur.config import SECTIONS, Config
    from murmur.registry import ALGORITHMS

    out = [
        "# Configuration keys",
        "",
        "Generated from the config dataclasses by `python scripts/reference_docs.py`;",
        "a test fails when this page and the code differ. Every key is set in a TOML",
        "file's `[section]` or with `--set section.key=value`; docs/reference/config.md",
        "explains the sections in prose.",
        "",
    ]
    defaults = Config()
    for section in SECTIONS:
        if section == "algorithm":
            continue
        cls = type(getattr(defaults, section))
        out += [f"## [{section}]", "", (inspect.getdoc(cls) or "").split("\n")[0], ""]
        out += [*_table(cls, section), ""]
    for name, member in ALGORITHMS.items():
        summary = (inspect.getdoc(member.config) or "").split("\n")[0]
        out += [f'## algorithm.name = "{name}"', "", summary, ""]
        out += [*_table(member.config, "algorithm"), ""]
    return "\n".join(out).rstrip("\n") + "\n"


def cli() -> str:
    """The command-line page: ``murmur --help`` and each command's, as argparse prints
    them at a fixed width."""
    from murmur.cli import build_parser

    width, os.environ["COLUMNS"] = os.environ.get("COLUMNS"), "88"
    try:
        return _help_page(build_parser())
    finally:
        if width is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = width


def _help_page(parser: argparse.ArgumentParser) -> str:
    out = [
        "# Command line",
        "",
        "Generated from murmur's argument parser by `python scripts/reference_docs.py`;",
        "a test fails when this page and the code differ.",
        "",
        "```text",
        parser.format_help().rstrip(),
        "```",
    ]
    commands = next(
        action for action in parser._actions if isinstance(action, argparse._SubParsersAction)
    )
    for name, command in commands.choices.items():
        out += ["", f"## murmur {name}", "", "```text", command.format_help().rstrip(), "```"]
    return "\n".join(out) + "\n"


def algorithms() -> str:
    """What runs where: each built-in algorithm's family and capabilities, read from the
    registry (``registry.ALGORITHMS``), so that the guides' lists cannot disagree."""
    from murmur.origins import BUILT_IN
    from murmur.registry import ALGORITHMS, FAULTS

    out = [
        "# What runs where",
        "",
        "Generated from each algorithm's registered capabilities by",
        "`python scripts/reference_docs.py`; a test fails when this page and the code differ.",
        "A plugin's algorithms declare theirs the same way (docs/guides/your-own-method.md);",
        "`murmur run --check` refuses, in one line with the reason, what an algorithm cannot do.",
        "",
        "| algorithm | family | runtimes | checkpoints | faults | blocks per rank | "
        "varying graph | compiled step | GPU | local optimizers |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    yes = {True: "yes", False: "no"}
    for name, member in ALGORITHMS.items():
        if member.origin != BUILT_IN:
            continue
        can = member.capabilities
        faults = [fault.replace("_", " ") for fault in FAULTS if fault in can.faults.allowed]
        cells = [
            f"`{name}`",
            member.kind,
            ", ".join(can.runtimes.allowed),
            ", ".join(r for r in can.checkpoints if r in can.runtimes.allowed) or "none",
            ", ".join(faults) or "none",
            yes[can.blocks],
            yes[bool(can.varying.allowed)],
            yes[can.compiles],
            yes[can.cuda],
            yes[bool(can.optimizers.allowed)],
        ]
        out.append("| " + " | ".join(cells) + " |")
    out += ["", "Where an algorithm cannot run somewhere, why:", ""]
    for name, member in ALGORITHMS.items():
        if member.origin != BUILT_IN:
            continue
        reasons = [
            f"{what}: {ability.why_not}"
            for what, ability in (
                ("distributed", member.capabilities.runtimes),
                ("faults", member.capabilities.faults),
                ("varying graph", member.capabilities.varying),
                ("local optimizers", member.capabilities.optimizers),
            )
            if ability.why_not
        ]
        if reasons:
            out.append(f"- `{name}`: " + "; ".join(reasons))
    return "\n".join(out) + "\n"


PAGES = {"config-keys.md": config_keys, "cli.md": cli, "algorithms.md": algorithms}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a page is stale")
    args = parser.parse_args(argv)
    stale = []
    for name, make in PAGES.items():
        target, text = REFERENCE / name, make()
        if args.check:
            if not target.is_file() or target.read_text(encoding="utf-8") != text:
                stale.append(name)
            continue
        target.write_text(text, encoding="utf-8")
        print(target.relative_to(ROOT))
    if stale:
        print(f"stale: {', '.join(stale)}; run python scripts/reference_docs.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
