"""Run the ctrexec CLI and SIGKILL it at one exact point.

Usage: ``python _killpoint.py POINT -- ARGS...`` where POINT is a key of
``_chaoslib.KILL_POINTS`` or ``DESTROY_KILL_POINTS`` (e.g. ``before-container-create``) and ARGS are the CLI's.
The process kills itself with SIGKILL just before or after that call, so no
``finally`` block, ``except`` clause or atexit handler of ctrexec runs: the same
as an OOM kill or a power cut of the ctrexec process, at a chosen moment.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys

from _chaoslib import DESTROY_KILL_POINTS, KILL_POINTS, hook


def _die() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> int:
    point, sep, *argv = sys.argv[1:]
    points = {**KILL_POINTS, **DESTROY_KILL_POINTS}
    if sep != "--" or point not in points:
        print(__doc__, file=sys.stderr)
        return 2
    module, attr, when = points[point]
    hook(importlib.import_module(module), attr, when, _die)
    from ctrexec.cli.main import main as cli

    return cli(argv)


if __name__ == "__main__":
    sys.exit(main())
