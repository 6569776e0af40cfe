"""Hypothesis strategies for murmur's inputs: config values, --set strings, TOML files,
IDX data files, edge lists and run folders, good and bad alike.

Every strategy draws plain data (argv fragments, bytes to write); the tests in
test_input_properties.py write the files into a fresh folder and run murmur.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import types
import typing
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from hypothesis import strategies as st

from murmur.algorithms.compressors import COMPRESSORS
from murmur.config import SECTIONS, preset_names, read_preset
from murmur.data import DATASETS
from murmur.registry import ALGORITHMS
from murmur.sections import (
    CollapseConfig,
    DataConfig,
    FaultsConfig,
    ModelConfig,
    RunConfig,
    TimingConfig,
    TopologyConfig,
)
from murmur.topology.graphs import GRAPHS

SECTION_CLASSES = {
    "run": RunConfig,
    "data": DataConfig,
    "model": ModelConfig,
    "topology": TopologyConfig,
    "timing": TimingConfig,
    "faults": FaultsConfig,
    "collapse": CollapseConfig,
}

# ---------------------------------------------------------------- presets and keys


@cache
def preset_for_algorithm() -> dict[str, str]:
    """The shipped single-run preset of each algorithm with the smallest dataset."""
    best: dict[str, tuple[int, str]] = {}
    for name in preset_names():
        _, raw = read_preset(name)
        if "compare" in raw:
            continue
        algorithm = raw.get("algorithm", {}).get("name")
        dataset = raw.get("data", {}).get("dataset", "mnist5k")
        size = DATASETS[dataset].train if dataset in DATASETS else 10**9
        if algorithm and (algorithm not in best or size < best[algorithm][0]):
            best[algorithm] = (size, name)
    return {algorithm: name for algorithm, (_, name) in best.items()}


@dataclass(frozen=True)
class Key:
    section: str
    name: str
    hint: Any

    @property
    def dotted(self) -> str:
        return f"{self.section}.{self.name}"


def _fields(section: str, cls: type) -> list[Key]:
    hints = typing.get_type_hints(cls)
    return [Key(section, f.name, hints[f.name]) for f in dataclasses.fields(cls)]


SECTION_KEYS = [key for section, cls in SECTION_CLASSES.items() for key in _fields(section, cls)]


def keys_for(algorithm: str) -> list[Key]:
    """Every config key of a run of ``algorithm``: the sections' and its own."""
    own = _fields("algorithm", ALGORITHMS[algorithm].config)
    return [*SECTION_KEYS, *own, Key("algorithm", "name", str)]


def all_keys() -> list[Key]:
    seen: dict[str, Key] = {}
    for algorithm in ALGORITHMS:
        for key in keys_for(algorithm):
            seen.setdefault(key.dotted, key)
    return list(seen.values())


COMPANIONS = {
    "data.root": ["data.dataset=mnist", "data.dataset=fashion-mnist"],
    "topology.edges_file": ["topology.graph=edges"],
    "topology.degree": ["topology.graph=circular"],
    "topology.probability": ["topology.graph=erdos_renyi"],
    "topology.rows": ["topology.graph=torus"],
    "data.labels_per_agent": ["data.partition=labels"],
    "data.dirichlet_alpha": ["data.partition=dirichlet"],
    "timing.noise_sigma": ["timing.compute_noise=lognormal"],
    "timing.straggler_factor": ["timing.stragglers=1"],
    "algorithm.fraction": ["algorithm.compress=topk", "algorithm.compress=randk"],
    "algorithm.levels": ["algorithm.compress=qsgd"],
    "algorithm.node_step": ["algorithm.grow=true"],
    "algorithm.node_tolerance": ["algorithm.grow=true"],
    "algorithm.layer_tolerance": ["algorithm.grow=true"],
    "algorithm.consensus_tolerance": ['algorithm.gossip_rounds="auto"'],
    "algorithm.target_loss": ["algorithm.workers=2"],
}
"""Settings under which a key matters: data.root only counts for on-disk datasets."""


FAST = ["data.dataset=blobs", "model.hidden=[8]", "topology.agents=4", "data.batch_size=8"]
"""Overrides that make any run small: generated ones come after and win."""


def short_run(algorithm: str) -> list[str]:
    """Overrides for a real run of ``algorithm`` that takes well under a second."""
    spec = ALGORITHMS[algorithm]
    extra = ["run.iterations=3", "run.eval_every=2"]
    if spec.kind in ("server", "hogwild"):
        extra.append("algorithm.workers=2")
    if spec.kind == "layerwise":
        extra += ["algorithm.layers=1", "algorithm.nodes=12", "algorithm.admm_iterations=5"]
    if algorithm == "dssfn":
        extra.append("algorithm.gossip_cap=50")
    return [*FAST, *extra]


def as_sets(items: list[str]) -> list[str]:
    """``--set=ITEM`` for each item (the = form: an item may start with '-')."""
    return [f"--set={item}" for item in items]


# ---------------------------------------------------------------- TOML literals


def toml_string(text: str) -> str:
    out = ['"']
    for char in text:
        if char == '"':
            out.append('\\"')
        elif char == "\\":
            out.append("\\\\")
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def toml_literal(value: Any) -> str:
    """``value`` written as a TOML value (inline tables for dicts)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_literal(item) for item in value) + "]"
    if isinstance(value, dict):
        pairs = (f"{toml_string(str(k))} = {toml_literal(v)}" for k, v in value.items())
        return "{" + ", ".join(pairs) + "}"
    raise TypeError(f"no TOML for {value!r}")


# ---------------------------------------------------------------- config values

ARGV_CHARACTERS = st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))
"""What a shell can pass in an argument: anything but NUL (non-UTF-8 bytes aside)."""


def argv_text(min_size: int = 0, max_size: int = 12) -> st.SearchStrategy[str]:
    return st.text(ARGV_CHARACTERS, min_size=min_size, max_size=max_size)


BOUNDARY_INTS = [
    0,
    -1,
    1,
    2,
    3,
    7,
    2**31 - 1,
    2**31,
    2**32,
    2**53 + 1,
    2**63 - 1,
    2**63,
    2**64,
    -(2**63),
    -(2**63) - 1,
    10**30,
]
BOUNDARY_FLOATS = [
    0.0,
    -0.0,
    0.5,
    1.0,
    -1.0,
    1e-6,
    5e-324,
    2.2250738585072014e-308,
    1e-45,
    1e38,
    3.4028234663852886e38,
    3.5e38,
    1e308,
    1.7976931348623157e308,
    -1e308,
    2.0**63,
    math.inf,
    -math.inf,
    math.nan,
]
STRINGS = [
    "",
    " ",
    "auto",
    "none",
    "x" * 5000,
    "nan",
    "inf",
    "0",
    "-1",
    "ring",
    "edges",
    "mnist",
    "blobs",
    "mnist5k",
    "/",
    ".",
    "..",
    "~",
    "~nobody-here/x",
    "a" * 300,
    "/dev/null",
    "\x00",
    "é",
    "\U0001f642",
    "a\nb",
]
RAW_LITERALS = [
    "1979-05-27T07:32:00Z",
    "1979-05-27",
    "07:32:00",
    "1e400",
    "-1e400",
    "0x7fffffffffffffff",
    "0xffffffffffffffffff",
    "0o777",
    "0b101",
    "1_000",
    "+inf",
    "-nan",
    "{a = {b = 1}}",
    "[[1, 2], [3]]",
    '[1, "a", [2]]',
    "[]",
    "{}",
    "[1,",
    '"abc',
    "tru",
    "1e",
    "'''",
]
"""Value texts as typed after ``=``: TOML dates, overflowing floats, syntax errors."""

scalars = st.one_of(
    st.sampled_from(BOUNDARY_INTS),
    st.integers(),
    st.sampled_from(BOUNDARY_FLOATS),
    st.floats(),
    st.booleans(),
    st.sampled_from(STRINGS),
    st.text(max_size=12),
)
values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)
"""Any TOML value: wrong types and boundary values of every kind."""

KNOWN_STRINGS = {
    "dataset": sorted(DATASETS),
    "graph": list(GRAPHS),
    "compress": list(COMPRESSORS),
    "name": sorted(ALGORITHMS),
    "root": ["", "."],
    "edges_file": ["", "edges.txt"],
}


def good_values(key: Key) -> st.SearchStrategy[Any]:
    """Values of the right type, mostly in range."""
    return _typed(key.name, key.hint)


def _typed(name: str, hint: Any) -> st.SearchStrategy[Any]:
    origin = typing.get_origin(hint)
    if origin is Literal:
        return st.sampled_from(typing.get_args(hint))
    if origin is tuple:
        (item,) = {a for a in typing.get_args(hint) if a is not Ellipsis}
        return st.lists(_typed(name, item), max_size=4)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(_typed(name, member) for member in typing.get_args(hint)))
    if hint is bool:
        return st.booleans()
    if hint is int:
        return st.integers(0, 8) | st.sampled_from(BOUNDARY_INTS)
    if hint is float:
        return (
            st.floats(1e-4, 10.0)
            | st.sampled_from([0.0, 0.05, 0.5, 1.0, 2.0, 100.0])
            | st.sampled_from(BOUNDARY_FLOATS)
        )
    if hint is str:
        return st.sampled_from(KNOWN_STRINGS.get(name, ["", "x"])) | st.sampled_from(STRINGS)
    raise TypeError(f"no strategy for {hint!r}")


def value_texts(key: Key) -> st.SearchStrategy[str]:
    """What follows ``section.key=`` on the command line."""
    return st.one_of(
        good_values(key).map(toml_literal),
        values.map(toml_literal),
        st.sampled_from(RAW_LITERALS),
        argv_text(),
    )


SMALL = {
    "run.iterations": st.integers(-2, 5),
    "run.threads": st.integers(-1, 2),
    "data.batch_size": st.integers(-1, 64) | st.just(4096),
    "model.hidden": st.lists(st.integers(-1, 16), max_size=3),
    "topology.agents": st.integers(-1, 8),
    "algorithm.workers": st.integers(-1, 4),
    "algorithm.layers": st.integers(-1, 2),
    "algorithm.nodes": st.integers(-1, 30),
    "algorithm.admm_iterations": st.integers(-1, 10),
    "algorithm.gossip_rounds": st.integers(-1, 10) | st.just("auto"),
    "algorithm.gossip_cap": st.integers(-1, 50),
    "algorithm.max_delay": st.integers(-1, 8),
    "algorithm.node_step": st.integers(-1, 20),
    "data.dataset": st.sampled_from(["blobs", "synthetic", "vowel", "digits", "mnist5k", "x"]),
}
"""Keys whose large values make a run legitimately long: real runs draw them small
(or of a wrong type); --check draws them from everything."""

WRONG_TYPES = st.one_of(
    st.sampled_from([1.5, -0.0, math.nan, math.inf, "", "3", True, [], [1], {}]),
    argv_text(max_size=6),
)


LARGE_STEPS = [10.0, 100.0, 1e4, 1e10, 1e20, 1e38, 3.4e38]
"""Steps large enough to make training diverge within a few iterations."""


def real_value_texts(key: Key) -> st.SearchStrategy[str]:
    if key.dotted in STEP_KEYS:
        return st.sampled_from(LARGE_STEPS).map(toml_literal) | value_texts(key)
    if key.dotted in SMALL:
        return st.one_of(SMALL[key.dotted], WRONG_TYPES).map(toml_literal)
    return value_texts(key)


STEP_KEYS = {
    "algorithm.a",
    "algorithm.b",
    "algorithm.gamma",
    "algorithm.momentum",
    "algorithm.lam",
    "algorithm.mu",
    "algorithm.mu0",
    "algorithm.eta",
}
"""Step sizes and regularizers: the values that decide whether training diverges."""


@dataclass(frozen=True)
class RunCase:
    algorithm: str
    preset: str
    sets: tuple[str, ...]
    """Every --set item, base overrides first."""
    check: bool


@st.composite
def config_cases(draw: st.DrawFn, check: bool) -> RunCase:
    """A preset of some algorithm with 1 to 3 generated ``section.key=value`` overrides."""
    presets = preset_for_algorithm()
    algorithm = draw(st.sampled_from(sorted(presets)))
    keys = keys_for(algorithm)
    generated = []
    valid = {key.dotted for key in keys}
    steps = [key for key in keys if key.dotted in STEP_KEYS]
    for _ in range(draw(st.integers(1, 3) if check else st.integers(1, 2))):
        key = draw(st.sampled_from(keys))
        if not check and steps and draw(st.integers(0, 2)) == 0:
            key = draw(st.sampled_from(steps))  # real runs: steps that may diverge, often
        companions = [c for c in COMPANIONS.get(key.dotted, []) if c.split("=")[0] in valid]
        if companions and draw(st.booleans()):
            generated.append(draw(st.sampled_from(companions)))
        if check:
            generated.append(f"{key.dotted}={draw(value_texts(key))}")
        elif key.dotted == "algorithm.name":
            # Another algorithm keeps its own (default, large) sizes: make them small again.
            name = draw(st.sampled_from(sorted(ALGORITHMS)) | WRONG_TYPES.map(toml_literal))
            generated.append(f"algorithm.name={name}")
            if name in ALGORITHMS:
                generated += [s for s in short_run(name) if s.startswith("algorithm.")]
        else:
            generated.append(f"{key.dotted}={draw(real_value_texts(key))}")
    if check:
        base = FAST if draw(st.booleans()) else []
    else:
        base = short_run(algorithm)
    return RunCase(algorithm, presets[algorithm], (*base, *generated), check)


# ---------------------------------------------------------------- --set strings

BROKEN_TOML = [
    "[1,",
    '"abc',
    "'abc",
    "{a=",
    "{a=1,}",
    "1__0",
    "0x",
    "0xZZ",
    "1e",
    "+nan",
    "--1",
    "tru",
    "[[]",
    '"""',
    "'''",
    '"\\x41"',
    '"\\ud800"',
    '"\\U0010FFFF"',
    "[1, 2",
    "= 1",
    "1 2",
    "# comment",
    "",
]


@st.composite
def set_strings(draw: st.DrawFn) -> str:
    """Text given to --set: well-formed or not, known keys or not."""
    known = [key.dotted for key in all_keys()]
    form = draw(st.integers(0, 5))
    if form == 0:
        return draw(argv_text(max_size=30))
    if form == 1:
        return draw(argv_text(max_size=30).filter(lambda t: "=" not in t))
    if form == 2:
        # Text as the OS hands over argv bytes that are not UTF-8 (surrogate escapes).
        raw = draw(st.binary(max_size=12)).replace(b"\x00", b"") + b"\xff"
        prefix = draw(st.sampled_from(["", "run.seed=", "data.dataset=", "topology.edges_file="]))
        return prefix + raw.decode("utf-8", "surrogateescape")
    section = draw(
        st.sampled_from(SECTIONS)
        | st.sampled_from(["", "Run", "run ", " run", "compare", "extends", "description"])
        | argv_text(max_size=8)
    )
    key = draw(
        st.sampled_from([k.split(".", 1)[1] for k in known])
        | st.sampled_from(["", "name", "a.b", "seed ", "NAME", "__class__", "hidden[0]"])
        | argv_text(max_size=8)
    )
    value = draw(
        st.sampled_from(BROKEN_TOML) | st.sampled_from(RAW_LITERALS) | values.map(toml_literal)
    )
    equals = draw(st.sampled_from(["=", "==", " = ", "=\t", ":", "", "=="]))
    if form == 3:
        return f"{section}.{key}{equals}{value}"
    if form == 4:
        return draw(st.sampled_from(known)) + "=" + value
    return f"{section}{equals}{value}"


# ---------------------------------------------------------------- TOML documents


@dataclass(frozen=True)
class TomlCase:
    text: bytes
    """The document's bytes, written as cfg.toml."""
    others: tuple[tuple[str, bytes], ...]
    """Other files next to it (other.toml extends back to cfg.toml: a loop)."""
    folders: tuple[str, ...]
    relative: bool
    """Pass "cfg.toml" (relative to the working folder) rather than its full path."""
    fast: bool


def _toml_key(name: str) -> str:
    if name and all(c.isascii() and (c.isalnum() or c in "-_") for c in name):
        return name
    return toml_string(name)


def render_document(entries: list[tuple[str, str, Any]]) -> str:
    """Entries (kind, name, value): "value" at top level, "table" as [name],
    "array" as [[name]] tables; top-level values come first, as TOML needs."""
    lines = [f"{_toml_key(n)} = {toml_literal(v)}" for kind, n, v in entries if kind == "value"]
    for kind, name, value in entries:
        if kind == "table":
            lines.append(f"\n[{_toml_key(name)}]")
            lines += [f"{_toml_key(k)} = {toml_literal(v)}" for k, v in value.items()]
        elif kind == "array":
            for table in value:
                lines.append(f"\n[[{_toml_key(name)}]]")
                lines += [f"{_toml_key(k)} = {toml_literal(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


EXTENDS = [
    "missing",
    "missing.toml",
    "cfg.toml",
    "other.toml",
    "sub",
    "sub/../cfg.toml",
    "./cfg.toml",
    "a" * 300 + ".toml",
    "a" * 5000,
    "",
    "/",
    ".",
    "/dev/null",
    "sub/",
    "a\x00b.toml",
    "~nobody-here/x.toml",
]


@st.composite
def section_tables(draw: st.DrawFn) -> tuple[str, str, Any]:
    algorithm = draw(st.sampled_from(sorted(ALGORITHMS)))
    keys = keys_for(algorithm)
    section = draw(st.sampled_from(SECTIONS) | st.text(min_size=1, max_size=6))
    kind = draw(st.sampled_from(["table", "table", "table", "value", "array"]))
    if kind == "value":
        return ("value", section, draw(values))
    table: dict[str, Any] = {}
    for _ in range(draw(st.integers(0, 3))):
        candidates = [k for k in keys if k.section == section] or keys
        key = draw(st.sampled_from(candidates))
        if draw(st.integers(0, 4)) == 0:
            table[draw(st.text(min_size=1, max_size=6))] = draw(values)
        else:
            table[key.name] = draw(good_values(key) | values)
    if section == "algorithm" and draw(st.booleans()):
        table["name"] = algorithm
    if kind == "array":
        return ("array", section, [table] * draw(st.integers(1, 2)))
    return ("table", section, table)


@st.composite
def compare_members(draw: st.DrawFn) -> Any:
    presets = preset_names()
    return draw(
        st.one_of(
            st.sampled_from(presets),
            st.sampled_from(["missing", "cfg.toml", "", "default"]),
            st.text(max_size=6),
            scalars,
            st.fixed_dictionaries(
                {"preset": st.sampled_from(presets) | scalars},
                optional={
                    "label": st.sampled_from(["a", "a", "../x", ".hidden", "", "a/b"]) | scalars,
                    "set": st.lists(st.sampled_from(FAST) | st.text(max_size=10), max_size=3)
                    | scalars,
                    "other": scalars,
                },
            ),
            st.dictionaries(st.text(max_size=5), scalars, max_size=2),
        )
    )


@st.composite
def well_formed_documents(draw: st.DrawFn) -> bytes:
    """A config that extends a shipped preset and sets known keys to well-typed values."""
    presets = preset_for_algorithm()
    algorithm = draw(st.sampled_from(sorted(presets)))
    entries: list[tuple[str, str, Any]] = [("value", "extends", presets[algorithm])]
    if draw(st.booleans()):
        entries.append(("value", "description", draw(st.text(max_size=20))))
    tables: dict[str, dict[str, Any]] = {}
    for key in draw(st.lists(st.sampled_from(keys_for(algorithm)), max_size=4, unique=True)):
        if key.dotted != "algorithm.name":
            tables.setdefault(key.section, {})[key.name] = draw(good_values(key))
    entries += [("table", section, table) for section, table in tables.items()]
    return render_document(entries).encode()


@st.composite
def toml_cases(draw: st.DrawFn) -> TomlCase:
    if draw(st.integers(0, 3)) == 0:
        return TomlCase(
            text=draw(well_formed_documents()),
            others=(),
            folders=(),
            relative=draw(st.booleans()),
            fast=True,
        )
    entries: list[tuple[str, str, Any]] = []
    branch = draw(st.integers(0, 5))
    if branch in (1, 2, 3):
        entries.append(("value", "extends", draw(st.sampled_from(EXTENDS))))
    elif branch == 4:
        entries.append(("value", "extends", draw(st.sampled_from(preset_names()) | scalars)))
    if draw(st.integers(0, 3)) == 0:
        entries.append(("value", "description", draw(st.text(max_size=10) | scalars)))
    if draw(st.integers(0, 3)) == 0:
        members = draw(st.lists(compare_members(), max_size=3) | values)
        entries.append(("value", "compare", members))
    for _ in range(draw(st.integers(0, 4))):
        entries.append(draw(section_tables()))
    text = render_document(entries).encode()
    mutation = draw(st.integers(0, 14))
    if mutation == 0:
        cut = draw(st.integers(0, len(text)))
        text = text[:cut]
    elif mutation == 1:
        at = draw(st.integers(0, len(text)))
        junk = draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b"\xfe\xff"]))
        text = text[:at] + junk + text[at:]
    elif mutation == 2:
        text = draw(st.sampled_from([b"\xef\xbb\xbf", b"\xff\xfe"])) + text
    elif mutation == 3:
        text = text.replace(b"\n", draw(st.sampled_from([b"\r\n", b"\r", b"\x0b"])))
    elif mutation == 4:
        text = draw(st.binary(max_size=40))
    other = render_document([("value", "extends", "cfg.toml")]).encode()
    return TomlCase(
        text=text,
        others=(("other.toml", other),),
        folders=("sub",),
        relative=draw(st.booleans()),
        fast=draw(st.booleans()),
    )


# ---------------------------------------------------------------- IDX files

IDX_IMAGES = 0x00000803
IDX_LABELS = 0x00000801


def idx_bytes(magic: int, dims: list[int], data: bytes) -> bytes:
    header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in dims)
    return header + data


def tiny_idx_set() -> dict[str, bytes]:
    """A valid MNIST-format set: 20 training and 10 test images of 28x28, labels 0..9."""
    files = {}
    for split, count in (("train", 20), ("t10k", 10)):
        pixels = bytes((i * 37 + j) % 256 for i in range(count) for j in range(784))
        files[f"{split}-images-idx3-ubyte"] = idx_bytes(IDX_IMAGES, [count, 28, 28], pixels)
        files[f"{split}-labels-idx1-ubyte"] = idx_bytes(
            IDX_LABELS, [count], bytes(i % 10 for i in range(count))
        )
    return files


IDX_DIMS = [0, 1, 2, 3, 7, 10, 20, 28, 255, 256, 2**16, 2**31 - 1, 2**31, 2**32 - 1]


IDX_OPS = (
    "flip",
    "truncate",
    "extend",
    "dims",
    "random",
    "magic",
    "gzip",
    "folder",
    "remove",
    "bad-label",
    "zero-images",
)


@dataclass(frozen=True)
class IdxCase:
    ops: tuple[tuple[str, str, Any], ...]
    """Changes to the tiny valid set: (file, operation, argument), applied in order."""
    dataset: str
    check: bool

    def files(self) -> dict[str, bytes | None]:
        """File name -> bytes (None: a folder of that name instead of a file)."""
        files: dict[str, bytes | None] = dict(tiny_idx_set())
        for name, op, arg in self.ops:
            content = files.get(name)
            if content is None:
                continue
            images = "images" in name
            if op == "flip" and content:
                at = arg[0] % len(content)
                content = content[:at] + bytes([content[at] ^ arg[1]]) + content[at + 1 :]
            elif op == "truncate":
                content = content[: arg % (len(content) + 1)]
            elif op == "extend":
                content = content + arg
            elif op == "dims":
                dims, refill = arg
                data = content[4 + 4 * len(dims) :]
                if refill and math.prod(dims) <= 10**6:
                    data = bytes(i % 10 for i in range(math.prod(dims)))
                content = idx_bytes(IDX_IMAGES if images else IDX_LABELS, list(dims), data)
            elif op == "random":
                content = arg
            elif op == "magic":
                content = arg.to_bytes(4, "big") + content[4:]
            elif op == "gzip":
                files.pop(name)
                name = name + ".gz"
                content = gzip.compress(content, mtime=0)
                if arg is not None:
                    content = content[: arg % (len(content) + 1)]
            elif op == "folder":
                content = None
            elif op == "remove":
                files.pop(name)
                continue
            elif op == "bad-label" and not images and len(content) > 8:
                at = 8 + arg[0] % (len(content) - 8)
                content = content[:at] + bytes([arg[1]]) + content[at + 1 :]
            elif op == "zero-images":
                dims = [0, 28, 28] if images else [0]
                content = idx_bytes(IDX_IMAGES if images else IDX_LABELS, dims, b"")
            files[name] = content
        return files


def _idx_argument(draw: st.DrawFn, name: str, op: str) -> Any:
    position = st.integers(0, 20000)
    if op == "flip":
        return (draw(position), draw(st.integers(1, 255)))
    if op in ("truncate",):
        return draw(position)
    if op in ("extend", "random"):
        return draw(st.binary(min_size=op == "extend", max_size=64))
    if op == "dims":
        ndim = 3 if "images" in name else 1
        return (tuple(draw(st.sampled_from(IDX_DIMS)) for _ in range(ndim)), draw(st.booleans()))
    if op == "magic":
        return draw(st.sampled_from([0x803, 0x801, 0x802, 0x804, 0x0800, 0xFFFFFFFF]))
    if op == "gzip":
        return draw(st.none() | position)
    if op == "bad-label":
        return (draw(position), draw(st.integers(10, 255)))
    return None


@st.composite
def idx_cases(draw: st.DrawFn) -> IdxCase:
    names = sorted(tiny_idx_set())
    ops = []
    for _ in range(draw(st.integers(0, 3))):
        name = draw(st.sampled_from(names))
        op = draw(st.sampled_from(IDX_OPS))
        ops.append((name, op, _idx_argument(draw, name, op)))
    return IdxCase(
        ops=tuple(ops),
        dataset=draw(st.sampled_from(["mnist", "mnist", "mnist", "fashion-mnist"])),
        check=draw(st.integers(0, 3)) > 0,
    )


# ---------------------------------------------------------------- edge files

ODD_DIGITS = ["\u0663", "\u00b2", "\uff13", "\u2460", "\u0e53", "\U0001d7ce", "\u09e9", "\u00bd"]
"""Characters Python calls digits (str.isdigit) or numeric that are not ASCII 0-9."""


@st.composite
def edge_tokens(draw: st.DrawFn) -> str:
    return draw(
        st.one_of(
            st.integers(0, 9).map(str),
            st.sampled_from(BOUNDARY_INTS).map(str),
            st.sampled_from(ODD_DIGITS),
            st.sampled_from(["+1", "-1", "1.0", "0x1", "1e3", "01", "٣", "nan", "", "0" * 50]),
            st.text(max_size=4),
        )
    )


@st.composite
def edge_lines(draw: st.DrawFn) -> str:
    form = draw(st.integers(0, 7))
    if form <= 2:
        i, j = draw(st.integers(0, 9)), draw(st.integers(0, 9))
        return f"{i} {j}"
    if form == 3:
        return " ".join(draw(st.lists(edge_tokens(), min_size=1, max_size=3)))
    if form == 4:
        return f"{draw(edge_tokens())}\t{draw(edge_tokens())}  # {draw(st.text(max_size=5))}"
    if form == 5:
        return draw(st.sampled_from(["", "#", "   ", "# i j"]))
    if form == 6:
        i = draw(st.integers(0, 9))
        return f"{i} {i}"
    return draw(st.text(max_size=12))


@dataclass(frozen=True)
class EdgeCase:
    content: bytes | None
    """The edge file's bytes; None: a folder at that path."""
    agents: str | None
    """topology.agents as typed, or None to keep the base value (4)."""
    check: bool


@st.composite
def edge_cases(draw: st.DrawFn) -> EdgeCase:
    if draw(st.integers(0, 2)) == 0:
        # A clean list for the 4 agents of the base run: pairs, comments, blank lines.
        pairs = st.tuples(st.integers(0, 3), st.integers(0, 3)).filter(lambda p: p[0] != p[1])
        clean = st.one_of(
            pairs.map(lambda p: f"{p[0]} {p[1]}"),
            pairs.map(lambda p: f" {p[0]}\t{p[1]}  # edge"),
            st.sampled_from(["", "# i j", "   "]),
        )
        lines = ["0 1", "1 2", "2 3", *draw(st.lists(clean, max_size=8))]
        newline = draw(st.sampled_from(["\n", "\r\n"]))
        text = newline.join(draw(st.permutations(lines))) + draw(st.sampled_from(["", newline]))
        return EdgeCase(text.encode(), None, check=draw(st.booleans()))
    lines = draw(st.lists(edge_lines(), max_size=12))
    if draw(st.booleans()):
        lines += ["0 1", "1 2", "2 3"]  # often connected for 4 agents
    newline = draw(st.sampled_from(["\n", "\n", "\r\n", "\r", "\u2028", "\x1c", "\x85"]))
    text = newline.join(lines)
    form = draw(st.integers(0, 9))
    if form == 0:
        content: bytes | None = text.encode("utf-16")
    elif form == 1:
        raw = text.encode()
        at = draw(st.integers(0, len(raw)))
        content = raw[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\x80"])) + raw[at:]
    elif form == 2:
        content = None
    elif form == 3:
        content = draw(st.binary(max_size=40))
    else:
        content = text.encode("utf-8", "surrogatepass")
    agents = draw(st.none() | st.integers(1, 12).map(str) | st.sampled_from(["0", "-1", "2"]))
    return EdgeCase(content, agents, check=draw(st.integers(0, 4)) > 0)


# ---------------------------------------------------------------- run folders

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from(BOUNDARY_INTS + BOUNDARY_FLOATS + STRINGS[:12]),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=10,
)
SPECIAL_JSON = [
    math.inf,
    -math.inf,
    math.nan,
    10**400,
    1e308,
    -1,
    0,
    "\ud800",
    "x",
    "",
    None,
    True,
    [],
    {},
    [math.nan],
    {"mean": math.inf, "per_agent": [math.inf]},
    {"histogram": [-1, 1e308]},
]
"""Summary and record values a writer of runs never produces but a damaged file may hold."""
RAW_JSON = {
    "empty": b"",
    "open brace": b"{",
    "list": b"[]",
    "null": b"null",
    "NaN": b"NaN",
    "empty object": b"{}",
    "5000-digit integer": b"1" * 5000,
    "5000-digit accuracy": b'{"accuracy": ' + b"1" * 5000 + b"}",
    "lone surrogate name": b'{"name": "\\ud800"}',
    "lone surrogate algorithm": b'{"algorithm": "\\udcff", "accuracy": {"mean": 0.5}}',
    "100000 nested lists": b"[" * 100000 + b"]" * 100000,
    "infinite numbers": b'{"accuracy": {"mean": Infinity}, "messages": -Infinity}',
    "two objects": b'{"a": 1}{"b": 2}',
    "UTF-16 mark": b"\xff\xfe{}",
    "byte 0xff in a string": b'{"name": "\xff"}',
    "UTF-8 BOM": b'\xef\xbb\xbf{"name": "bom"}',
}
"""JSON texts that break parsers: huge integers, lone surrogates, deep nesting, bad bytes."""

SUMMARY_KEYS = [
    "status",
    "name",
    "preset",
    "algorithm",
    "dataset",
    "agents",
    "topology",
    "iterations",
    "seed",
    "accuracy",
    "test_loss",
    "events",
    "events_per_agent",
    "messages",
    "bytes",
    "communication_saving",
    "consensus_distance",
    "wall_seconds",
    "train_seconds",
    "samples",
    "samples_per_second",
    "run_dir",
    "virtual_seconds",
    "workers",
    "staleness",
    "train_loss",
    "target_loss",
    "iterations_to_target",
    "virtual_seconds_to_target",
    "layers",
    "train_accuracy",
    "mean_degree",
    "failed_agents",
    "speedup",
    "single_samples_per_second",
    "error",
]
RECORD_KEYS = [
    "iteration",
    "samples",
    "wall_seconds",
    "test_accuracy",
    "test_loss",
    "accuracy_mean",
    "accuracy_min",
    "accuracy_max",
    "train_loss",
    "consensus_distance",
    "events",
    "messages",
    "bytes",
    "events_per_agent",
    "virtual_seconds",
    "staleness",
]


@dataclass(frozen=True)
class ReportCase:
    base: str
    """Which finished run folder to start from (see test_input_properties.BASE_RUNS)."""
    summary: tuple[tuple[str, Any], ...]
    """Mutations of summary.json: ("set", key, value) etc. as (op, payload) pairs."""
    metrics: tuple[tuple[str, Any], ...]
    nested: bool
    """Two runs in a parent folder (the second untouched), passed as the parent."""


def _json_ops(draw: st.DrawFn, keys: list[str], lines: bool) -> tuple[tuple[str, Any], ...]:
    ops = []
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.integers(0, 8))
        if op <= 2:
            key = draw(st.sampled_from(keys) | st.text(max_size=5))
            ops.append(("set", (key, draw(st.sampled_from(SPECIAL_JSON) | json_values))))
        elif op == 3:
            ops.append(("delete", draw(st.sampled_from(keys))))
        elif op == 4:
            ops.append(("replace", json.dumps(draw(json_values)).encode()))
        elif op == 5:
            ops.append(("replace-raw", draw(st.sampled_from(sorted(RAW_JSON)))))
        elif op == 6:
            ops.append(
                ("insert", draw(st.sampled_from([b"\xff", b"\x00", b"\xc3", b"\n\n", b"NaN"])))
            )
        elif op == 7 and lines:
            if draw(st.booleans()):
                ops.append(("append-raw", draw(st.sampled_from(sorted(RAW_JSON)))))
            else:
                ops.append(("append", json.dumps(draw(json_values)).encode()))
        else:
            ops.append((draw(st.sampled_from(["remove", "folder", "empty"])), None))
    return tuple(ops)


@st.composite
def report_cases(draw: st.DrawFn) -> ReportCase:
    return ReportCase(
        base=draw(st.sampled_from(["sgd", "server", "layerwise"])),
        summary=_json_ops(draw, SUMMARY_KEYS, lines=False),
        metrics=_json_ops(draw, RECORD_KEYS, lines=True),
        nested=draw(st.integers(0, 3)) == 0,
    )


# ---------------------------------------------------------------- paths

PATHS = [
    "",
    " ",
    ".",
    "..",
    "/",
    "/dev/null",
    "/proc/self/fd",
    "~",
    "~nobody-here",
    "~nobody-here/x",
    "a" * 300,
    "a/" * 3000,
    "x" * 5000,
    "\x00",
    "a\x00b",
    "file.txt",
    "file.txt/x",
    "folder",
    "folder/",
    "sub/../folder",
    "loop",
    "loop/x",
    "dangling",
    "é",
    "\udcff",
    "-x",
]
"""Paths of every awkward kind; test_path_values makes file.txt, folder (not empty),
loop (a symlink to itself) and dangling (a symlink to nothing) in the working folder."""

PATH_TARGETS = ("source", "out", "data.root", "topology.edges_file", "report", "report-out")


@dataclass(frozen=True)
class PathCase:
    target: str
    """Where the path goes: the preset argument, --out, a config key, or report's arguments."""
    path: str
    dataset: str


@st.composite
def path_cases(draw: st.DrawFn) -> PathCase:
    target = draw(st.sampled_from(PATH_TARGETS))
    path = draw(st.sampled_from(PATHS) | st.text(min_size=1, max_size=8))
    if target in ("source", "out", "report", "report-out"):
        path = path.replace("\x00", "")  # no argument holds a NUL byte
    if target == "source" and draw(st.booleans()):
        path += ".toml"
    return PathCase(target, path, draw(st.sampled_from(["mnist", "fashion-mnist"])))


def set_value(text: str) -> str:
    """``text`` as typed after ``key=``: a TOML string, or bare when TOML cannot hold it."""
    if any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        return text
    return toml_string(text)
