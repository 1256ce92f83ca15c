"""A create in flight owns what it has made so far, until its record exists.

A ``run -p`` makes the namespace pin ``cx-NAME`` and wires it before containerd has a
record that names it. For that moment the pin looks like garbage to ``gc`` ("a pinned
namespace no record names and no process uses"), and a ``gc --grace 0`` beside a
create loop removed pins of creates in flight. So a create holds a *shared* ``flock``
on one lock file per object key from before it makes its first object until its
record exists; gc takes the same file *exclusively and without waiting* before it
removes the object, skips what it cannot take, and checks the record again while it
holds it. Shared, so creates never wait on each other here (two creates of one name
are told apart by the pin's ``O_EXCL``); a create waits only for a gc that is
removing that very object, and then finds the name free or its own AlreadyExists.

The kernel drops a lock with the last fd of it, so a create that is killed owns
nothing any more: its leftovers are gc's at once. gc unlinks a lock file it holds
exclusively (nobody uses it then); a create that opened the file before that unlink
sees, once it has its lock, that the path is no longer its file, and opens it again.

The path scheme (``/run/ctrexec/inflight/<key>.lock``) and the keys are this module's
alone. The group lock of ``group up``/``down`` (:mod:`ctrexec.groups`) serialises
operators' acts on a group; this one only fences gc off a create.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from ctrexec import flocks
from ctrexec.defaults import RUN_DIR

#: One lock file per key; made on demand, unlinked by gc once it held it.
LOCK_DIR = Path(RUN_DIR, "inflight")


def netns_key(name: str) -> str:
    """The key of a pinned namespace ``/run/netns/NAME`` (names are host-wide)."""
    return f"netns+{name}"


def _path(key: str) -> Path:
    if not key or "/" in key or key.startswith("."):
        raise ValueError(f"bad in-flight key {key!r}")
    return LOCK_DIR / f"{key}.lock"


def _open(path: Path) -> int:
    LOCK_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


def _still_there(fd: int, path: Path) -> bool:
    """Whether ``path`` is still the file ``fd`` locked (gc may have unlinked it)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


@contextlib.contextmanager
def creating(*keys: str) -> Iterator[None]:
    """Own the objects of ``keys`` while the block makes them and their record.

    Waits only while a gc removes one of them (that takes a moment). Enter it before
    the first object is made; leave it once the record exists (or the create undid
    what it made).
    """
    fds: list[int] = []
    try:
        for key in sorted(set(keys)):
            path = _path(key)
            while True:
                fd = _open(path)
                fcntl.flock(fd, fcntl.LOCK_SH)
                if _still_there(fd, path):
                    fds.append(fd)
                    break
                os.close(fd)  # gc unlinked it meanwhile: lock the new file
        yield
    finally:
        for fd in fds:
            os.close(fd)


@contextlib.contextmanager
def claimed(key: str) -> Iterator[bool]:
    """gc's side: True (and the key held exclusively for the block) when no create is
    in flight for ``key``; False at once when one is. Inside a True block no create of
    ``key`` can start or finish, so what gc finds there (no record) stays so."""
    path = _path(key)
    try:
        fd = _open(path)
    except OSError:
        yield False  # no lock to take (no /run/ctrexec): judge nothing as free
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        if not _still_there(fd, path):
            yield False  # another gc unlinked it meanwhile; the next run looks again
            return
        try:
            yield True
        finally:
            with contextlib.suppress(OSError):
                path.unlink()
    finally:
        os.close(fd)


def busy(key: str) -> bool:
    """Whether a create holds ``key`` now (doctor's view; gc decides under
    :func:`claimed`). A key with no lock file is not busy, and none is made."""
    return flocks.held(_path(key))


__all__ = ["LOCK_DIR", "busy", "claimed", "creating", "netns_key"]
