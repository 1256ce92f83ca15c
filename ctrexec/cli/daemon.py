"""``ctrexec daemon start|stop|status``: the embedded containerd."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ctrexec.cli._common import ArgumentParser

if TYPE_CHECKING:
    from ctrexec import EmbeddedContainerd


def _daemon() -> EmbeddedContainerd:
    """Imported on use: the daemon module loads grpc and the stubs."""
    from ctrexec import EmbeddedContainerd

    return EmbeddedContainerd()


def cmd_start(args: argparse.Namespace) -> int:
    d = _daemon()
    d.start()
    print(d.address)
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    d = _daemon()
    d.stop(kill_tasks=not args.keep_tasks)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    d = _daemon()
    pid = d.pid()
    print(f"running (pid {pid}) at {d.address}" if pid else "not running")
    return 0 if pid else 1


def register(sub: argparse._SubParsersAction[ArgumentParser]) -> None:
    p = sub.add_parser("daemon", help="the embedded containerd")
    dsub = p.add_subparsers(dest="daemon_command", metavar="COMMAND", parser_class=ArgumentParser)
    dsub.required = True
    dsub.add_parser("start", help="start it (no-op if running)").set_defaults(func=cmd_start)
    c = dsub.add_parser("stop", help="kill its tasks, stop it, detach its mounts")
    c.add_argument("--keep-tasks", action="store_true", help="leave tasks (and shims) running")
    c.set_defaults(func=cmd_stop)
    dsub.add_parser("status", help="is it running").set_defaults(func=cmd_status)
