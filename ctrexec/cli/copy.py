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


def split_endpoint(word: str) -> tuple[str, str]:
    """One side of ``cp`` as (container, path), docker's split: an absolute path, a word
    with no colon, or a word starting with ``.`` is the host's (container ``""``; path
    ``-`` a tar stream); ``NAME:PATH`` a container's."""
    if word.startswith("/"):
        return "", word
    name, colon, path = word.partition(":")
    if not colon or name.startswith("."):
        return "", word
    return name, path


def cmd_cp(args: argparse.Namespace) -> int:
    try:
        (src_task, src), (dst_task, dst) = split_endpoint(args.src), split_endpoint(args.dst)
        if src_task and dst_task:
            raise InvalidArgument("copying between containers is not supported")
        if not (src_task or dst_task):
            raise InvalidArgument("must specify at least one container source")
        ex = executor(args)
        if src_task:
            if dst == "-" and sys.stdout.isatty():
                raise InvalidArgument("cp: refusing to write a tar archive to a terminal")
            ex.copy_out(resolver(ex.client)(src_task), src, dst,
                        follow=args.follow_link, stdout=sys.stdout.buffer)  # fmt: skip
        else:
            if src == "-" and sys.stdin.isatty():
                raise InvalidArgument("cp: refusing to read a tar archive from a terminal")
            ex.copy_in(resolver(ex.client)(dst_task), src, dst, follow=args.follow_link,
                       archive=args.archive, stdin=sys.stdin.buffer)  # fmt: skip
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
