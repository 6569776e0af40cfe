"""Errors that mean "the user's input is wrong", as opposed to a bug.

The command line turns a :class:`UsageError` into one line on stderr and exit
status 2; from Python it is an ordinary exception with a message that says what
is wrong and how to fix it.
"""

from __future__ import annotations


class UsageError(ValueError):
    """Bad input from the user: a config value, a CLI argument, a file."""


class RunFailed(UsageError):
    """A run that started but cannot go on because of its input: a step that diverges.

    The run folder keeps what was written and a ``summary.json`` that says why.
    """
