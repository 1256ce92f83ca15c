"""Identifier rules, checked before any side effect.

containerd accepts identifiers matching ``^[A-Za-z0-9]+([._-][A-Za-z0-9]+)*$`` of at most
76 characters for namespaces, containers, leases and snapshots keys it names itself. We
apply the same rule on our side so a bad id is refused with a clear message before a
single RPC is made.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ctrexec.errors import AmbiguousPrefix, InvalidArgument

MAX_ID_LENGTH = 76
_ID_RE = re.compile(r"^[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*$")


def validate_id(value: str, *, kind: str = "id") -> str:
    """Return ``value`` when it is a valid containerd identifier, else raise InvalidArgument."""
    if not isinstance(value, str) or value == "":
        raise InvalidArgument(f"{kind} must not be empty")
    shown = value.encode("unicode_escape").decode("ascii")
    if len(value) > MAX_ID_LENGTH:
        raise InvalidArgument(
            f"{kind} {shown[:20]!r}... is {len(value)} characters; at most {MAX_ID_LENGTH} allowed"
        )
    if not _ID_RE.fullmatch(value):
        raise InvalidArgument(
            f"invalid {kind} {shown!r}: use letters and digits, separated by single '.', '_' or '-'"
        )
    return value


def is_valid_id(value: str) -> bool:
    """True when ``value`` passes :func:`validate_id`."""
    return isinstance(value, str) and len(value) <= MAX_ID_LENGTH and bool(_ID_RE.fullmatch(value))


#: The digests containerd and registries accept (OCI's registered algorithms).
_DIGEST_RE = re.compile(r"^(sha256:[a-f0-9]{64}|sha384:[a-f0-9]{96}|sha512:[a-f0-9]{128})$")


def validate_digest(digest: str) -> str:
    """Return ``digest`` when it is ``algorithm:hex`` of a supported algorithm, else
    raise InvalidArgument; the one definition the reference grammar and content share."""
    if not isinstance(digest, str) or not _DIGEST_RE.fullmatch(digest):
        raise InvalidArgument(f"invalid digest {digest!r}")
    return digest


def by_prefix(given: str, known: Iterable[str]) -> str | None:
    """The one of ``known`` that ``given`` names, by docker's rule for IDs: itself when
    it is one of them (an exact name wins over being the start of others), else the
    only one it begins; None when it begins none (or is empty).

    AmbiguousPrefix when it begins several, in docker's words.
    """
    names = set(known)
    if given in names:
        return given
    found = sorted(n for n in names if given and n.startswith(given))
    if len(found) > 1:
        raise AmbiguousPrefix(f"multiple IDs found with provided prefix: {given}")
    return found[0] if found else None


#: The cgroup (v2 path, or the parent of v1's) of each task ctrexec runs:
#: ``/ctrexec/<namespace>/<id>``, so the id of a process's container can be read
#: back from ``/proc/PID/cgroup`` without asking containerd.
CGROUP_PARENT = "/ctrexec"


def task_cgroup(namespace: str, task_id: str) -> str:
    return f"{CGROUP_PARENT}/{namespace}/{task_id}"


def task_of_cgroup(cgroup: str) -> tuple[str, str] | None:
    """(namespace, id) of the task whose cgroup holds ``cgroup``; None if not ctrexec's."""
    parts = cgroup.strip("/").split("/")
    if len(parts) >= 3 and f"/{parts[0]}" == CGROUP_PARENT:
        return parts[1], parts[2]
    return None
