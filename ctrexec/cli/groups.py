"""``ctrexec group up|down|ps|ls`` and ``ctrexec supervise``."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ctrexec import DEFAULT_LOG_DIR
from ctrexec.cli import publish
from ctrexec.cli._common import (
    ArgumentParser,
    connection_flags,
    executor,
    json_flag,
    print_json,
    signal_pipe,
    until_signal,
)
from ctrexec.cli._common import print_table as table
from ctrexec.cli.registry import add_pull_policy, ensure_images

# The library is imported inside the commands, so the parser and --help load none of it.
if TYPE_CHECKING:
    from ctrexec import Groups, Networks, TaskInfo


def _networks(args: argparse.Namespace) -> Networks:
    from ctrexec import networks_from_env

    return networks_from_env(subnet=args.subnet)


def _groups(args: argparse.Namespace) -> Groups:
    from ctrexec import Groups

    return Groups(executor(args), _networks(args))


def _print(infos: list[TaskInfo], as_json: bool, gone: Sequence[tuple[str, str]] = ()) -> None:
    """The members' rows, then one per ``gone`` member: (id, status) with no container."""
    if as_json:
        print_json([i.to_json() for i in infos] + [{"id": m, "status": s} for m, s in gone])
        return
    rows: list[list[object]] = []
    for i in infos:
        status = i.status.value
        if i.exit is not None:
            status = f"exited ({i.exit.exit_code})" + (
                f" ({i.exit_reason})" if i.exit_reason else ""
            )
        status += "".join(f" ({p.what})" for p in i.problems)
        rows.append([i.id, i.image, status, i.pid or "-", i.netns_path or "-"])
    rows += [[m, "-", status, "-", "-"] for m, status in gone]
    table(["ID", "IMAGE", "STATUS", "PID", "NETNS"], rows)
    from ctrexec.cli.views.ps import problem_lines  # start-up: loaded only to print a table

    for line in problem_lines(infos):  # on stderr: scripts read stdout
        print(line, file=sys.stderr)


def cmd_up(args: argparse.Namespace) -> int:
    from ctrexec import load_group_file

    spec = load_group_file(args.file)
    groups = _groups(args)
    ensure_images(
        groups.executor.client,
        spec.task_configs(),
        args,
        groups.executor.images,
    )
    publish.warn_unsupervised(groups.executor.client, spec.task_configs())
    said = lambda what: print(f"group {spec.name}: {what}", file=sys.stderr)  # noqa: E731
    _print(groups.up(spec, force_recreate=args.force_recreate, on_change=said), args.json)
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    _groups(args).down(args.name, timeout=args.time)
    print(args.name)
    return 0


def cmd_ps(args: argparse.Namespace) -> int:
    groups = _groups(args)
    gone = groups.missing(args.name)
    _print(groups.ps(args.name), args.json, [(m, "missing") for m in gone])
    for member in gone:
        print(groups.missing_message(args.name, member), file=sys.stderr)
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    names = _groups(args).names()
    if args.json:
        print_json(names)
    else:
        for n in names:
            print(n)
    return 0


def cmd_network_prune(args: argparse.Namespace) -> int:
    nets = _networks(args)
    if nets.remove_bridge():  # no bridge: nothing was pruned, nothing to report
        print(f"removed bridge {nets.bridge}")
    return 0


def cmd_supervise(args: argparse.Namespace) -> int:
    import logging

    from ctrexec import Supervisor

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    ex = executor(args)
    # which containerd, and why: a unit's journal then says what it supervises
    choice = ex.client.address_choice
    logging.getLogger("ctrexec.supervise").info(
        "supervising namespace %s on %s (%s)", ex.client.namespace, choice.address, choice.reason
    )
    stop = threading.Event()
    failed: list[BaseException] = []

    def serve() -> None:
        try:
            Supervisor(ex).run(stop)
        except BaseException as exc:  # re-raised in the main thread, as one line
            failed.append(exc)

    # The handlers only write a byte to the pipe (setting the Event takes a lock, which
    # is not safe at any instruction); this thread turns the byte into the stop.
    with signal_pipe((signal.SIGINT, signal.SIGTERM)) as wakeup:
        worker = threading.Thread(target=serve, name="ctrexec-supervise")
        worker.start()
        if until_signal(wakeup, worker.is_alive):
            stop.set()
        worker.join()
    if failed:
        raise failed[0]
    return 0


def register(sub: argparse._SubParsersAction[ArgumentParser]) -> None:
    conn = connection_flags()
    common = ArgumentParser(add_help=False)
    common.add_argument("--log-dir", help=f"where task logs go (default {DEFAULT_LOG_DIR})")
    common.add_argument(
        "--subnet",
        help=f"subnet of ctrexec's bridge network (default: {publish.subnet_default()})",
    )
    p = sub.add_parser("group", help="groups: one network namespace plus its tasks")
    gsub = p.add_subparsers(dest="group_command", metavar="COMMAND", parser_class=ArgumentParser)
    gsub.required = True
    c = gsub.add_parser(
        "up", parents=[conn, common, json_flag()], help="create, recover or update a group"
    )
    c.add_argument("file", help="group file (TOML)")
    c.add_argument(
        "--force-recreate",
        action="store_true",
        help="recreate every member, changed or not (the namespace and address stay)",
    )
    add_pull_policy(c)
    c.set_defaults(func=cmd_up)
    c = gsub.add_parser("down", parents=[conn, common], help="stop and remove a group")
    c.add_argument("-t", "--time", type=float, help="seconds before SIGKILL")
    c.add_argument("name")
    c.set_defaults(func=cmd_down)
    c = gsub.add_parser("ps", parents=[conn, common, json_flag()], help="a group's tasks")
    c.add_argument("name")
    c.set_defaults(func=cmd_ps)
    c = gsub.add_parser("ls", parents=[conn, common, json_flag()], help="list groups")
    c.set_defaults(func=cmd_ls)
    p = sub.add_parser("network", help="ctrexec's bridge network")
    nsub = p.add_subparsers(dest="network_command", metavar="COMMAND", parser_class=ArgumentParser)
    nsub.required = True
    c = nsub.add_parser("prune", parents=[common], help="remove the bridge if nothing uses it")
    c.set_defaults(func=cmd_network_prune)
    p = sub.add_parser(
        "supervise", parents=[conn, common], help="restart tasks by their restart policy"
    )
    p.set_defaults(func=cmd_supervise)
