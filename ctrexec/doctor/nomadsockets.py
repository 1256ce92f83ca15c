"""Socket directories of Nomad plugins that died without removing them.

Each plugin process listens in a directory of its own,
``$TMPDIR/<NOMAD_SOCKET_DIR_PREFIX>XXXX/<NOMAD_SOCKET_NAME>``
(:mod:`ctrexec.nomad.main`), and removes it when it exits; one that Nomad (or anyone)
SIGKILLed cannot, and only the next plugin start on the host sweeps it. A directory
is garbage when it is doctor's own user's (root's: one of another user by that name is
not ctrexec's), holds nothing but the socket, no process accepts connections on the
socket (a dead plugin's file stays behind; only a connect tells), and it is older
than the grace period (a plugin starting now has not listened yet). ``$TMPDIR`` is
doctor's own: run it with the agent's when that differs. The plugin applies the same
rule at each start (:func:`sweep_nomad_sockets`), with a grace of seconds.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ctrexec import _linux
from ctrexec.defaults import NOMAD_SOCKET_DIR_PREFIX, NOMAD_SOCKET_NAME
from ctrexec.doctor.findings import Check, Finding, Scope, stamp

if TYPE_CHECKING:
    from ctrexec.paths import StrPath

KIND = "nomad-socket"


def _dead(directory: Path) -> float | None:
    """The directory's mtime when it is a dead plugin's (the rule, without its age)."""
    try:
        info = directory.lstat()
        names = {p.name for p in directory.iterdir()}
    except OSError:
        return None
    if not directory.is_dir() or directory.is_symlink() or info.st_uid != os.geteuid():
        return None
    if names - {NOMAD_SOCKET_NAME}:
        return None  # something else lives there: not a plugin's directory as it makes them
    sock = directory / NOMAD_SOCKET_NAME
    if NOMAD_SOCKET_NAME in names and _linux.unix_socket_listening(sock):
        return None
    return info.st_mtime


def sweep_nomad_sockets(tmp: StrPath | None = None, *, min_age: float = 5.0) -> list[Path]:
    """Remove the socket directories of Nomad plugins that died without removing them;
    those removed. The plugin calls it as it starts (only a start can clean up after a
    SIGKILLed one); ``ctrexec gc`` does the same with its grace period. ``min_age``
    spares a plugin that is starting now and has not listened yet."""
    where = Path(tempfile.gettempdir() if tmp is None else tmp)
    removed = []
    now = time.time()
    for directory in sorted(where.glob(NOMAD_SOCKET_DIR_PREFIX + "*")):
        since = _dead(directory)
        if since is None or now - since < min_age:
            continue
        with contextlib.suppress(OSError):  # unlink, then rmdir: nothing else is removed
            (directory / NOMAD_SOCKET_NAME).unlink(missing_ok=True)
            directory.rmdir()
            removed.append(directory)
    return removed


def find(scope: Scope, tmp: Path | None = None) -> list[Finding]:
    where = Path(tempfile.gettempdir()) if tmp is None else tmp
    found = []
    for directory in sorted(where.glob(NOMAD_SOCKET_DIR_PREFIX + "*")):
        since = _dead(directory)
        if since is not None and scope.old_enough(since):
            found.append(
                Finding(
                    kind=KIND,
                    where=str(directory),
                    what="the socket directory of a Nomad plugin that is gone",
                    fix="ctrexec gc",
                    since=stamp(since),
                )
            )
    return found


def remove(scope: Scope, finding: Finding) -> None:
    directory = Path(finding.where)
    if _dead(directory) is not None:  # a plugin listening there since is left alone
        shutil.rmtree(directory, ignore_errors=True)


CHECK = Check(kind=KIND, find=find, remove=remove)
