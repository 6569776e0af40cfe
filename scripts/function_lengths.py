"""List the functions of ``src/`` longer than the limit (60 lines, from ``def`` to the
last line of the body, docstring included); exit 1 when there is one.

    python scripts/function_lengths.py [--limit 60] [paths ...]

CI runs it, so that no function grows past the limit unnoticed.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from pathlib import Path

LIMIT = 60


def long_functions(path: Path, limit: int) -> Iterator[tuple[str, int, int]]:
    """(qualified name, first line, length) of each function in ``path`` over ``limit``."""
    tree = ast.parse(path.read_text(), filename=str(path))

    def visit(node: ast.AST, prefix: str) -> Iterator[tuple[str, int, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                length = (child.end_lineno or child.lineno) - child.lineno + 1
                if length > limit:
                    yield name, child.lineno, length
                yield from visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, f"{prefix}{child.name}.")

    yield from visit(tree, "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=["src"])
    parser.add_argument("--limit", type=int, default=LIMIT)
    args = parser.parse_args(argv)
    found = []
    for root in map(Path, args.paths):
        files = sorted(root.rglob("*.py")) if root.is_dir() else [root]
        for path in files:
            found += [(path, *entry) for entry in long_functions(path, args.limit)]
    for path, name, line, length in sorted(found, key=lambda entry: -entry[3]):
        print(f"{path}:{line}: {name} is {length} lines (limit {args.limit})")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
