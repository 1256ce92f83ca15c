"""``ctrexec import``, ``export`` and ``image prune``: archives in, archives out, cleanup;
``load`` and ``save`` are docker's names and flags for the same import and export."""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import TYPE_CHECKING

from ctrexec import InvalidArgument
from ctrexec.cli import confirm
from ctrexec.cli._common import ArgumentParser, connect, connection_flags, json_flag, print_json

if TYPE_CHECKING:
    from collections.abc import Callable

    from ctrexec import ImportedImage, PullEvent

# The library (grpc, stubs) is imported by each command, not by the parser.


def _progress(args: argparse.Namespace) -> Callable[[PullEvent], None] | None:
    """Pull's renderers (an import's events have a pull's fields and actions):
    --quiet: nothing; --json: events on stdout; a terminal: bars; else plain lines."""
    from ctrexec.cli import progress

    if args.quiet:
        return None
    if args.json:
        return progress.JsonEvents(sys.stdout)
    return progress.Bars(sys.stderr) if sys.stderr.isatty() else progress.Lines(sys.stderr)


def cmd_import(args: argparse.Namespace) -> int:
    from ctrexec import import_archive

    if args.platform and args.all_platforms:
        raise InvalidArgument("import: --platform and --all-platforms exclude each other")
    source = sys.stdin.buffer if args.file == "-" else args.file
    if args.file == "-" and sys.stdin.isatty():
        raise InvalidArgument("import: refusing to read an archive from a terminal")
    with connect(args) as client:
        done = import_archive(
            client,
            source,
            platform=args.platform,
            all_platforms=args.all_platforms,
            base_name=args.base_name,
            unpack=not args.no_unpack,
            progress=_progress(args),
        )
    if not (args.quiet or args.json):
        _report(done, docker=False)
    return 0


def _report(done: list[ImportedImage], *, docker: bool) -> None:
    """The lines after an import; ``docker``: load's, each name as docker prints it
    (``busybox:latest``) with no digest."""
    from ctrexec import parse_reference

    for image in done:
        name = image.name
        if docker:
            with contextlib.suppress(InvalidArgument):  # no reference: as stored
                name = parse_reference(image.name).familiar
        if image.replaced:  # docker load's "renaming the old one", once it happened
            print(
                f"The image {name} already existed; the name now points to the "
                f"imported image, not to ID {image.replaced}"
            )
        print(f"Loaded image: {name}" if docker else f"Loaded image: {name} ({image.digest[:19]})")


def cmd_load(args: argparse.Namespace) -> int:
    """docker's ``load [-i FILE] [-q]``: stdin by default, and only the
    ``Loaded image: NAME`` lines (bars on a terminal unless ``-q``)."""
    from ctrexec import import_archive
    from ctrexec.cli import progress

    if args.input is None and sys.stdin.isatty():
        raise InvalidArgument("requested load from stdin, but stdin is empty")
    source = sys.stdin.buffer if args.input in (None, "-") else args.input
    shown = None if args.quiet or not sys.stderr.isatty() else progress.Bars(sys.stderr)
    with connect(args) as client:
        done = import_archive(client, source, progress=shown)
    _report(done, docker=True)
    return 0


def cmd_save(args: argparse.Namespace) -> int:
    """docker's ``save [-o FILE] IMAGE...``: stdout by default, never to a terminal."""
    from ctrexec import export_archive

    if args.output is None and sys.stdout.isatty():
        raise InvalidArgument(
            "cowardly refusing to save to a terminal. Use the -o flag or redirect"
        )
    dest = sys.stdout.buffer if args.output in (None, "-") else args.output
    with connect(args) as client:
        export_archive(client, args.images, dest, platform=args.platform)
    if dest is sys.stdout.buffer:
        sys.stdout.buffer.flush()
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from ctrexec import export_archive

    if args.platform and args.all_platforms:
        raise InvalidArgument("export: --platform and --all-platforms exclude each other")
    if args.file == "-" and sys.stdout.isatty():
        raise InvalidArgument("export: refusing to write an archive to a terminal")
    dest = sys.stdout.buffer if args.file == "-" else args.file
    with connect(args) as client:
        export_archive(
            client,
            args.refs,
            dest,
            platform=args.platform,
            all_platforms=args.all_platforms,
            docker_manifest=not args.skip_manifest_json,
        )
    if args.file == "-":
        sys.stdout.buffer.flush()
    return 0


def _bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{n}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return f"{value:.1f}GiB"


def cmd_prune(args: argparse.Namespace) -> int:
    from ctrexec import prune_images

    which = (
        "all images without at least one container associated to them"
        if args.all
        else "all dangling images"
    )
    if not confirm.confirmed(f"WARNING! This will remove {which}.", force=args.force):
        return 0
    with connect(args) as client:
        report = prune_images(client, all_images=args.all)
    if args.json:
        print_json({"deleted": list(report.deleted), "reclaimed": report.reclaimed})
        return 0
    for name in report.deleted:
        print(f"Deleted: {name}")
    print(f"Total reclaimed space: {_bytes(report.reclaimed)}")
    return 0


def _platform_flags(p: ArgumentParser, verb: str) -> None:
    p.add_argument("--platform", help=f"{verb} this platform's content (default: the host's)")
    p.add_argument("--all-platforms", action="store_true", help=f"{verb} every platform's content")


def register(sub: argparse._SubParsersAction[ArgumentParser]) -> None:
    conn = connection_flags()
    p = sub.add_parser(
        "import", parents=[conn], help="import an OCI layout or docker-save tar (FILE or -)"
    )
    p.add_argument("file", metavar="FILE|-")
    _platform_flags(p, "import")
    p.add_argument("--base-name", help="repository for entries named only by a tag")
    p.add_argument("--no-unpack", action="store_true", help="do not unpack the layers")
    p.add_argument("--quiet", "-q", action="store_true", help="print nothing")
    p.add_argument("--json", action="store_true", help="print progress events as JSON lines")
    p.set_defaults(func=cmd_import)
    p = sub.add_parser("export", parents=[conn], help="write images as an OCI layout tar")
    p.add_argument("refs", nargs="+", metavar="REF")
    p.add_argument("file", metavar="FILE|-")
    _platform_flags(p, "export")
    p.add_argument(
        "--skip-manifest-json", action="store_true", help="no docker-compatible manifest.json"
    )
    p.set_defaults(func=cmd_export)
    p = sub.add_parser("save", parents=[conn], help="docker's save: export to -o FILE or stdout")
    p.add_argument("images", nargs="+", metavar="IMAGE")
    p.add_argument("--output", "-o", metavar="FILE", help="write to FILE, not stdout")
    p.add_argument("--platform", help="save this platform's content (default: the host's)")
    p.set_defaults(func=cmd_save)
    p = sub.add_parser("load", parents=[conn], help="docker's load: import from -i FILE or stdin")
    p.add_argument("--input", "-i", metavar="FILE", help="read FILE, not stdin")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_load)
    image = sub.add_parser("image", help="manage images (prune)")
    image_sub = image.add_subparsers(
        dest="image_command", metavar="COMMAND", parser_class=ArgumentParser
    )
    image_sub.required = True
    p = image_sub.add_parser(
        "prune", parents=[conn, json_flag()], help="remove images no container uses"
    )
    p.add_argument(
        "--all", "-a", action="store_true", help="all unused images, not just untagged ones"
    )
    p.add_argument(
        "--force",
        "-f",
        action="store_true",
        help="do not prompt for confirmation (no terminal on stdin: never asks)",
    )
    p.set_defaults(func=cmd_prune)
