"""Plugins: the Python files and modules that bring a run its own algorithms.

A plugin is a Python file, or an importable module, that registers what it adds through
:mod:`murmur.extend` when it is imported. A run names its plugins in ``run.plugins``
(or in a TOML file's top-level ``plugins`` list, paths relative to that file, or with
``--plugin`` on the command line); packages installed with an entry point in the group
``murmur.plugins`` are imported by every run. Every process that builds a run imports
them first: ``murmur run``, ``--resume``, each rank of ``murmur launch`` or of a user's
own ``torchrun``.

A file is imported once per process, as a module of its own, and known by its absolute
path and the SHA-256 of its bytes; a module by its name and the SHA-256 of its source
files. A run's plan records each digest in ``run.plugins_sha256``, so a run resumed
from its folder refuses a plugin that has changed since. Whatever goes wrong while a
plugin is imported (no such file or module, an exception in it, a name it registers
that is taken) is one line naming the plugin, and what it had registered is taken back.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from types import ModuleType
from typing import Literal

from murmur.algorithms.compressors import COMPRESSORS
from murmur.errors import UsageError, shortened
from murmur.models.networks import FACTORIES
from murmur.origins import RegistrationError, registering_as
from murmur.registry import ALGORITHMS, forget
from murmur.sections import ModelConfig
from murmur.topology.graphs import GRAPHS

ENTRY_POINTS = "murmur.plugins"
"""The entry-point group whose modules every run imports (installed packages)."""


@dataclass(frozen=True)
class Plugin:
    """One imported plugin."""

    spec: str
    """As a run names it: a file's absolute path, or a module's name."""
    sha256: str
    """The SHA-256 of its source: the file's bytes, or the module's files."""
    names: tuple[tuple[Kind, str], ...]
    """What it registered: (``algorithm``, ``compressor`` or ``graph``, the name)."""

    def summaries(self) -> list[str]:
        """One line for each name it registered: kind, name, origin and summary."""
        return [
            f"{kind} {name} from {self.origin}: {_summary(kind, name)}" for kind, name in self.names
        ]

    @property
    def origin(self) -> str:
        return origin_of(self.spec)


_LOADED: dict[str, Plugin] = {}
"""The plugins this process imported, by spec."""
_MODULES: dict[str, ModuleType | None] = {}
"""Their modules, by spec."""
_INSTALLED: list[Plugin] = []
_INSTALLED_DONE: list[bool] = [False]


def origin_of(spec: str) -> str:
    """How messages and listings name a plugin."""
    return f"plugin {spec}"


def is_file(spec: str) -> bool:
    """Whether a plugin spec names a file (it ends in .py or holds a path separator)
    rather than a module."""
    return spec.endswith(".py") or "/" in spec or "\\" in spec


def resolved(spec: str, folder: Path) -> str:
    """A file spec made absolute against ``folder``; a module name as it is."""
    if not isinstance(spec, str) or not spec.strip() or "\0" in spec:
        raise UsageError(
            f"a plugin is a .py file or a module name, not {shortened(repr(spec), 80)}"
        )
    return str((folder / spec).resolve()) if is_file(spec) else spec


def load_plugins(specs: Sequence[str], pinned: Sequence[str] = ()) -> tuple[Plugin, ...]:
    """Import the plugins ``specs`` (and the installed ones) unless this process has;
    a relative file path is relative to the current directory; ``pinned``: the SHA-256
    each must still have (empty: any)."""
    load_installed()
    if pinned and len(pinned) != len(specs):
        raise UsageError(
            f"run.plugins_sha256 has {len(pinned)} digests for {len(specs)} plugins: "
            "give one per plugin, or none"
        )
    plugins = []
    for index, given in enumerate(specs):
        spec = resolved(given, Path.cwd())
        plugin = _load(spec, pinned[index] if pinned else "")
        plugins.append(plugin)
    return tuple(plugins)


def load_installed() -> tuple[Plugin, ...]:
    """Import every installed package's entry point in :data:`ENTRY_POINTS`, once."""
    if not _INSTALLED_DONE[0]:
        _INSTALLED_DONE[0] = True
        for point in entry_points(group=ENTRY_POINTS):
            package = point.dist.name if point.dist is not None else point.value
            spec = f"{point.value} (package {package}, entry point {point.name})"
            _INSTALLED.append(_imported(spec, partial(_entry_module, point)))
    return tuple(_INSTALLED)


def _entry_module(point: EntryPoint) -> ModuleType | None:
    """The module an entry point names (or holds the object it names), imported."""
    loaded = point.load()
    return loaded if isinstance(loaded, ModuleType) else sys.modules.get(loaded.__module__)


def loaded_plugins() -> tuple[Plugin, ...]:
    """Every plugin this process imported, installed ones first."""
    return tuple(_INSTALLED) + tuple(_LOADED.values())


def load_factory(model: ModelConfig) -> None:
    """Make ``model.factory``'s function known to :func:`murmur.models.build_model`; its
    plugin is imported already (:func:`load_plugins`)."""
    spec, name = model.factory_parts()
    module = _MODULES.get(resolved(spec, Path.cwd()))
    function = getattr(module, name, None)
    if not callable(function):
        raise UsageError(f"model.factory {model.factory}: {origin_of(spec)} has no function {name}")
    FACTORIES[model.factory] = function


def forget_loaded() -> None:
    """Take back what the plugins named by spec registered, and forget them: the next
    run that names one imports it again (installed plugins stay)."""
    for plugin in _LOADED.values():
        _forget(set(plugin.names))
    _LOADED.clear()
    _MODULES.clear()
    FACTORIES.clear()


def _load(spec: str, pinned: str) -> Plugin:
    """One plugin, imported unless it already was, checked against its pin."""
    digest = _digest_before(spec)
    if pinned and digest and digest != pinned:
        raise UsageError(
            f"{origin_of(spec)} has changed since the run was planned: sha256 {digest}, "
            f"the run's {pinned}; restore it, or start a new run"
        )
    known = _LOADED.get(spec)
    if known is not None:
        if digest and digest != known.sha256:
            raise UsageError(
                f"{origin_of(spec)} has changed since this process imported it; "
                "run it in a new process"
            )
        return known
    module: list[ModuleType | None] = []
    plugin = _imported(spec, lambda: _remembered(module, _import(spec, digest)))
    if pinned and plugin.sha256 != pinned:
        raise UsageError(
            f"{origin_of(spec)} has changed since the run was planned: sha256 "
            f"{plugin.sha256}, the run's {pinned}; restore it, or start a new run"
        )
    _LOADED[spec] = plugin
    _MODULES[spec] = module[0]
    return plugin


def _remembered(into: list[ModuleType | None], module: ModuleType | None) -> ModuleType | None:
    into.append(module)
    return module


def _digest_before(spec: str) -> str:
    """A file plugin's SHA-256 before it is imported ("" for a module: known after)."""
    if not is_file(spec):
        return ""
    path = Path(spec)
    if not path.is_file():
        raise UsageError(f"{origin_of(spec)}: no such file")
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as error:
        raise UsageError(f"{origin_of(spec)}: cannot read it ({error.strerror})") from None


def _import(spec: str, digest: str) -> ModuleType:
    """Import a file as a module of its own name, or a module by its name."""
    if not is_file(spec):
        if importlib.util.find_spec(spec.split(".")[0]) is None:
            raise UsageError(
                f"{origin_of(spec)}: no module of that name is installed (a file's "
                "name ends in .py)"
            )
        return importlib.import_module(spec)
    name = f"murmur_plugin_{Path(spec).stem.replace('-', '_')}_{digest[:12]}"
    found = importlib.util.spec_from_file_location(name, spec)
    if found is None or found.loader is None:
        raise UsageError(f"{origin_of(spec)}: not a Python file it can import")
    module = importlib.util.module_from_spec(found)
    sys.modules[name] = module
    try:
        found.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _imported(spec: str, do_import: Callable[[], ModuleType | None]) -> Plugin:
    """Run ``do_import`` with what it registers marked as the plugin's; one line for
    whatever goes wrong, with the plugin's registrations taken back."""
    before = set(_registered())
    try:
        with registering_as(origin_of(spec)):
            module = do_import()
    except UsageError:
        _forget_new(before)
        raise
    except RegistrationError as error:
        _forget_new(before)
        raise UsageError(f"{origin_of(spec)}: {error}") from None
    except SyntaxError as error:
        _forget_new(before)
        raise UsageError(
            f"{origin_of(spec)}: invalid Python at line {error.lineno}: {error.msg}"
        ) from None
    except Exception as error:
        _forget_new(before)
        where = _user_frame(error)
        raise UsageError(
            f"{origin_of(spec)}: importing it raised {type(error).__name__}: "
            f"{shortened(str(error), 200)}{where}"
        ) from None
    names = tuple(entry for entry in _registered() if entry not in before)
    return Plugin(spec, _source_digest(spec, module), names)


Kind = Literal["algorithm", "compressor", "graph"]


def _registered() -> list[tuple[Kind, str]]:
    """Every registered name, with its kind."""
    kinds: list[tuple[Kind, Iterable[str]]] = [
        ("algorithm", ALGORITHMS),
        ("compressor", COMPRESSORS),
        ("graph", GRAPHS),
    ]
    return [(kind, name) for kind, names in kinds for name in names]


def _summary(kind: Kind, name: str) -> str:
    if kind == "algorithm":
        return ALGORITHMS[name].summary
    return (COMPRESSORS if kind == "compressor" else GRAPHS)[name].summary


def _forget_new(before: set[tuple[Kind, str]]) -> None:
    _forget({entry for entry in _registered() if entry not in before})


def _forget(entries: set[tuple[Kind, str]]) -> None:
    """Take the names ``entries`` out of their registries."""
    for kind, name in entries:
        if kind == "algorithm" and name in ALGORITHMS:
            forget(name)
        elif kind == "compressor":
            COMPRESSORS.pop(name, None)
        elif kind == "graph":
            GRAPHS.pop(name, None)


def _user_frame(error: BaseException) -> str:
    """`` (file, line N)`` of the innermost frame the error passed through."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    return f" ({last.filename}, line {last.lineno})"


def _source_digest(spec: str, module: ModuleType | None) -> str:
    """The SHA-256 of a plugin's source: a file's bytes, a module's file, or every
    ``.py`` file of a package in path order."""
    if is_file(spec):
        return hashlib.sha256(Path(spec).read_bytes()).hexdigest()
    location = getattr(module, "__file__", None)
    if location is None:
        return ""
    path = Path(location)
    files = sorted(path.parent.rglob("*.py")) if path.name == "__init__.py" else [path]
    digest = hashlib.sha256()
    for file in files:
        digest.update(str(file.relative_to(path.parent)).encode() + b"\0")
        digest.update(file.read_bytes())
    return digest.hexdigest()
