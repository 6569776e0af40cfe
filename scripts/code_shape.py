"""The shape of src/murmur in a few figures, to compare before and after a change of
structure: lines, the largest files, functions with many parameters, classes with many
methods, abilities looked up by name (``getattr`` / ``hasattr``), and which modules
import a given one.

    python scripts/code_shape.py                       # the figures
    python scripts/code_shape.py --importers murmur.distributed.runtime

Counts are read from the source with :mod:`ast`; nothing is imported.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
MANY_PARAMETERS = 9
MANY_METHODS = 20


def modules(src: Path = SRC) -> dict[str, Path]:
    """Each module's dotted name and file."""
    found = {}
    for path in sorted(src.rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """How many parameters a function takes, ``self`` and ``cls`` aside."""
    arguments = node.args
    names = [a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]]
    names += [a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None]
    return len([name for name in names if name not in ("self", "cls")])


def shape(tree: ast.Module) -> tuple[list[tuple[str, int]], list[tuple[str, int]], int]:
    """A module's functions with many parameters, classes with many methods, and its
    ``getattr`` / ``hasattr`` calls."""
    functions, classes, lookups = [], [], 0
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if (count := parameters(node)) >= MANY_PARAMETERS:
                functions.append((node.name, count))
        elif isinstance(node, ast.ClassDef):
            methods = [n for n in node.body if isinstance(n, ast.FunctionDef)]
            if len(methods) > MANY_METHODS:
                classes.append((node.name, len(methods)))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            lookups += node.func.id in ("getattr", "hasattr")
    return functions, classes, lookups


def imported(tree: ast.Module, name: str) -> set[str]:
    """The modules a module imports (absolute names; relative imports resolved
    against ``name``)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".")[: -node.level]
                base = ".".join([*package, base] if base else package)
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return found


def report(importers_of: str | None, src: Path = SRC) -> str:
    """The figures of the package below ``src``, as markdown lines."""
    found = modules(src)
    trees = {name: ast.parse(path.read_text(), str(path)) for name, path in found.items()}
    lines = {name: len(path.read_text().splitlines()) for name, path in found.items()}
    largest = sorted(lines.items(), key=lambda item: -item[1])[:5]
    out = [f"- src/: {sum(lines.values())} lines in {len(found)} files"]
    out.append("- largest: " + ", ".join(f"{name} {count}" for name, count in largest))
    many, big, lookups = [], [], 0
    for name, tree in trees.items():
        functions, classes, calls = shape(tree)
        many += [f"{name}.{f} ({n})" for f, n in dict(functions).items()]  # overloads once
        big += [f"{name}.{c} ({n})" for c, n in classes]
        lookups += calls
    out.append(f"- functions with {MANY_PARAMETERS}+ parameters: {len(many)}: {', '.join(many)}")
    out.append(f"- classes with more than {MANY_METHODS} methods: {len(big)}: {', '.join(big)}")
    out.append(f"- getattr / hasattr calls: {lookups}")
    if importers_of:
        users = sorted(n for n, tree in trees.items() if importers_of in imported(tree, n))
        out.append(f"- modules importing {importers_of}: {len(users)}: {', '.join(users)}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--importers", metavar="MODULE", help="list the modules importing it")
    parser.add_argument("--src", type=Path, default=SRC, help="the source folder (default: src/)")
    args = parser.parse_args(argv)
    if not args.src.is_dir():
        print(f"code_shape: {args.src} is not a folder", file=sys.stderr)
        return 2
    print(report(args.importers, args.src))
    return 0


if __name__ == "__main__":
    sys.exit(main())
