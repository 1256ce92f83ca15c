"""``ctrexec pull``, ``push``, ``login`` and ``logout``: images from and to registries,
and credentials."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ctrexec import CtrexecError, InvalidArgument
from ctrexec.cli._common import ArgumentParser, connect, connection_flags

if TYPE_CHECKING:
    from pathlib import Path

    from ctrexec import Client, ImageCache, PullEvent, TaskConfig

# The registry package (urllib3) and the progress renderers load in each command.


def _path(text: str) -> Path:
    """A path flag's value; pathlib loads once a command has one, not with the parser."""
    from pathlib import Path

    return Path(text)


def registry_flags() -> ArgumentParser:
    """Flags of every command that may talk to a registry (pull, and run's --pull)."""
    p = ArgumentParser(add_help=False)
    p.add_argument("--platform", help="os/arch[/variant] to pull (default: this host's)")
    p.add_argument(
        "--plain-http",
        action="store_true",
        help="talk HTTP, not HTTPS, to the registry (localhost-style hosts always do)",
    )
    p.add_argument(
        "--hosts-dir",
        type=_path,
        help="registry hosts.toml directory (default: $CTREXEC_REGISTRY_CONFIG, "
        "else /etc/ctrexec/certs.d)",
    )
    return p


def add_pull_policy(p: ArgumentParser) -> None:
    """``--pull`` for commands that start from an image (run, create, group up)."""
    p.add_argument(
        "--pull",
        choices=("missing", "always", "never"),
        default="missing",
        help="pull the image: when missing (default), always, or never",
    )
    p.add_argument("--plain-http", action="store_true", help="pull over HTTP, not HTTPS")
    p.add_argument("--hosts-dir", type=_path, help="registry hosts.toml directory")
    p.add_argument("-q", "--quiet", action="store_true", help="print no pull progress")


def ensure_images(
    client: Client,
    configs: Sequence[TaskConfig],
    args: argparse.Namespace,
    cache: ImageCache | None = None,
) -> None:
    """Each config's image (for its snapshotter and platform) ready to run by the --pull
    policy (progress on stderr), before anything is created: a missing one stops the
    command with nothing made. With the executor's ``cache``, the create that follows
    reads no image document again."""
    from ctrexec import ensure_pulled

    options = pull_options(args)
    if getattr(args, "json", False) and options["progress"] is not None:
        from ctrexec.cli import progress

        # stdout carries the command's JSON result: pull lines go to stderr
        options["progress"] = None if args.quiet else progress.Lines(sys.stderr)
    for ref, snapshotter, platform in dict.fromkeys(
        (c.image, c.snapshotter, c.platform) for c in configs
    ):
        ensure_pulled(
            client,
            ref,
            policy=args.pull,
            platform=platform,
            snapshotter=snapshotter,
            cache=cache,
            **options,
        )


def progress_for(args: argparse.Namespace) -> Callable[[PullEvent], None] | None:
    """--quiet: nothing; --json: events; a terminal: bars; else plain lines."""
    from ctrexec.cli import progress

    if getattr(args, "quiet", False):
        return None
    if getattr(args, "json", False):
        return progress.JsonEvents(sys.stdout)
    return progress.Bars(sys.stderr) if sys.stderr.isatty() else progress.Lines(sys.stderr)


def pull_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "plain_http": bool(getattr(args, "plain_http", False)),
        "hosts_dir": getattr(args, "hosts_dir", None),
        "progress": progress_for(args),
    }


def _count(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 64:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number from 1 to 64")
    return int(text)


def cmd_pull(args: argparse.Namespace) -> int:
    from ctrexec import pull

    options = pull_options(args)
    with connect(args) as client:
        image = pull(client, args.ref, platform=args.platform, parallel=args.parallel, **options)
    if args.quiet:
        print(image.name)
    elif not args.json:
        print(f"{image.name} {image.digest}")
    return 0


def cmd_push(args: argparse.Namespace) -> int:
    """docker's ``push``: progress on stderr (``The push refers to repository [...]``,
    then a line per layer), and docker's last line, ``TAG: digest: ... size: N``, on
    stdout."""
    from ctrexec import parse_reference, push
    from ctrexec.cli import progress

    parse_reference(args.ref)  # a typo starts no daemon
    shown = None if args.quiet else progress.PushLines(sys.stderr)
    with connect(args) as client:
        done = push(
            client,
            args.ref,
            plain_http=args.plain_http,
            hosts_dir=args.hosts_dir,
            parallel=args.parallel,
            progress=shown,
        )
    print(f"{done.tag or done.digest}: digest: {done.digest} size: {done.size}")
    return 0


def _domain(server: str) -> str:
    """``https://index.docker.io/v1/`` and ``docker.io`` both mean Docker Hub."""
    host = server.split("://", 1)[-1].split("/", 1)[0]
    if not host:
        raise InvalidArgument(f"login: invalid server {server!r}")
    return "docker.io" if host in ("index.docker.io", "registry-1.docker.io") else host


def _secret(args: argparse.Namespace) -> str:
    if args.password_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    if args.password is not None:
        return str(args.password)
    if not sys.stdin.isatty():
        raise InvalidArgument("login: no password: use --password-stdin or -p")
    import getpass

    return getpass.getpass("Password: ")


def cmd_login(args: argparse.Namespace) -> int:
    from ctrexec import RegistryCredentials, registry_login

    domain = _domain(args.server)
    username = args.username or (input("Username: ") if sys.stdin.isatty() else "")
    if not username:
        raise InvalidArgument("login: no username: use -u")
    creds = RegistryCredentials(username, _secret(args))
    where = registry_login(domain, creds, plain_http=args.plain_http, hosts_dir=args.hosts_dir)
    print(f"Login Succeeded (credentials in {where})")
    return 0


def cmd_logout(args: argparse.Namespace) -> int:
    from ctrexec import registry_logout

    domain = _domain(args.server)
    if registry_logout(domain):
        print(f"Removed login credentials for {domain}")
    else:
        print(f"Not logged in to {domain}")
    return 0


def register(sub: argparse._SubParsersAction[ArgumentParser]) -> None:
    conn = connection_flags()
    p = sub.add_parser(
        "pull", parents=[conn, registry_flags()], help="pull an image from a registry"
    )
    p.add_argument("ref")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--quiet", "-q", action="store_true", help="print only the image name")
    out.add_argument("--json", action="store_true", help="print progress events as JSON lines")
    p.add_argument("--parallel", type=_count, default=3, help="blobs downloaded at once (3)")
    # docker's 1 for every refusal of a pull (an unreachable registry, a bad reference)
    p.set_defaults(func=cmd_pull, error_exits=((CtrexecError, 1),))
    p = sub.add_parser("push", parents=[conn], help="push an image to a registry")
    p.add_argument("ref", metavar="NAME[:TAG]")
    p.add_argument("--quiet", "-q", action="store_true", help="print only the digest line")
    p.add_argument("--parallel", type=_count, default=3, help="blobs uploaded at once (3)")
    p.add_argument("--plain-http", action="store_true", help="talk HTTP to the registry")
    p.add_argument("--hosts-dir", type=_path, help="registry hosts.toml directory")
    p.set_defaults(func=cmd_push, missing_exit=1)  # docker's exit for "does not exist locally"
    p = sub.add_parser("login", help="log in to a registry (writes docker's config.json)")
    p.add_argument("server", nargs="?", default="docker.io")
    p.add_argument("--username", "-u")
    p.add_argument("--password", "-p")
    p.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    p.add_argument("--plain-http", action="store_true", help="talk HTTP to the registry")
    p.add_argument("--hosts-dir", type=_path, help="registry hosts.toml directory")
    p.set_defaults(func=cmd_login)
    p = sub.add_parser("logout", help="forget a registry's credentials")
    p.add_argument("server", nargs="?", default="docker.io")
    p.set_defaults(func=cmd_logout)
