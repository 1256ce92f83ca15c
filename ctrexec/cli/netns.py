"""``ctrexec netns create|ls|inspect|rm``: pinned network namespaces."""

from __future__ import annotations

import argparse

from ctrexec.cli._common import (
    ArgumentParser,
    connect,
    connection_flags,
    executor,
    json_flag,
    print_json,
    print_table,
)

# Each command imports what it uses: ls and create need neither grpc nor pyroute2.


def cmd_create(args: argparse.Namespace) -> int:
    from ctrexec import create_netns

    ns = create_netns(args.name, exist_ok=args.exist_ok)
    print(ns.path)
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    """Every name in /run/netns, which ones ctrexec made, and what uses each."""
    import attrs

    from ctrexec import netns_usage

    rows = netns_usage()
    if args.json:
        print_json(
            [
                {
                    "name": u.name,
                    "path": u.path,
                    "ctrexec": u.made_by_ctrexec,
                    "users": [attrs.asdict(x) for x in u.users],
                }
                for u in rows
            ]
        )
    else:
        print_table(
            ["NAME", "PATH", "CREATED BY", "USED BY"],
            [
                [
                    u.name,
                    u.path,
                    "ctrexec" if u.made_by_ctrexec else "-",
                    ", ".join(map(str, u.users)) or "-",
                ]
                for u in rows
            ],
        )
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    import attrs

    from ctrexec import inspect_netns, netns_usage

    (use,) = netns_usage(args.name)
    info = attrs.asdict(inspect_netns(use.path))
    with connect(args) as client:
        users = executor(args, client).tasks_in_netns(use.path)
    info["tasks"] = [{"id": i.id, "status": i.status.value, "pid": i.pid} for i in users]
    info["ctrexec"] = use.made_by_ctrexec
    info["users"] = [attrs.asdict(u) for u in use.users]
    print_json(info)
    return 0


def cmd_rm(args: argparse.Namespace) -> int:
    with connect(args) as client:
        ex = executor(args, client)
        for name in args.names:
            ex.remove_netns(name, force=args.force)
            print(name)
    return 0


def register(sub: argparse._SubParsersAction[ArgumentParser]) -> None:
    p = sub.add_parser("netns", help="manage pinned network namespaces")
    nsub = p.add_subparsers(dest="netns_command", metavar="COMMAND", parser_class=ArgumentParser)
    nsub.required = True
    c = nsub.add_parser("create", help="create /run/netns/NAME with loopback up")
    c.add_argument("--exist-ok", action="store_true", help="succeed if it already exists")
    c.add_argument("name")
    c.set_defaults(func=cmd_create)
    c = nsub.add_parser(
        "ls", parents=[json_flag()], help="list namespaces: made by ctrexec or not, used by what"
    )
    c.set_defaults(func=cmd_ls)
    c = nsub.add_parser(
        "inspect",
        parents=[connection_flags()],
        help="interfaces, addresses, routes, tasks, what else uses it",
    )
    c.add_argument("name")
    c.set_defaults(func=cmd_inspect)
    c = nsub.add_parser("rm", parents=[connection_flags()], help="remove namespaces")
    c.add_argument(
        "-f",
        "--force",
        action="store_true",
        help="remove even while in use: stop its tasks first; other users keep it alive",
    )
    c.add_argument("names", nargs="+")
    c.set_defaults(func=cmd_rm)
