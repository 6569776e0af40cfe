"""scripts/code_shape.py: the figures of a small package written here."""

from __future__ import annotations

from script_modules import load_script


def _script():
    return load_script("code_shape")


def test_the_figures_of_a_package(tmp_path, capsys):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    methods = "".join(f"    def m{i}(self):\n        pass\n" for i in range(21))
    (package / "big.py").write_text(
        "def wide(self, a, b, c, d, e, f, g, h, *rest):\n    return getattr(a, 'x')\n\n"
        "def narrow(a, b):\n    return hasattr(a, b)\n\n"
        f"class Many:\n{methods}"
    )
    (package / "user.py").write_text("from . import big\nfrom pkg.big import wide\n")
    assert _script().main(["--src", str(tmp_path), "--importers", "pkg.big"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "- src/: 51 lines in 3 files"
    assert lines[2] == "- functions with 9+ parameters: 1: pkg.big.wide (9)"
    assert lines[3] == "- classes with more than 20 methods: 1: pkg.big.Many (21)"
    assert lines[4] == "- getattr / hasattr calls: 2"
    assert lines[5] == "- modules importing pkg.big: 1: pkg.user"
    assert _script().main(["--src", str(tmp_path / "nowhere")]) == 2
