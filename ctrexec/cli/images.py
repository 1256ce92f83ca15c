"""``ctrexec images``, ``rmi``, ``tag``, ``commit`` and ``image-ensure``: containerd's
image store."""

from __future__ import annotations

import argparse

from ctrexec import CtrexecError
from ctrexec.cli._common import ArgumentParser, connect, connection_flags, json_flag, print_json
from ctrexec.cli._common import print_table as table

# ``images`` (grpc, stubs) is imported by each command, not by the parser.


def cmd_images(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from ctrexec import image_usage, list_images, parse_reference
    from ctrexec.cli.views import images as imagetable

    if args.repository is not None:
        parse_reference(args.repository)  # a typo starts no daemon
    with connect(args) as client:
        found = imagetable.matching(list_images(client), args.repository)
        usage = {} if args.quiet else image_usage(client)
    found = imagetable.newest_first(found)
    if args.quiet:
        for image_id in imagetable.quiet_ids(found, trunc=not args.no_trunc):
            print(image_id)
        return 0
    if args.json:
        print_json(
            [
                {
                    "name": i.name,
                    "id": imagetable.image_id(i, trunc=False),
                    "digest": i.digest,
                    "size": i.size,
                    "created": i.created.isoformat() if i.created else None,
                    "containers": usage.get(i.name, 0),
                }
                for i in found
            ]
        )
        return 0
    now = datetime.now(UTC)
    header, rows = imagetable.rows(
        found, usage, now=now, trunc=not args.no_trunc, digests=args.digests
    )
    table(header, rows)
    return 0


def cmd_rmi(args: argparse.Namespace) -> int:
    from ctrexec import remove_image
    from ctrexec.cli.verbs import each

    with connect(args) as client:
        return each(args.refs, lambda ref: remove_image(client, ref, force=args.force))


def cmd_tag(args: argparse.Namespace) -> int:
    from ctrexec import tag_image

    with connect(args) as client:
        tag_image(client, args.source, args.target)
    return 0


def cmd_commit(args: argparse.Namespace) -> int:
    """docker's ``commit``: the new image's ID (its config digest) on stdout."""
    from ctrexec import check_changes, commit_container, normalize_reference

    normalize_reference(args.ref)  # a typo starts no daemon
    check_changes(args.change)  # nor does an instruction ctrexec does not take
    with connect(args) as client:
        image = commit_container(
            client,
            args.container,
            args.ref,
            changes=args.change,
            message=args.message or "",
            author=args.author or "",
        )
    print(image.config_digest)
    return 0


def cmd_ensure(args: argparse.Namespace) -> int:
    """Make an image usable here: adopt it from another namespace and unpack it."""
    from ctrexec import ensure_image

    with connect(args) as client:
        image = ensure_image(client, args.ref)
    print(f"{image.name} {image.digest}")
    return 0


def register(sub: argparse._SubParsersAction[ArgumentParser]) -> None:
    conn = connection_flags()
    p = sub.add_parser("images", parents=[conn, json_flag()], help="list images")
    p.add_argument("-q", "--quiet", action="store_true", help="image IDs only, each once")
    p.add_argument("--no-trunc", action="store_true", help="whole image IDs")
    p.add_argument("--digests", action="store_true", help="a DIGEST column")
    p.add_argument("repository", nargs="?", metavar="REPOSITORY[:TAG]")
    p.set_defaults(func=cmd_images)
    p = sub.add_parser("rmi", parents=[conn], help="remove images (GC frees their data)")
    p.add_argument("-f", "--force", action="store_true", help="even if a container uses it")
    p.add_argument("refs", nargs="+")
    p.set_defaults(func=cmd_rmi)
    p = sub.add_parser("tag", parents=[conn], help="name an image also TARGET (no copy)")
    p.add_argument("source", metavar="SOURCE_IMAGE[:TAG]")
    p.add_argument("target", metavar="TARGET_IMAGE[:TAG]")
    # docker's 1 for "No such image" and for every other refusal (a bad reference)
    p.set_defaults(func=cmd_tag, missing_exit=1, error_exits=((CtrexecError, 1),))
    p = sub.add_parser("commit", parents=[conn], help="a new image from a container's changes")
    p.add_argument("container", metavar="CONTAINER")
    p.add_argument("ref", metavar="REPOSITORY[:TAG]")
    p.add_argument("--change", "-c", action="append", default=[], help="CMD, ENTRYPOINT, ENV...")
    p.add_argument("--message", "-m", help="the history entry's comment")
    p.add_argument("--author", "-a", help="the image's author")
    p.set_defaults(func=cmd_commit, missing_exit=1)  # docker's exit for "No such container"
    p = sub.add_parser(
        "image-ensure",
        parents=[conn],
        help="adopt an image from another containerd namespace (no download) and unpack it",
    )
    p.add_argument("ref")
    p.set_defaults(func=cmd_ensure)
