"""``ctrexec images``, ``rmi`` and ``image-ensure``: containerd's image store."""

from __future__ import annotations

import argparse

from ctrexec.cli._common import ArgumentParser, connect, connection_flags, json_flag, print_json
from ctrexec.cli._common import print_table as table

# ``images`` (grpc, stubs) is imported by each command, not by the parser.


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return f"{value:.1f}GiB"


def cmd_images(args: argparse.Namespace) -> int:
    from ctrexec.containerd import images
    from ctrexec.containerd.prune import image_usage

    with connect(args) as client:
        found = images.list_images(client)
        usage = image_usage(client)
    if args.json:
        print_json(
            [
                {
                    "name": i.name,
                    "digest": i.digest,
                    "size": i.size,
                    "created": i.created.isoformat() if i.created else None,
                    "containers": usage.get(i.name, 0),
                }
                for i in found
            ]
        )
        return 0
    rows = [
        [
            i.name,
            i.digest[:19],
            _size(i.size),
            i.created.strftime("%Y-%m-%d") if i.created else "-",
            usage.get(i.name, 0),
        ]
        for i in found
    ]
    table(["NAME", "DIGEST", "SIZE", "CREATED", "CONTAINERS"], rows)
    return 0


def cmd_rmi(args: argparse.Namespace) -> int:
    from ctrexec import imageuse
    from ctrexec.cli.verbs import each

    with connect(args) as client:
        return each(args.refs, lambda ref: imageuse.remove(client, ref, force=args.force))


def cmd_ensure(args: argparse.Namespace) -> int:
    """Make an image usable here: adopt it from another namespace and unpack it."""
    from ctrexec.containerd import images

    with connect(args) as client:
        image = images.ensure_image(client, args.ref)
    print(f"{image.name} {image.digest}")
    return 0


def register(sub: argparse._SubParsersAction[ArgumentParser]) -> None:
    conn = connection_flags()
    p = sub.add_parser("images", parents=[conn, json_flag()], help="list images")
    p.set_defaults(func=cmd_images)
    p = sub.add_parser("rmi", parents=[conn], help="remove images (GC frees their data)")
    p.add_argument("-f", "--force", action="store_true", help="even if a container uses it")
    p.add_argument("refs", nargs="+")
    p.set_defaults(func=cmd_rmi)
    p = sub.add_parser(
        "image-ensure",
        parents=[conn],
        help="adopt an image from another containerd namespace (no download) and unpack it",
    )
    p.add_argument("ref")
    p.set_defaults(func=cmd_ensure)
