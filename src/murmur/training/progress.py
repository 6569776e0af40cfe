"""The progress bar of a run: on stderr, and only where stderr is a terminal.

A bar redraws itself with carriage returns, which a log file or a pipe (a test's
captured stderr, ``murmur launch``'s ranks behind a pipe, CI) would keep as
garbage; so a bar asked for (``progress``) is drawn only when stderr is a TTY.
"""

from __future__ import annotations

from tqdm import tqdm


def progress_bar(progress: bool, total: int, *, initial: int = 0, unit: str = "it") -> tqdm:
    """A bar of ``total`` steps from ``initial``; silent unless ``progress`` and stderr
    is a terminal (tqdm's ``disable=None``)."""
    return tqdm(
        total=total,
        initial=initial,
        disable=None if progress else True,
        unit=unit,
        leave=False,
        dynamic_ncols=True,
    )
