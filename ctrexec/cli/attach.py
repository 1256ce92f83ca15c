"""``attach``, and the attached side of ``run -i/-t`` and ``exec -i/-t``.

Each is one library call (``start_attached``, ``exec_stream``, ``attach``) that gives a
:class:`ctrexec.Process`, and a :class:`~ctrexec.cli.terminal.Session` over it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from ctrexec import FailedPrecondition
from ctrexec.cli._common import ArgumentParser, connection_flags, executor, resolver

if TYPE_CHECKING:
    from ctrexec import Executor, Process, StreamOptions, TaskConfig, TaskInfo


def detach_keys_flag(p: ArgumentParser) -> None:
    p.add_argument(
        "--detach-keys",
        default="",
        metavar="KEYS",
        help="the key sequence that detaches, leaving the task running (default ctrl-p,ctrl-q)",
    )


def interactive_flags(p: ArgumentParser, *, detach_keys: bool = False) -> None:
    p.add_argument("-i", "--interactive", action="store_true", help="keep stdin open")
    p.add_argument("-t", "--tty", action="store_true", help="allocate a pseudo-terminal")
    if detach_keys:
        detach_keys_flag(p)


def start_flags(p: ArgumentParser) -> None:
    """``start``'s: docker's ``-a`` and ``-i``, and the detach keys."""
    p.add_argument("-a", "--attach", action="store_true")
    p.add_argument("-i", "--interactive", action="store_true", help="attach stdin (-i tasks)")
    detach_keys_flag(p)


def prepare(args: argparse.Namespace) -> bytes:
    """The checks docker makes before it connects: the detach keys, a terminal for -it."""
    from ctrexec.cli import terminal

    keys = terminal.parse_detach_keys(args.detach_keys)
    terminal.check_input(args.interactive, args.tty)
    return keys


def _session(
    start: Callable[[], Process],
    keys: bytes,
    *,
    tty: bool,
    stdin: bool,
    close_stdin_on_eof: bool = True,
) -> int | None:
    """Serve the process ``start()`` gives, in a session entered before it starts."""
    from ctrexec.cli import terminal

    session = terminal.Session(
        tty=tty, stdin=stdin, detach_keys=keys, close_stdin_on_eof=close_stdin_on_eof
    )
    with session, start() as proc:
        return session.run(proc)


def _outputs() -> StreamOptions:
    from ctrexec.cli import terminal

    sys.stdout.flush()
    return {"on_stdout": terminal.write_out(1), "on_stderr": terminal.write_out(2)}


def run_attached(
    ex: Executor,
    config: TaskConfig,
    keys: bytes,
    *,
    auto_remove: bool,
    remove: Callable[[str], None],
    created: bool = False,
) -> int:
    """``run -i/-t`` without ``-d``: the task's exit code, 0 after a detach.

    ``--rm`` removes the task once the session ends, unless it was a detach (then
    the task runs on, and ``ctrexec supervise`` removes it at its exit). ``created``:
    the container exists already (``run --network`` made it with its owner labels).
    """
    detached = False
    task: TaskConfig | str = config.name if created else config
    try:
        code = _session(
            lambda: ex.start_attached(task, **_outputs())[1],
            keys,
            tty=config.tty,
            stdin=config.stdin_open,
        )
        detached = code is None
    finally:
        if auto_remove and not detached:
            remove(config.name)
    return 0 if code is None else code


def exec_attached(
    ex: Executor, args: argparse.Namespace, env: Mapping[str, str], keys: bytes
) -> int:
    """``exec -i/-t``: the exec's exit code, 0 after a detach (the command runs on)."""
    from ctrexec.cli import terminal

    task_id = resolver(ex.client)(args.id)

    def start() -> Process:
        return ex.exec_stream(
            task_id,
            args.command,
            env=dict(env),
            workdir=args.workdir,
            user=args.user,
            tty=args.tty,
            stdin=args.interactive,
            size=terminal.window_size() if args.tty else None,
            **_outputs(),
        )

    code = _session(start, keys, tty=args.tty, stdin=args.interactive)
    return 0 if code is None else code


def start_attached(ex: Executor, task_id: str, tty: bool, args: argparse.Namespace) -> int:
    """``start -a``/``-i`` of an interactive task: attached from its first byte."""
    from ctrexec.cli import terminal

    keys = terminal.parse_detach_keys(args.detach_keys)
    terminal.check_input(args.interactive, tty)
    code = _session(
        lambda: ex.start_attached(task_id, stdin=args.interactive, **_outputs())[1],
        keys,
        tty=tty,
        stdin=args.interactive,
    )
    return 0 if code is None else code


def cmd_attach(args: argparse.Namespace) -> int:
    from ctrexec.cli import terminal

    keys = terminal.parse_detach_keys(args.detach_keys)
    ex = executor(args)
    task_id = resolver(ex.client)(args.id)
    info = ex.inspect(task_id, addresses=False)
    if info.config is None or not info.config.interactive:
        return _follow_output(ex, task_id, info)
    proc = ex.attach(task_id, stdin=not args.no_stdin, **_outputs())
    stdin = proc.stdin is not None
    try:
        terminal.check_input(stdin, proc.tty)
    except BaseException:
        proc.close()
        raise
    # docker's attach leaves the task's stdin open at a local EOF
    code = _session(lambda: proc, keys, tty=proc.tty, stdin=stdin, close_stdin_on_eof=False)
    return 0 if code is None else code


def _follow_output(ex: Executor, task_id: str, info: TaskInfo) -> int:
    """``attach`` to a task without -i/-t, as docker's: its output from now on until it
    exits, then its exit code; ^C is forwarded to it. Its output is in its log (see
    :mod:`ctrexec.cli.follow`), so a task whose log driver is ``none`` has none to give.
    """
    from ctrexec import Status
    from ctrexec.cli import follow

    if info.status not in (Status.RUNNING, Status.PAUSED):
        raise FailedPrecondition(
            f"You cannot attach to a stopped container {task_id}, start it first"
        )
    info.check_logs()
    driver = info.log_driver
    if driver == "none":
        raise FailedPrecondition(
            f"container {task_id} was started without -i/-t and logs with the none driver: "
            "attach reads a task's output from its log"
        )
    return follow.stream_until_exit(ex, task_id, info.log_path, driver, tail=0)


def register(sub: argparse._SubParsersAction[ArgumentParser]) -> None:
    p = sub.add_parser(
        "attach",
        parents=[connection_flags()],
        help="attach to a running task: its terminal or stdio (-i/-t), else its output",
    )
    p.add_argument("--no-stdin", action="store_true", help="do not attach stdin")
    detach_keys_flag(p)
    p.add_argument("id")
    p.set_defaults(func=cmd_attach)
