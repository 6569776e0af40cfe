"""A run's checkpoint: its whole state, saved in its folder to be resumed.

Every ``run.checkpoint_every`` iterations (layers for SSFN), and after the last
one, the simulator's runner hands :meth:`Checkpoints.save` the state it carries from one step to the
next: the algorithm's state, the transport's mailboxes and counters, the batch
streams, the virtual clock and its random streams, the loop's sums. It is
written to ``checkpoint.pt`` with the header below, atomically: into a
temporary file of the same folder, flushed to disk, then renamed over the
previous one, so that a run killed at any moment leaves either the previous
checkpoint or the new one.

The file is one line, ``murmur checkpoint sha256 <digest>``, then what
``torch.save`` writes: plain containers only (dicts, lists, tensors, numbers,
strings; a random generator is its state tensor), read with
``torch.load(weights_only=True)``, so reading a checkpoint runs no pickled
code. The digest covers every byte after the line: a checkpoint truncated or
changed anywhere, in its tensors' data too, is refused.
:func:`read_checkpoint` checks it against the run folder's config before a
resumed run touches anything.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import torch

from murmur.config import Config, same_config
from murmur.errors import UsageError

CHECKPOINT = "checkpoint.pt"
"""The checkpoint's file name in the run folder."""
FORMAT = 2
"""Version of the checkpoint's layout; a checkpoint of another version is refused."""
MAGIC = b"murmur checkpoint sha256 "
"""How a checkpoint's first line starts; the SHA-256 of the rest follows, in hex."""


@dataclass
class Checkpoints:
    """Where a run saves its state, how often, and the state it resumes from."""

    every: int
    """Save every this many steps (iterations, or layers); 0 saves nothing."""
    path: Path | None
    """The checkpoint file; None when the run has no folder (nothing is saved)."""
    header: dict[str, Any]
    """What identifies the run: format, config, name, preset."""
    records: Callable[[], int]
    """How many records the run has written so far."""
    resumed: dict[str, Any] | None = None
    """The checkpoint the run resumes from (``done``, ``records``, the runner's
    ``state``); None for a new run."""
    kept: list[Any] = field(default_factory=list)
    """The records a resumed run keeps from before its checkpoint, oldest first."""

    def due(self, done: int, total: int) -> bool:
        """Whether to save after ``done`` of ``total`` steps: every ``every`` steps and
        after the last one, never before the first."""
        if self.every == 0 or self.path is None:
            return False
        return 0 < done <= total and (done % self.every == 0 or done == total)

    def save(self, done: int, state: Mapping[str, Any]) -> None:
        """Write the runner's ``state`` after ``done`` steps, replacing the previous one."""
        if self.path is None:
            return
        payload = {**self.header, "done": done, "records": self.records(), "state": dict(state)}
        write_atomic(self.path, payload)


def header(config: Config, name: str, preset: str) -> dict[str, Any]:
    """What a checkpoint says of its run, checked when it is resumed."""
    return {"format": FORMAT, "config": config.to_toml(), "name": name, "preset": preset}


def write_atomic(path: Path, payload: Mapping[str, Any]) -> None:
    """``torch.save`` ``payload`` to ``path``, after the line with its checksum, through a
    temporary file of the same folder."""
    buffer = io.BytesIO()
    # on the CPU, so that a run on a GPU resumes on any machine
    torch.save(_on_cpu(dict(payload)), buffer)
    data = buffer.getbuffer()
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(descriptor, 0o644)  # as the run's other files, not mkstemp's 0o600
        with os.fdopen(descriptor, "wb") as file:
            file.write(MAGIC + hashlib.sha256(data).hexdigest().encode() + b"\n")
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    _sync_folder(path.parent)


def _sync_folder(folder: Path) -> None:
    """Make the rename durable (a no-op where folders cannot be opened)."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def read_checkpoint(path: Path, config: Config, run_dir: Path | None = None) -> dict[str, Any]:
    """The checkpoint at ``path``, checked against the ``config`` of its run folder
    ``run_dir`` (the file's folder unless given); UsageError, in one line, if it is
    missing, damaged, of another format or run."""
    if not path.is_file():
        raise UsageError(
            f"{path.parent} has no {CHECKPOINT} to resume from "
            "(a run saves one only with run.checkpoint_every > 0)"
        )
    payload = load_file(path)
    if not isinstance(payload, dict) or not isinstance(payload.get("format"), int):
        raise UsageError(f"{path} is not a murmur checkpoint")
    if payload["format"] != FORMAT:
        raise UsageError(
            f"{path} has checkpoint format {payload['format']}; this murmur reads format {FORMAT}"
        )
    expected = {"config": str, "name": str, "preset": str, "done": int, "records": int}
    for key, kind in expected.items():
        if not isinstance(payload.get(key), kind):
            raise UsageError(f"{path} is damaged: its '{key}' is missing or not a {kind.__name__}")
    if not isinstance(payload.get("state"), dict):
        raise UsageError(f"{path} is damaged: it holds no state")
    if not same_config(payload["config"], config):
        raise UsageError(
            f"{path} was saved by a run of another config than "
            f"{(run_dir or path.parent) / 'config.toml'}; "
            "resume a folder with its own config"
        )
    return payload


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """What the checkpoint file ``path`` holds (``checkpoint.pt``, or a rank's file in a
    distributed run's ``checkpoints/``), once its checksum matches: ``format``,
    ``config`` (the run's config.toml text), ``name``, ``preset``, ``done`` (steps
    finished), ``records`` (lines of metrics.jsonl written by then) and ``state``
    (the runner's state: the algorithm's state record as a dict of tensors, the
    transport's, the batch streams', ...); UsageError, in one line, otherwise."""
    payload = load_file(Path(path))
    if not isinstance(payload, dict):
        raise UsageError(f"{path} is not a murmur checkpoint")
    return payload


def load_file(path: Path) -> Any:
    """What ``path`` holds, once its checksum matches; UsageError otherwise."""
    damaged = f"{path} is damaged (truncated or not a checkpoint)"
    try:
        data = path.read_bytes()
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror}") from None
    line, newline, body = data.partition(b"\n")
    if not line.startswith(MAGIC) or not newline:
        raise UsageError(f"{damaged}: it does not start with murmur's checkpoint line")
    if line[len(MAGIC) :] != hashlib.sha256(body).hexdigest().encode():
        raise UsageError(f"{damaged}: its bytes do not match their checksum")
    try:
        return torch.load(io.BytesIO(body), weights_only=True)
    except Exception as error:
        raise UsageError(f"{damaged}: {type(error).__name__}") from None


def _on_cpu(value: Any) -> Any:
    """``value`` with every tensor in it copied to the CPU (those there already kept)."""
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, dict):
        return {key: _on_cpu(item) for key, item in value.items()}
    if isinstance(value, list | tuple) and not _is_named_tuple(value):
        return type(value)(_on_cpu(item) for item in value)
    return value


# ---------------------------------------------------------------- plain values


def to_plain(value: Any) -> Any:
    """``value`` as what ``torch.load(weights_only=True)`` reads back: a named tuple
    becomes a dict of its fields, a random generator the dict of its state."""
    if isinstance(value, torch.Generator):
        return {"generator": value.get_state()}
    if _is_named_tuple(value):
        return {name: to_plain(item) for name, item in value._asdict().items()}
    if isinstance(value, list | tuple):
        return [to_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: to_plain(item) for key, item in value.items()}
    if value is None or isinstance(value, torch.Tensor | bool | int | float | str):
        return value
    raise TypeError(f"cannot save a {type(value).__name__} in a checkpoint")


def from_plain(value: Any) -> Any:
    """The values :func:`to_plain` made, generators rebuilt from their states."""
    if isinstance(value, dict) and set(value) == {"generator"}:
        generator = torch.Generator()
        generator.set_state(value["generator"])
        return generator
    if isinstance(value, list):
        return [from_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: from_plain(item) for key, item in value.items()}
    return value


def restore_tuple(template: NamedTuple, saved: Mapping[str, Any]) -> Any:
    """A named tuple of ``template``'s type whose fields are the ``saved`` ones; a field
    that is a named tuple in ``template`` (a wrapped algorithm's state, an optimizer's)
    is rebuilt from its own template the same way, and a field that ``saved`` lacks
    (added since it was saved) is left None where its default and ``template``'s
    value are None (a field the algorithm makes at a later step)."""
    fields = template._fields
    if not isinstance(saved, Mapping):
        raise UsageError(f"the checkpoint has a {type(saved).__name__} for the fields {fields}")
    # a field added since the checkpoint was saved, made at a later step, stays unmade
    defaults = getattr(template, "_field_defaults", {})
    newer = {
        name for name in defaults if defaults[name] is None and getattr(template, name) is None
    }
    if not set(fields) - newer <= set(saved) <= set(fields):
        raise UsageError(f"the checkpoint's state has fields {sorted(saved)}, not {sorted(fields)}")
    values = {}
    for name in (known for known in fields if known in saved):
        inner = getattr(template, name)
        nested = _is_named_tuple(inner)
        value = restore_tuple(inner, saved[name]) if nested else from_plain(saved[name])
        if isinstance(inner, torch.Tensor) and isinstance(value, torch.Tensor):
            value = value.to(inner.device)  # saved on the CPU, the run's state on its device
        values[name] = value
    return template._replace(**values)


def _is_named_tuple(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(value, "_fields")
