"""Errors that mean "the user's input is wrong", as opposed to a bug.

The command line turns a :class:`UsageError` into one line on stderr and exit
status 2; from Python it is an ordinary exception with a message that says what
is wrong and how to fix it.
"""

from __future__ import annotations

import re


class UsageError(ValueError):
    """Bad input from the user: a config value, a CLI argument, a file."""


class RunFailed(UsageError):
    """A run that started but cannot go on because of its input: a step that diverges.

    The run folder keeps what was written and a ``summary.json`` that says why.
    """


_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
"""Characters a terminal takes as a line break or the start of an escape sequence."""


def one_line(message: str) -> str:
    """``message`` with the control characters of quoted input escaped (``\\n``, ``\\x1b``)."""
    return _CONTROL.sub(lambda match: repr(match.group())[1:-1], message)


def shortened(text: str, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters, the last three "...", as a message quotes it."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
