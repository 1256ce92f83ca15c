"""Flags of ``run`` and ``create`` from docker's second parity round, and ``--cidfile``.

``--cidfile``: the container's ID written to a file, which must not exist. The file is
made (exclusively) before anything else, so two runs given one path cannot both go
ahead; the ID is written once the config is known (ctrexec's ID is the name), and the
file is removed again if the command fails before the container exists.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from ctrexec import Conflict, InvalidArgument
from ctrexec.cli._common import ArgumentParser


def add_flags(p: ArgumentParser) -> None:
    """The flags of docker's second parity round (README's "coming from docker")."""
    p.add_argument("--cidfile", help="write the container's ID to this file (must not exist)")
    p.add_argument("--env-file", action="append", default=[], metavar="FILE")
    p.add_argument("--group-add", action="append", default=[], metavar="GROUP")
    p.add_argument("--memory-swap", help="memory plus swap; -1: unlimited swap")
    p.add_argument("--shm-size", help="size of /dev/shm (default 64m)")
    p.add_argument("--ulimit", action="append", default=[], metavar="NAME=SOFT[:HARD]")
    p.add_argument("--init", action="store_true", help="run tini as pid 1: reaps, forwards signals")
    p.add_argument("--security-opt", action="append", default=[], metavar="OPT")
    p.add_argument("--pid", help="host: the host's PID namespace")
    p.add_argument("--ipc", help="host: the host's IPC namespace and /dev/shm; private")
    p.add_argument("--platform", help="os/arch[/variant] of the image (default: this host's)")


@contextlib.contextmanager
def cidfile(path: str | None) -> Iterator[Callable[[str], None]]:
    """A writer of the ID to ``path`` (None: no file, and the writer does nothing)."""
    if path is None:
        yield lambda _id: None
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise Conflict(
            f"container ID file found, make sure the other container isn't running or delete {path}"
        ) from None
    except OSError as exc:
        raise InvalidArgument(
            f"failed to create the container ID file: {exc.strerror or exc}"
        ) from exc
    os.close(fd)

    def write(container_id: str) -> None:
        Path(path).write_text(container_id)

    try:
        yield write
    except BaseException:
        with contextlib.suppress(OSError):
            Path(path).unlink()
        raise


def docker_size(size: int) -> str:
    """``size`` bytes as docker's flags write it (``10m``): in the largest unit that
    divides it, as the library's size fields read it back."""
    for unit, scale in (("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)):
        if size and size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)


def log_opts_help() -> str:
    """The ``--log-opt`` keys with their defaults (their module is one the parser may
    load), as :func:`ctrexec.parse_log_opts` takes them."""
    from ctrexec import DEFAULT_LOG_MAX_FILES, DEFAULT_LOG_MAX_SIZE

    size = docker_size(DEFAULT_LOG_MAX_SIZE)
    return f"max-size={size}, max-file={DEFAULT_LOG_MAX_FILES}, transport=daemon|process"
