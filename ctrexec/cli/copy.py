"""``ctrexec cp``: files between a container and the host, as ``docker cp`` copies them.

docker's cp exits 1 for every failure, the container missing included; so does this.
"""

from __future__ import annotations

import argparse
import sys

from ctrexec import CtrexecError, InvalidArgument
from ctrexec.cli._common import ArgumentParser, connection_flags, executor, fail, resolver

#: docker cp's exit code for any failure.
CP_FAILED = 1


def cmd_cp(args: argparse.Namespace) -> int:
    from ctrexec.tasks import copying

    try:
        src, dst = copying.Endpoint.parse(args.src), copying.Endpoint.parse(args.dst)
        if src.container and dst.container:
            raise InvalidArgument("copying between containers is not supported")
        if not (src.container or dst.container):
            raise InvalidArgument("must specify at least one container source")
        ex = executor(args)
        if src.container:
            if dst.path == "-" and sys.stdout.isatty():
                raise InvalidArgument("cp: refusing to write a tar archive to a terminal")
            copying.copy_out(
                ex.client, ex.images, resolver(ex.client)(src.container), src.path, dst.path,
                follow=args.follow_link, stdout=sys.stdout.buffer,
            )  # fmt: skip
        else:
            if src.path == "-" and sys.stdin.isatty():
                raise InvalidArgument("cp: refusing to read a tar archive from a terminal")
            copying.copy_in(
                ex.client, ex.images, resolver(ex.client)(dst.container), src.path, dst.path,
                follow=args.follow_link, archive=args.archive, stdin=sys.stdin.buffer,
            )  # fmt: skip
    except CtrexecError as err:
        fail(err)
        return CP_FAILED
    return 0


def register(sub: argparse._SubParsersAction[ArgumentParser]) -> None:
    p = sub.add_parser(
        "cp",
        parents=[connection_flags()],
        help="copy files between a container and the host (or a tar stream with -)",
        description=(
            "ctrexec cp [OPTIONS] CONTAINER:SRC_PATH DEST_PATH|-  or  "
            "ctrexec cp [OPTIONS] SRC_PATH|- CONTAINER:DEST_PATH. Running, stopped and "
            "created containers; paths resolve inside the container's root."
        ),
    )
    p.add_argument("src", metavar="SRC")
    p.add_argument("dst", metavar="DST")
    p.add_argument(
        "-a", "--archive", action="store_true",
        help="keep the archive's uid and gid (default: the container's root)",
    )  # fmt: skip
    p.add_argument(
        "-L", "--follow-link", action="store_true", help="follow a symlink that SRC_PATH names"
    )
    p.add_argument("-q", "--quiet", action="store_true", help="accepted for docker; prints nothing")
    p.set_defaults(func=cmd_cp)
