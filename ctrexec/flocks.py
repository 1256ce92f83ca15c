"""Whether an act is under way, told by the ``flock`` its process holds.

The supervisor's presence, a group's operator lock and a create's in-flight lock are
each a lock file that a process holds while it is at work. The kernel drops a lock
with the last fd of it, so a holder that died holds nothing, and a probe never has to
guess from a pid file or an age. The probing is the same for all three: this module's.
"""

from __future__ import annotations

import fcntl
import os


def held(path: str | os.PathLike[str]) -> bool:
    """Whether some process holds a ``flock`` on ``path`` now, probed without waiting
    (the probe's own lock goes with its fd). No file, or one that can't be locked, is
    held by nobody."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


__all__ = ["held"]
