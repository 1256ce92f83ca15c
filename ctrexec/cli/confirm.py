"""The prunes' ``[y/N]`` question, as docker's, asked only of a person at a terminal.

docker's ``container``/``image``/``system``/``volume prune`` print a warning and read a
line; anything but ``y`` or ``yes`` (either case) removes nothing and exits 0. ctrexec
asks the same on a terminal, and only there: a script without one (stdin not a tty)
proceeds, as with ``-f``, so that a cron job or a pipeline never hangs on a read or
silently does nothing at end of input.
"""

from __future__ import annotations

import sys

#: The answers that go ahead; docker's (compared without case, spaces stripped).
YES = frozenset({"y", "yes"})


def confirmed(warning: str, *, force: bool) -> bool:
    """Whether to go ahead: ``force``, no terminal on stdin, or a ``y``/``yes`` typed
    after ``warning`` and docker's question (printed on stdout, as docker's are)."""
    if force or not sys.stdin.isatty():
        return True
    print(warning)
    print("Are you sure you want to continue? [y/N] ", end="", flush=True)
    return sys.stdin.readline().strip().lower() in YES
