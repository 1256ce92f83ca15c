"""Resolve a docker user string against the image's /etc/passwd and /etc/group.

Accepted forms, as in ``docker run --user``: ``uid``, ``uid:gid``, ``name``,
``name:group``, ``uid:group``, ``name:gid`` (empty means root).

Docker's rules, which we keep:

- a name must exist in the image (``user 'x' not found in image``); a numeric
  uid need not, and then gets gid 0 and home ``/``;
- a numeric uid that *is* in passwd takes its primary gid from there;
- without an explicit group, the user also gets the supplementary groups that
  list it as a member in /etc/group; with one, it gets only that group;
- ``--group-add`` groups come after those: a gid as is, a name through /etc/group.

Everything here is pure: functions take the files' text. The caller reads them
from the image through the one root-confined reader
(:func:`ctrexec._linux.read_in_root`, via :func:`ctrexec.containerd.images.read_rootfs_files`),
because an image is untrusted and a symlink such as
``/etc/passwd -> /../../etc/shadow`` must resolve inside it.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ctrexec.errors import InvalidArgument
from ctrexec.oci.process import MAX_ID


@attrs.frozen
class PasswdEntry:
    """One line of /etc/passwd."""

    name: str
    uid: int
    gid: int
    home: str
    shell: str


@attrs.frozen
class GroupEntry:
    """One line of /etc/group."""

    name: str
    gid: int
    members: tuple[str, ...]


@attrs.frozen
class ResolvedUser:
    """Numeric identity for the OCI spec, plus the home directory for ``HOME``."""

    uid: int
    gid: int
    additional_gids: tuple[int, ...] = ()
    home: str = "/"
    name: str | None = None


def _parse_id(text: str) -> int | None:
    if not text.isdigit():
        return None
    value = int(text)
    return value if value <= MAX_ID else None


def parse_passwd(text: str) -> list[PasswdEntry]:
    """Parse passwd text; malformed lines are skipped, as libc does."""
    entries = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split(":")
        if len(fields) < 7:
            continue
        uid, gid = _parse_id(fields[2]), _parse_id(fields[3])
        if not fields[0] or uid is None or gid is None:
            continue
        entries.append(PasswdEntry(fields[0], uid, gid, fields[5] or "/", fields[6]))
    return entries


def parse_group(text: str) -> list[GroupEntry]:
    """Parse group text; malformed lines are skipped."""
    entries = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split(":")
        if len(fields) < 4:
            continue
        gid = _parse_id(fields[2])
        if not fields[0] or gid is None:
            continue
        members = tuple(m.strip() for m in fields[3].split(",") if m.strip())
        entries.append(GroupEntry(fields[0], gid, members))
    return entries


def _check_numeric(value: int, what: str) -> int:
    if value > MAX_ID:
        raise InvalidArgument(f"{what} {value} is out of range (0-{MAX_ID})")
    return value


def split_user_spec(user: str) -> tuple[str, str]:
    """``user`` as (user, group) parts, refusing what no image could make valid.

    The empty string is root; numeric ids must be in range. Names are checked
    only against an image, by :func:`resolve_user_spec`.
    """
    if not isinstance(user, str):
        raise InvalidArgument(f"user must be a string, got {user!r}")
    user_part, sep, group_part = user.strip().partition(":")
    if sep and not group_part:
        raise InvalidArgument(f"invalid user {user!r}: empty group after ':'")
    if not user_part:
        if sep:
            raise InvalidArgument(f"invalid user {user!r}: empty user before ':'")
        user_part = "0"
    if user_part.isdigit():
        _check_numeric(int(user_part), "uid")
    if group_part.isdigit():
        _check_numeric(int(group_part), "gid")
    return user_part, group_part


def check_group_add(groups: Sequence[str]) -> None:
    """``--group-add``: each a group name (looked up in the image) or a gid in range."""
    for group in groups:
        if not group.strip():
            raise InvalidArgument("a group to add must not be empty")
        if group.isdigit():
            _check_numeric(int(group), "gid")


def _added_gids(added: Sequence[str], groups: list[GroupEntry]) -> list[int]:
    """docker's --group-add: a number as is, a name through the image's /etc/group."""
    gids = []
    for group in added:
        if group.isdigit():
            gids.append(_check_numeric(int(group), "gid"))
            continue
        entry = next((g for g in groups if g.name == group), None)
        if entry is None:
            raise InvalidArgument(
                f"Unable to find group {group}: no matching entries in group file"
            )
        gids.append(entry.gid)
    return gids


def resolve_user_spec(
    user: str,
    passwd_text: str | None,
    group_text: str | None,
    group_add: Sequence[str] = (),
) -> ResolvedUser:
    """Resolve ``user`` against passwd/group text (None: the image has no such file);
    ``group_add`` (``--group-add``) follows the user's own supplementary groups."""
    user_part, group_part = split_user_spec(user)
    passwd = parse_passwd(passwd_text or "")
    groups = parse_group(group_text or "")

    entry: PasswdEntry | None
    if user_part.isdigit():
        uid = int(user_part)
        entry = next((p for p in passwd if p.uid == uid), None)
    else:
        entry = next((p for p in passwd if p.name == user_part), None)
        if entry is None:
            raise InvalidArgument(f"user {user_part!r} not found in image")
        uid = entry.uid
    gid = entry.gid if entry else 0
    home = entry.home if entry else "/"
    name = entry.name if entry else None

    additional: list[int] = []
    if group_part:
        if group_part.isdigit():
            gid = int(group_part)
        else:
            group = next((g for g in groups if g.name == group_part), None)
            if group is None:
                raise InvalidArgument(f"group {group_part!r} not found in image")
            gid = group.gid
    elif name is not None:
        additional = [g.gid for g in groups if name in g.members]
    additional += _added_gids(group_add, groups)
    # docker lists the primary group among the supplementary ones, so ``id`` in the
    # task shows it in ``groups=`` and a process keeps it after a setgid of its own
    return ResolvedUser(uid, gid, tuple(dict.fromkeys([gid, *additional])), home, name)
