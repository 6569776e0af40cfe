"""Text files given by the user, read as bytes and decoded with a clear error."""

from __future__ import annotations

from pathlib import Path

from murmur.errors import UsageError


def read_utf8(path: Path, name: str, advice: str = "") -> str:
    """The UTF-8 text of ``path``; a one-line UsageError naming it as ``name`` otherwise.

    ``advice`` (e.g. "the file is damaged, remake the run") ends the message.
    """
    tail = f"; {advice}" if advice else ""
    try:
        return path.read_bytes().decode("utf-8")
    except OSError as error:
        raise UsageError(f"cannot read {name}: {error.strerror}{tail}") from None
    except UnicodeDecodeError as error:
        raise UsageError(f"{name} is not UTF-8 text (byte {error.start}){tail}") from None
