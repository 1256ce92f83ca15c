"""``ctrexec netns create|ls|inspect|rm``: pinned network namespaces."""

from __future__ import annotations

import argparse

import attrs

from ctrexec import netns
from ctrexec.cli._common import ArgumentParser, json_flag, print_json, print_table


def cmd_create(args: argparse.Namespace) -> int:
    ns = netns.create(args.name, exist_ok=args.exist_ok)
    print(ns.path)
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    items = netns.list_namespaces()
    if args.json:
        print_json([attrs.asdict(n) for n in items])
    else:
        print_table(["NAME", "PATH"], [[n.name, n.path] for n in items])
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    info = netns.inspect(netns.resolve(args.name))
    print_json(attrs.asdict(info))
    return 0


def cmd_rm(args: argparse.Namespace) -> int:
    for name in args.names:
        netns.remove(netns.resolve(name))
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
    c = nsub.add_parser("ls", parents=[json_flag()], help="list namespaces")
    c.set_defaults(func=cmd_ls)
    c = nsub.add_parser("inspect", help="interfaces, addresses and routes as JSON")
    c.add_argument("name")
    c.set_defaults(func=cmd_inspect)
    c = nsub.add_parser("rm", help="remove namespaces")
    c.add_argument("names", nargs="+")
    c.set_defaults(func=cmd_rm)
