"""Entry point: build the parser from the command modules and map errors to exit codes."""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from collections.abc import Sequence
from typing import NoReturn

from ctrexec.cli import (
    _common,
    archives,
    attach,
    daemon,
    events,
    groups,
    images,
    info,
    inspect,
    netns,
    registry,
    tasks,
    verbs,
)
from ctrexec.errors import CtrexecError

COMMAND_MODULES = (
    info, tasks, inspect, verbs, attach, images, registry, archives, groups, events, netns, daemon,
)  # fmt: skip


def build_parser() -> _common.ArgumentParser:
    parser = _common.ArgumentParser(
        prog="ctrexec",
        description="Run containers through containerd in pre-created network namespaces.",
    )
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=_common.ArgumentParser
    )
    sub.required = True
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        code: int = args.func(args)
    except CtrexecError as err:
        return _common.fail(err)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    return code


def entry() -> NoReturn:
    """The ``ctrexec`` program: :func:`main`, then exit without tearing Python down.

    Interpreter finalization frees every module (grpc, the protobuf descriptor pools,
    the attrs classes) one by one: about 30 ms of each command on this machine, a
    tenth of ``run -d``, spent on a process that is ending anyway. The part of it that
    is observable is done here first, in the same order: non-daemon threads are
    joined (with ``concurrent.futures``' exit hooks), atexit handlers run (logging's
    flush among them), and stdout and stderr are flushed.
    """
    code = main()
    if sys.getprofile() is not None or sys.gettrace() is not None:
        sys.exit(code)  # cProfile, coverage or a debugger writes its results at exit
    _finish_like_finalization()
    os._exit(code)


def _finish_like_finalization() -> None:
    shutdown = getattr(threading, "_shutdown", None)  # what Py_FinalizeEx calls first
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        # a closed pipe (`ctrexec ps | head`) or stream: nothing left to tell anyone
        with contextlib.suppress(OSError, ValueError):
            stream.flush()


if __name__ == "__main__":
    entry()
