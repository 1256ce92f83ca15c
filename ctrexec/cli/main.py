"""Entry point: build the parser from the command modules and map errors to exit codes."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import sys
import threading
from collections.abc import Collection, Sequence
from typing import NoReturn, cast

from ctrexec import AmbiguousPrefix, CtrexecError, NotFound, UnknownCommand
from ctrexec.cli import (
    _common,
    archives,
    attach,
    copy,
    daemon,
    doctor,
    events,
    groups,
    images,
    info,
    inspect,
    netns,
    registry,
    tasks,
    verbs,
    volumes,
)

#: Verbs on one container for which ``No such container`` (or a prefix of several
#: names) exits 1, as docker's do and as the verbs on several names do (see
#: cli.verbs.each); their other failures keep ctrexec's 125, and run and create
#: (which make the container) keep 125 for all.
SINGLE_CONTAINER_VERBS = frozenset(
    {"logs", "top", "port", "exec", "inspect", "stats", "attach", "rename"}
)
NO_SUCH_CONTAINER = 1

COMMAND_MODULES = (
    info, tasks, inspect, verbs, attach, copy, images, registry, archives, groups, events, netns,
    volumes, daemon, doctor,
)  # fmt: skip


def build_parser(only: Collection[str] | None = None) -> _common.ArgumentParser:
    """The whole parser; with ``only``, the parsers of those verbs alone are built (see
    :class:`~ctrexec.cli._common.VerbParsers`), the others named with their help."""
    _common.look_up_messages_once()
    parser = _common.ArgumentParser(
        prog="ctrexec",
        description="Run containers through containerd in pre-created network namespaces.",
    )
    _common.global_flags(parser)
    sub = parser.add_subparsers(
        dest="command",
        metavar="COMMAND",
        parser_class=_common.ArgumentParser,
        action=_common.VerbParsers,
    )
    cast(_common.VerbParsers, sub).only = only
    sub.required = True
    for module in COMMAND_MODULES:
        module.register(sub)
    for verb in SINGLE_CONTAINER_VERBS:
        sub.choices[verb].set_defaults(missing_exit=NO_SUCH_CONTAINER)
    return parser


#: The flags before the verb that take a value (``global_flags``).
_VALUED_GLOBALS = frozenset({"--address", "-H", "--host", "--namespace", "-n"})


def verb_of(argv: Sequence[str]) -> str | None:
    """The word that should be the verb: the first that is neither a flag before it nor
    such a flag's value; None when there is none (``ctrexec --help``)."""
    words = iter(argv)
    for word in words:
        if word in _VALUED_GLOBALS:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


#: The environment a parser's text depends on beyond the code: the defaults that
#: ``--help`` shows (ctrexec's and containerd's variables) and the locale that gettext
#: looks a catalogue of argparse's messages up for.
_PARSER_ENV_PREFIXES = ("CTREXEC_", "CONTAINERD_")
_LOCALE_ENV = frozenset({"LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG"})
#: The whole parser built ahead (:func:`build_parser_ahead`), by the environment it
#: was built in.
_ahead: dict[tuple[tuple[str, str], ...], _common.ArgumentParser] = {}


def _parser_environment() -> tuple[tuple[str, str], ...]:
    return tuple(
        sorted(
            (key, value)
            for key, value in os.environ.items()
            if key.startswith(_PARSER_ENV_PREFIXES) or key in _LOCALE_ENV
        )
    )


def build_parser_ahead() -> None:
    """Build every verb's parser now, for a command to come.

    The command server calls this before it forks: a child whose environment is the
    one the parser was built in takes the parser (its fork's copy, used once) instead
    of building its own, 2-3 ms of each command. It is never parsed with here.
    """
    _ahead.clear()
    _ahead[_parser_environment()] = build_parser()


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line parsed by the one verb's parser it needs; all of them are built
    only when the guess of :func:`verb_of` led elsewhere."""
    words = sys.argv[1:] if argv is None else list(argv)
    built = _ahead.pop(_parser_environment(), None) if _ahead else None
    _ahead.clear()  # one parse each: a parser's actions may keep what they saw
    if built is not None:
        return built.parse_args(words)
    verb = verb_of(words)
    try:
        return build_parser(only=() if verb is None else (verb,)).parse_args(words)
    except _common.NotBuilt:
        return build_parser().parse_args(words)


def main(argv: Sequence[str] | None = None) -> int:
    missing_exit = None
    error_exits: Sequence[tuple[type[CtrexecError], int]] = ()
    try:
        args = parse(argv)
        missing_exit = getattr(args, "missing_exit", None)
        # (kind, code) pairs a verb sets where docker's code for a refusal is not 125
        error_exits = getattr(args, "error_exits", ())
        code: int = args.func(args)
    except UnknownCommand as err:  # docker's two lines: what was typed, then a way on
        print(f"ctrexec: {_common.bounded(str(err))}\n{err.hint}", file=sys.stderr)
        return err.exit_code
    except CtrexecError as err:
        code = _common.fail(err)
        for kind, kind_code in error_exits:
            if isinstance(err, kind):
                return kind_code
        missing = isinstance(err, NotFound | AmbiguousPrefix)
        return missing_exit if missing_exit and missing else code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError as err:
        if not output_closed():
            # Not our reader gone: a pipe of ours (a daemon's socket) broke. Said, not
            # taken for a quiet success (a wait once printed nothing and exited 0).
            print(f"ctrexec: {_common.bounded(str(err))}", file=sys.stderr)
            return _common.EXIT_ERROR
        return 0  # `ctrexec ps | head -1`: the reader has what it wanted
    return code


def output_closed() -> bool:
    """Whether the reader of stdout or stderr is gone (``| head``), as opposed to some
    other pipe or socket: a pipe whose read end is closed polls POLLERR at its write
    end, a socket whose peer went POLLHUP."""
    import select  # only a broken pipe pays for it

    poll = select.poll()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError, OSError):
            poll.register(stream.fileno(), 0)  # POLLERR and POLLHUP are always reported
    return any(event & (select.POLLERR | select.POLLHUP) for _, event in poll.poll(0))


def entry() -> NoReturn:
    """The ``ctrexec`` program: :func:`main`, then exit without tearing Python down.

    Interpreter finalization frees every module (grpc, the protobuf descriptor pools,
    the attrs classes) one by one: about 30 ms of each command on this machine, a
    tenth of ``run -d``, spent on a process that is ending anyway. The part of it that
    is observable is done here first, in the same order: non-daemon threads are
    joined (with ``concurrent.futures``' exit hooks), atexit handlers run (logging's
    flush among them), and stdout and stderr are flushed.
    """
    finish(main())


def finish(code: int) -> NoReturn:
    """Exit with ``code`` as :func:`entry` does (the command server's children too)."""
    if observed():
        sys.exit(code)  # cProfile, coverage or a debugger writes its results at exit
    _finish_like_finalization()
    os._exit(code)


def observed() -> bool:
    """Whether a profiler, coverage tool or debugger watches this interpreter, so that
    :func:`finish` must exit through finalization for it to write its results.

    Such tools used ``sys.setprofile``/``sys.settrace``; from Python 3.12 they may use
    ``sys.monitoring`` instead (cProfile always does, coverage with its ``sysmon`` core),
    which leaves both hooks unset and is only seen as a tool id in use.
    """
    if sys.getprofile() is not None or sys.gettrace() is not None:
        return True
    monitoring = getattr(sys, "monitoring", None)  # Python 3.12+
    if monitoring is None:
        return False
    tools = (monitoring.DEBUGGER_ID, monitoring.COVERAGE_ID, monitoring.PROFILER_ID)
    return any(monitoring.get_tool(tool) is not None for tool in tools)


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
