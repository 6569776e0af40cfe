"""Every `murmur` command shown in the README and the manual exists with the flags
shown: each one in a sh block parses with murmur's own argument parser, and each
`murmur run` of a packaged preset (or of a file the repository ships) takes the
settings shown. Bracketed parts (``[--quick]``) are optional flags: they are parsed
too, and words in capitals (``DIR``) stand for a value."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from murmur.cli import build_parser
from murmur.config import load_experiment, preset_names

ROOT = Path(__file__).resolve().parent.parent
OPTIONAL = re.compile(r"\[(--[^\]]*)\]")
"""An optional flag as usage lines write it, ``[--out DIR]``."""
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _commands() -> list[tuple[str, list[str]]]:
    """(where, argv after ``murmur``) of every command line in the pages' sh blocks."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for block in re.findall(r"```(?:sh|bash)\n(.*?)```", text, flags=re.S):
            for line in block.replace("\\\n", " ").splitlines():
                for part in line.split(";"):
                    words = shlex.split(OPTIONAL.sub(r"\1", part), comments=True)
                    if words and words[0].removeprefix(".venv/bin/") == "murmur":
                        found.append((f"{page.relative_to(ROOT)}: {part.strip()}", words[1:]))
    return found


COMMANDS = _commands()


def test_the_pages_show_commands():
    assert len(COMMANDS) >= 40
    assert {argv[0] for _, argv in COMMANDS if argv} >= {"run", "launch", "report", "reproduce"}


@pytest.mark.parametrize(("where", "argv"), COMMANDS, ids=[where for where, _ in COMMANDS])
def test_every_command_shown_parses(where, argv):
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as stop:
        pytest.fail(f"{where}: murmur refuses it (exit {stop.code})")
    if args.command != "run" or args.preset is None:
        return
    shipped = (ROOT / args.preset).is_file()
    if args.preset in preset_names() or shipped:
        plugins = [str(ROOT / plugin) for plugin in args.plugins]
        load_experiment(
            str(ROOT / args.preset) if shipped else args.preset, args.overrides, plugins
        )
