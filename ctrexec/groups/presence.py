"""The supervisor's presence lock: whether any supervisor serves a containerd namespace.

While it runs, a supervisor holds a shared lock on a file named after the containerd
address and namespace, so ``run -d --rm`` can tell whether anything will remove the
container once its task exits (:func:`is_supervised`).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ctrexec.containerd.client import Client

# The lock's place and its probe live with the tasks' views, which ask them too.
from ctrexec.tasks.supervised import DEFAULT_LOCK_DIR, is_supervised, lock_path

if TYPE_CHECKING:
    from ctrexec.paths import StrPath

log = logging.getLogger("ctrexec.groups.supervisor")


@contextlib.contextmanager
def presence(client: Client, lock_dir: StrPath = DEFAULT_LOCK_DIR) -> Iterator[None]:
    """Hold a shared lock saying "a supervisor serves this namespace" for the block.

    The kernel drops a flock when its holder dies, so the lock cannot go stale the
    way a pid file can; shared, so several supervisors may run.
    """
    path = lock_path(client, lock_dir)
    try:
        # root's alone: anyone who could open the lock could hold it and fake a supervisor
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.parent.chmod(0o700)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        os.fchmod(fd, 0o600)
    except OSError as exc:
        log.warning("cannot announce this supervisor in %s: %s", path, exc.strerror)
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


__all__ = ["DEFAULT_LOCK_DIR", "is_supervised", "presence"]
