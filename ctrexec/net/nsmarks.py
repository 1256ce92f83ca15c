"""Which pinned namespaces ctrexec made, as opposed to ``ip netns add``'s, docker's or
another tool's: all of them share ``/run/netns``.

:func:`ctrexec.net.netns.create` leaves a marker per name holding the namespace's
inode; a marker counts only while the name still pins that same namespace, so a
namespace removed behind ctrexec's back (``ip netns del``, which leaves the marker)
and made again under the same name by someone else is not taken for ctrexec's.

A marker also names the pin's owner (:class:`ctrexec.owners.Owner`: the containerd,
its namespace and the group) when the create had one; ``ctrexec netns create``'s
and older markers name none, and gc spares those.
"""

from __future__ import annotations

from pathlib import Path

from ctrexec import owners
from ctrexec.defaults import RUN_DIR

#: One file per namespace name ctrexec created, holding ``<st_dev>:<st_ino>:<st_ctime_ns>``
#: on its first line, then its owner's lines (if it has one).
MARK_DIR = Path(RUN_DIR, "netns-made")


def _identity(path: str) -> str:
    """The namespace's nsfs inode and its birth: the kernel hands a freed namespace's
    inode number to the next one made, but the inode's ctime is the new one's."""
    st = Path(path).stat()
    return f"{st.st_dev}:{st.st_ino}:{st.st_ctime_ns}"


def mark(path: str, owner: owners.Owner | None = None) -> None:
    """Record that ctrexec made the namespace pinned at ``path`` (just now), for
    ``owner``. Whole or not at all: gc reads markers while creates write them."""
    text = _identity(path) + "\n" + (owner.to_text() if owner is not None else "")
    MARK_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    marker = MARK_DIR / Path(path).name
    tmp = marker.with_name(f".{marker.name}.tmp")
    tmp.write_text(text)
    tmp.replace(marker)


def unmark(path: str) -> None:
    (MARK_DIR / Path(path).name).unlink(missing_ok=True)


def _read(path: str) -> tuple[str, str]:
    """The marker's identity line and the rest (its owner); empty when it has none."""
    try:
        first, _, rest = (MARK_DIR / Path(path).name).read_text().partition("\n")
    except OSError:
        return "", ""
    return first.strip(), rest


def made_by_ctrexec(path: str) -> bool:
    """Whether ``path`` pins the namespace ctrexec's marker of that name recorded."""
    first, _ = _read(path)
    try:
        return bool(first) and first == _identity(path)
    except OSError:
        return False


def owner_of(path: str) -> owners.Owner | None:
    """The owner ctrexec recorded for the namespace pinned at ``path``; None when it
    did not make that namespace, or recorded no owner."""
    return owners.Owner.parse(_read(path)[1]) if made_by_ctrexec(path) else None


def recorded_owner(path: str) -> owners.Owner | None:
    """The owner the marker of this name names, whichever namespace it was of: for a
    pin made again from its group's live namespace (the name's owner is the same)."""
    return owners.Owner.parse(_read(path)[1])


__all__ = ["MARK_DIR", "made_by_ctrexec", "mark", "owner_of", "recorded_owner", "unmark"]
