"""``ctrexec events``: the task event stream as JSON lines, like ``docker events``.

There is no ``--since``: containerd keeps no event history to replay (Events.Subscribe
only streams what is published while it is registered).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

from ctrexec import CtrexecError, InvalidArgument
from ctrexec.cli._common import (
    ArgumentParser,
    connect,
    connection_flags,
    signal_pipe,
    until_signal,
)

if TYPE_CHECKING:
    from ctrexec import TaskEvents

#: ``--filter`` keys and the EventOptions entry each feeds; ``task`` is ctrexec's word.
FILTER_KEYS = {"container": "tasks", "task": "tasks", "group": "groups", "event": "types"}


def parse_filters(items: list[str]) -> dict[str, Any]:
    """docker's ``--filter key=value`` list as Executor.events keywords."""
    options: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not value:
            raise InvalidArgument(f"events: bad filter {item!r}: expected KEY=VALUE")
        if key == "label":
            name, has_value, want = value.partition("=")
            options.setdefault("labels", {})[name] = want if has_value else None
        elif key in FILTER_KEYS:
            options.setdefault(FILTER_KEYS[key], []).append(value)
        else:
            known = ", ".join([*FILTER_KEYS, "label"])
            raise InvalidArgument(f"events: unknown filter {key!r} (expected one of: {known})")
    return options


def cmd_events(args: argparse.Namespace) -> int:
    """Print events until SIGINT or SIGTERM (exit 0) or until the stream fails (125).

    The handlers do nothing: the signal's byte on the wakeup pipe is what wakes the
    main thread, which then cancels the stream; the printing runs on its own thread,
    and its end (the stream failed, or stdout closed) ends the wait as well.
    """
    from ctrexec import EventFilter, TaskEvents

    options = parse_filters(args.filter or [])
    EventFilter.of(**options)  # a bad event type is refused before connecting, as bad flags are
    stream = TaskEvents.of(connect(args), **options)
    failure: list[BaseException] = []
    printer = threading.Thread(
        target=_print_events, args=(stream, failure), name="ctrexec-events-print"
    )
    with signal_pipe((signal.SIGINT, signal.SIGTERM)) as wakeup:
        printer.start()
        try:
            until_signal(wakeup, printer.is_alive)
        finally:
            stream.cancel()
            printer.join()
    if failure and isinstance(failure[0], CtrexecError):
        raise failure[0]
    return 0


def _print_events(stream: TaskEvents, failure: list[BaseException]) -> None:
    import json

    try:
        for event in stream:
            sys.stdout.write(json.dumps(event.to_json(), sort_keys=True) + "\n")
            sys.stdout.flush()
    except BrokenPipeError:
        pass  # the reader went away (``ctrexec events | head``): done
    except CtrexecError as exc:
        failure.append(exc)


def register(sub: argparse._SubParsersAction[ArgumentParser]) -> None:
    p = sub.add_parser(
        "events",
        parents=[connection_flags()],
        help="stream task events as JSON lines (until interrupted)",
        description="Stream the events of ctrexec's tasks as JSON lines: start, exit, oom, "
        "pause, resume, exec-start, exec-exit, delete, and missed (the stream broke "
        "and reconnected: list again). containerd keeps no history, so there is no --since.",
    )
    p.add_argument(
        "--filter",
        "-f",
        action="append",
        metavar="KEY=VALUE",
        help="container=ID, group=NAME, label=KEY[=VALUE], event=TYPE (docker's names "
        "too: die, unpause, exec_start, exec_die, destroy); repeat a key for any of "
        "several values",
    )
    p.set_defaults(func=cmd_events)
