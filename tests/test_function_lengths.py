"""scripts/function_lengths.py, which CI runs over src/: it names every function longer
than the limit, methods by their class, and fails only when there is one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "function_lengths.py"


def _function(name: str, lines: int, indent: str = "") -> str:
    """A function of exactly ``lines`` lines, from its ``def`` to its last line."""
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 2))
    return f"{indent}def {name}():\n{body}{indent}    return 0\n"


def _check(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "module.py"
    path.write_text(source)
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, timeout=60
    )


def test_a_function_of_sixty_lines_passes(tmp_path):
    done = _check(tmp_path, _function("short", 60))
    assert done.returncode == 0 and done.stdout == ""


def test_a_function_of_sixty_one_lines_fails_and_is_named(tmp_path):
    done = _check(tmp_path, _function("ok", 10) + _function("long", 61))
    assert done.returncode == 1
    assert done.stdout.splitlines() == [f"{tmp_path / 'module.py'}:11: long is 61 lines (limit 60)"]


def test_methods_are_measured_and_named_with_their_class(tmp_path):
    source = "class Box:\n" + _function("method", 70, indent="    ")
    done = _check(tmp_path, source)
    assert done.returncode == 1 and "Box.method is 70 lines" in done.stdout


def test_src_has_no_function_over_the_limit():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(SCRIPT.parents[1] / "src")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout
