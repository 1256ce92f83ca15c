"""``ctrexec volume create|ls|inspect|rm|prune``: docker's volume verbs, on
:class:`ctrexec.Volumes`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ctrexec import CtrexecError, InvalidArgument
from ctrexec.cli import confirm
from ctrexec.cli._common import ArgumentParser, connect, connection_flags, fail, print_json

if TYPE_CHECKING:
    from ctrexec import Volume

#: ``ls --format``'s fields and their ``table`` headers (docker's).
_HEADERS = {
    "Name": "VOLUME NAME",
    "Driver": "DRIVER",
    "Mountpoint": "MOUNTPOINT",
    "Scope": "SCOPE",
    "Labels": "LABELS",
    "CreatedAt": "CREATED",
}
#: docker's exit code when one of the named volumes could not be removed or shown.
NAMED_FAILURE = 1
_LS_DEFAULT = "table {{.Driver}}\t{{.Name}}"


def _labels(pairs: list[str]) -> dict[str, str]:
    found = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        if not key:
            raise InvalidArgument(f"invalid label {pair!r} (expected KEY[=VALUE])")
        found[key] = value
    return found


def cmd_create(args: argparse.Namespace) -> int:
    from ctrexec import Volumes

    labels = _labels(args.label)
    with connect(args) as client:  # for its namespace, which names the volumes' directory
        volume = Volumes(client).create(args.name, labels=labels)
    print(volume.name)
    return 0


def _row(volume: Volume) -> dict[str, str]:
    doc = volume.to_docker()
    labels = ",".join(f"{k}={v}" for k, v in sorted(volume.labels.items()))
    return {**{k: str(v) for k, v in doc.items()}, "Labels": labels}


def cmd_ls(args: argparse.Namespace) -> int:
    from ctrexec import Volumes
    from ctrexec.cli.views import ps as psformat

    text = "{{.Name}}" if args.quiet else args.format or _LS_DEFAULT
    text = "{{json .}}" if text.strip() == "json" else text.replace("\\t", "\t")
    table = text.startswith("table")
    template = psformat.parse_template(text.removeprefix("table").strip())
    with connect(args) as client:
        found = Volumes(client).list(filters=args.filter)
    rows = [psformat.execute(template, _row(v)).split("\t") for v in found]
    if table:
        rows.insert(0, psformat.execute(template, _HEADERS).split("\t"))
    columns = max(map(len, rows), default=0)
    widths = [max(len(r[i]) for r in rows if i < len(r)) for i in range(columns)]
    for r in rows:
        print("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip())
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from ctrexec import Volumes
    from ctrexec.cli.views import ps as psformat

    template = psformat.parse_template(args.format) if args.format else None
    docs, code = [], 0
    with connect(args) as client:
        for name in args.names:
            try:
                docs.append(Volumes(client).get(name).to_docker())
            except CtrexecError as err:
                code = fail(err) and NAMED_FAILURE
    if template is None:
        print_json(docs, sort_keys=False)
    else:
        for doc in docs:
            print(psformat.execute(template, doc))
    return code


def cmd_rm(args: argparse.Namespace) -> int:
    from ctrexec import Volumes

    code = 0
    with connect(args) as client:
        for name in args.names:
            try:
                Volumes(client).remove(name, force=args.force)
            except CtrexecError as err:
                code = fail(err) and NAMED_FAILURE
            else:
                print(name)
    return code


def cmd_prune(args: argparse.Namespace) -> int:
    from ctrexec import Volumes

    which = "all local volumes" if args.all else "anonymous local volumes"
    warning = f"WARNING! This will remove {which} not used by at least one container."
    if not confirm.confirmed(warning, force=args.force):
        return 0
    with connect(args) as client:
        gone = Volumes(client).prune(everything=args.all)
    if gone:
        print("Deleted Volumes:")
        print("\n".join(gone))
        print()
    print("Total reclaimed space: 0B")
    return 0


def register(sub: argparse._SubParsersAction[ArgumentParser]) -> None:
    conn = connection_flags()
    p = sub.add_parser("volume", help="manage volumes")
    vsub = p.add_subparsers(dest="volume_command", metavar="COMMAND", parser_class=ArgumentParser)
    vsub.required = True
    c = vsub.add_parser("create", parents=[conn], help="create a volume")
    c.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
    c.add_argument("name", nargs="?")
    c.set_defaults(func=cmd_create)
    c = vsub.add_parser("ls", parents=[conn], help="list volumes")
    c.add_argument("-q", "--quiet", action="store_true", help="only names")
    c.add_argument("-f", "--filter", action="append", default=[], help="dangling=, name=, label=")
    c.add_argument("--format", help="a Go template, 'table ...' or 'json'")
    c.set_defaults(func=cmd_ls)
    c = vsub.add_parser("inspect", parents=[conn], help="docker's document for volumes")
    c.add_argument("-f", "--format")
    c.add_argument("names", nargs="+")
    c.set_defaults(func=cmd_inspect)
    c = vsub.add_parser("rm", parents=[conn], help="remove volumes no container uses")
    c.add_argument("-f", "--force", action="store_true", help="no error for a missing one")
    c.add_argument("names", nargs="+")
    c.set_defaults(func=cmd_rm)
    c = vsub.add_parser("prune", parents=[conn], help="remove unused anonymous volumes")
    c.add_argument("-a", "--all", action="store_true", help="named ones too")
    c.add_argument("-f", "--force", action="store_true", help="do not ask")
    c.set_defaults(func=cmd_prune)
