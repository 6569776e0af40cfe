"""How the distributed runtime words ranks and errors in the messages it tells the user."""

from __future__ import annotations

import re
from collections.abc import Sequence


def rank_list(ranks: Sequence[int]) -> str:
    """``rank 2`` or ``ranks 1, 3``."""
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def first_line(error: BaseException) -> str:
    """The gist of an error: torch's C++ errors run on for pages, gloo's start with a
    source location and end with advice."""
    text = str(error).strip()
    line = text.splitlines()[0] if text else type(error).__name__
    line = re.sub(r"^\[[^\]]*\.(cc|cpp|h):\d+\]\s*", "", line)
    return line.split(". This is typically")[0]
