"""One operator's act at a time per group: a flock per (containerd, namespace, group).

``group up``, ``group down`` and the start of a group's member (by hand, by ``group up``,
by the supervisor's restart) each hold the group's lock for their whole act, so two
operators (two shells, a shell and the supervisor) never make or tear down one group's
namespace, address and members at once: the second waits, then acts on what the first
left (a second ``group up`` of a group already up finds it up and exits 0).

- **Where**: :func:`lock_path`, the one owner of the scheme:
  ``/run/ctrexec/locks/groups/<address key>-<namespace>-<group>.lock``. The address key
  is a hash of the containerd socket's real path, so two containerds on one host (even
  with the same namespace name) never contend for one group name.
- **Across processes** a ``flock``: the kernel drops it when its holder dies (a SIGKILLed
  ``group down`` leaves no stale lock), and nothing has to be cleaned up; a reboot
  empties /run.
- **Within a process** re-entrant per thread: ``group up`` holds the lock and starts its
  members, whose start asks for it again and goes on at once. Other threads of the
  process wait as another process would. Lock order, to stay free of deadlocks: the
  group's lock before any per-task lock of the executor, never the other way round.
- **Waiting**: unbounded by default (as ``flock(1)``), with one line on stderr (a
  warning, which an unconfigured CLI prints as it is) once it has waited more than
  :data:`NOTICE_AFTER` seconds; ``wait`` bounds it (the supervisor, which must not sit
  on one group's lock): :class:`~ctrexec.errors.Unavailable` then, and nothing was done.

doctor probes it without waiting (:func:`busy`): what a group whose lock is held has
(a pin with no record yet, its reservation, its rules) is being made or taken down, and
is no leftover. Nothing here takes another lock while it waits for this one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from ctrexec import flocks
from ctrexec import labels as lbl
from ctrexec.containerd import containers
from ctrexec.containerd.client import Client
from ctrexec.defaults import RUN_DIR
from ctrexec.errors import Unavailable

log = logging.getLogger("ctrexec.groups")

#: Where the groups' lock files live (root's alone: whoever can open one can hold it).
DEFAULT_DIR = Path(RUN_DIR, "locks", "groups")
#: After this long waiting, say so on stderr once.
NOTICE_AFTER = 1.0
#: How often a waiter tries again (flock cannot time out by itself).
_POLL = 0.05


def address_key(address: str) -> str:
    """A short name for one containerd (its socket's real path, hashed)."""
    return hashlib.sha256(os.path.realpath(address).encode()).hexdigest()[:16]


def lock_path(client: Client, group: str, lock_dir: Path = DEFAULT_DIR) -> Path:
    """The lock file of ``group`` in the client's containerd and namespace."""
    return lock_dir / f"{address_key(client.address)}-{client.namespace}-{group}.lock"


class _Held:
    """This process's hold on one lock file: the owning thread and its depth."""

    def __init__(self) -> None:
        self.owner: int | None = None
        self.depth = 0
        self.fd = -1
        self.cond = threading.Condition()


_guard = threading.Lock()
_held: dict[Path, _Held] = {}


def _entry(path: Path) -> _Held:
    with _guard:
        return _held.setdefault(path, _Held())


def is_held(client: Client, group: str, lock_dir: Path = DEFAULT_DIR) -> bool:
    """Whether this thread holds the group's lock (for asserts and tests)."""
    entry = _held.get(lock_path(client, group, lock_dir))
    return entry is not None and entry.owner == threading.get_ident()


@contextlib.contextmanager
def hold(
    client: Client, group: str, *, wait: float | None = None, lock_dir: Path = DEFAULT_DIR
) -> Iterator[None]:
    """Hold ``group``'s lock for the block (see the module's text). Re-entrant in one
    thread; ``wait`` (seconds) bounds the wait, else it waits as long as it takes."""
    path = lock_path(client, group, lock_dir)
    entry = _entry(path)
    me = threading.get_ident()
    begun = time.monotonic()
    noticed = False

    def waited() -> None:
        nonlocal noticed
        spent = time.monotonic() - begun
        if wait is not None and spent >= wait:
            raise Unavailable(
                f"another ctrexec operation on group {group} held its lock for {wait:g}s"
            )
        if not noticed and spent >= NOTICE_AFTER:
            noticed = True
            log.warning("waiting for another ctrexec operation on group %s", group)

    with entry.cond:
        while entry.owner not in (None, me):  # another thread of this process holds it
            waited()
            entry.cond.wait(_POLL)
        outer = entry.owner is None
        entry.owner = me  # claimed: this process's other threads wait on the condition
        if not outer:
            entry.depth += 1
    if outer:
        try:
            entry.fd = _lock_file(path, waited)
        except BaseException:
            _release(entry)
            raise
        entry.depth = 1
    try:
        yield
    finally:
        with entry.cond:
            entry.depth -= 1
        if outer:
            _release(entry)


def _release(entry: _Held) -> None:
    with entry.cond:
        if entry.fd >= 0:
            os.close(entry.fd)  # and with it the flock
        entry.fd, entry.owner, entry.depth = -1, None, 0
        entry.cond.notify_all()


def _lock_file(path: Path, waited: Callable[[], None]) -> int:
    """Open and flock the file, polling (so a bound and the notice can be kept); -1,
    with a warning, when the file cannot be made: the act goes on unguarded, as it did
    before this lock existed, rather than not at all."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        log.warning("cannot lock %s (%s): another operator is not kept out", path, exc.strerror)
        return -1
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                waited()
                time.sleep(_POLL)
    except BaseException:
        os.close(fd)
        raise


def of_record(
    client: Client, labels: Mapping[str, str], *, wait: float | None = None
) -> contextlib.AbstractContextManager[None]:
    """The lock of the group a record's labels name; nothing for a task in no group."""
    group = labels.get(lbl.GROUP)
    if not group:
        return contextlib.nullcontext()
    return hold(client, group, wait=wait)


def of_task(client: Client, task_id: str) -> contextlib.AbstractContextManager[None]:
    """The lock of the group ``task_id``'s record names (a start is an act on its group)."""
    return of_record(client, containers.get(client, task_id).labels)


def busy(client: Client, group: str, lock_dir: Path = DEFAULT_DIR) -> bool:
    """Whether some process holds ``group``'s lock now (an up, a down or a start under
    way), probed without waiting; doctor spares what such an act is making."""
    return flocks.held(lock_path(client, group, lock_dir))
