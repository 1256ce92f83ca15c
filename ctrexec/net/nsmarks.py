"""Which pinned namespaces ctrexec made, as opposed to ``ip netns add``'s, docker's or
another tool's: all of them share ``/run/netns``.

:func:`ctrexec.net.netns.create` leaves a marker per name holding the namespace's
inode; a marker counts only while the name still pins that same namespace, so a
namespace removed behind ctrexec's back (``ip netns del``, which leaves the marker)
and made again under the same name by someone else is not taken for ctrexec's.
"""

from __future__ import annotations

from pathlib import Path

from ctrexec.defaults import RUN_DIR

#: One file per namespace name ctrexec created, holding ``<st_dev>:<st_ino>:<st_ctime_ns>``.
MARK_DIR = Path(RUN_DIR, "netns-made")


def _identity(path: str) -> str:
    """The namespace's nsfs inode and its birth: the kernel hands a freed namespace's
    inode number to the next one made, but the inode's ctime is the new one's."""
    st = Path(path).stat()
    return f"{st.st_dev}:{st.st_ino}:{st.st_ctime_ns}"


def mark(path: str) -> None:
    """Record that ctrexec made the namespace pinned at ``path`` (just now)."""
    MARK_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    (MARK_DIR / Path(path).name).write_text(_identity(path) + "\n")


def unmark(path: str) -> None:
    (MARK_DIR / Path(path).name).unlink(missing_ok=True)


def made_by_ctrexec(path: str) -> bool:
    """Whether ``path`` pins the namespace ctrexec's marker of that name recorded."""
    try:
        return (MARK_DIR / Path(path).name).read_text().strip() == _identity(path)
    except OSError:
        return False


__all__ = ["MARK_DIR", "made_by_ctrexec", "mark", "unmark"]
