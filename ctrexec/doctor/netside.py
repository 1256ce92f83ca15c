"""Pinned namespaces and bridge ports that nothing of ctrexec's uses any more.

A namespace is ctrexec's when its name has the group prefix (``cx-``, owned by
:mod:`ctrexec.net.holders`) or its marker says ctrexec made it
(:mod:`ctrexec.net.nsmarks`); ``ip netns add``'s, docker's and Nomad's are never
looked at. One of ours is garbage only when all of these hold: no record in any
containerd namespace names it (its path in a label, or its group), nothing but its
pin keeps it (no process inside, no fd of it open, no second mount:
:mod:`ctrexec.net.nsrefs`), and it is past the grace period (a group's namespace is
made, and wired, before its first record). Its age is its marker's, or else the
pin's inode time.

Ownership is recorded, not inferred: the marker names the pin's owner (the
containerd's address, its namespace and the group: :func:`ctrexec.net.nsmarks.owner_of`),
and gc removes only pins whose owner is the containerd namespace it looks at. A pin
of another containerd (one with the same namespace name, too) is not listed; one
with no owner recorded (older markers, ``cx-`` pins without a marker, ``ctrexec
netns create``'s) is listed as spared. A create in flight holds its pin's lock
(:mod:`ctrexec.inflight`) until its record exists: doctor skips such a pin, and gc
removes one only while it holds that lock itself, after looking for a record again.

A bridge port is "without a namespace" when it is a veth on ctrexec's bridge whose
peer is in the host's namespace: a half-made pair, never moved into a sandbox. That is
the only such state that lasts. The kernel deletes a veth with its peer's namespace,
so a host end whose namespace is gone goes by itself (a moment later: those
"going away" ports are not reported); a host end whose peer namespace lives is in use
by whoever keeps that namespace, or goes with it once the namespace check above
removes it (gc's order: namespaces first). No create passes through a host-side pair
(the bridge plugin makes the pair inside the sandbox and moves one end out), so the
grace period does not apply to it: a link has no age to judge anyway.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ctrexec import inflight, owners
from ctrexec import labels as lbl
from ctrexec.doctor.files import spared
from ctrexec.doctor.findings import Check, Finding, Scope, every_record, stamp
from ctrexec.errors import FailedPrecondition, NotFound
from ctrexec.net import netns, nsmarks, nsrefs
from ctrexec.net.holders import NETNS_PREFIX

NETNS = "netns"
VETH = "veth"
_HOST = "/proc/self/ns/net"


def ours(name: str, path: str) -> bool:
    """Whether the pinned namespace ``name`` is ctrexec's to judge."""
    return name.startswith(NETNS_PREFIX) or nsmarks.made_by_ctrexec(path)


def named_by(labels: Iterable[Mapping[str, str]]) -> set[str]:
    """Every namespace path some record's labels name: a path label, or a group's pin."""
    out: set[str] = set()
    for labels_of in labels:
        for key, value in labels_of.items():
            if value.startswith(netns.NETNS_RUN_DIR + "/"):
                out.add(value)
            if key == lbl.GROUP and value:
                out.add(f"{netns.NETNS_RUN_DIR}/{NETNS_PREFIX}{value}")
    return out


def _since(path: str) -> float | None:
    """When ctrexec made the namespace (its marker), else the pin's inode time."""
    marker = [nsmarks.MARK_DIR / Path(path).name] if nsmarks.made_by_ctrexec(path) else []
    for candidate in (*marker, Path(path)):
        with contextlib.suppress(OSError):
            return candidate.stat().st_mtime
    return None


def _what(path: str, users: Sequence[nsrefs.NetnsUser]) -> str | None:
    """Why the namespace at ``path`` is garbage, or None when something still uses it."""
    if users:
        return None
    if not netns.is_mounted(path):
        try:
            empty = os.lstat(path).st_size == 0
        except OSError:
            return None  # gone meanwhile
        # the empty file a create cut short (or an unmount) leaves; anything else at
        # that name is not a pin, and netns.remove would refuse it
        return "a namespace file with no namespace on it" if empty else None
    return "a pinned namespace no record names and no process uses"


def _owner_says(scope: Scope, path: str) -> str | None:
    """None when the scope's gc may remove the pin at ``path``; else why not ("" for
    another containerd's, which doctor does not list). The empty file a create cut
    short leaves holds no namespace of anyone's, and no marker (that comes after
    the mount): it is anyone's gc's."""
    if not netns.is_mounted(path):
        return None
    owner = nsmarks.owner_of(path)
    if owner is None:
        return owners.UNRECORDED
    return None if owner.same_daemon(scope.client.address, scope.namespace) else ""


def find_namespaces(scope: Scope) -> list[Finding]:
    # creates in flight first: one that ends before the records are read is named there
    candidates = [
        ns
        for ns in netns.list_namespaces()
        if ours(ns.name, ns.path) and not inflight.busy(inflight.netns_key(ns.name))
    ]
    if not candidates:
        return []
    named = named_by(record.labels for _, record in every_record(scope))
    loose = [ns for ns in candidates if ns.path not in named]
    users = nsrefs.users_of_each([ns.path for ns in loose])
    out = []
    for ns in loose:
        what = _what(ns.path, users.get(ns.path, []))
        since = _since(ns.path)
        why = _owner_says(scope, ns.path)
        if what is None or not scope.old_enough(since) or why == "":
            continue
        found = Finding(kind=NETNS, where=ns.path, what=what, fix="ctrexec gc", since=stamp(since))
        out.append(found if why is None else spared(found, why))
    return out


def remove_namespace(scope: Scope, finding: Finding) -> None:
    """Unpin it, holding its in-flight lock: no create of it can start or end
    meanwhile, so a record that names it now is one made since ``find``."""
    name = Path(finding.where).name
    with inflight.claimed(inflight.netns_key(name)) as free:
        if not free:
            raise FailedPrecondition(f"{finding.where} is being made; left alone")
        if _owner_says(scope, finding.where) is not None:
            raise FailedPrecondition(f"{finding.where} has another owner now; left alone")
        if finding.where in named_by(record.labels for _, record in every_record(scope)):
            raise FailedPrecondition(f"{finding.where} has a record now; left alone")
        if nsrefs.users_of(finding.where):
            raise FailedPrecondition(f"{finding.where} is in use again; left alone")
        try:
            netns.remove(finding.where)
        except NotFound:
            return  # gone meanwhile: what gc wanted


# ----------------------------------------------------------------- bridge ports


def _kind(link: Any) -> str | None:
    info = link.get_attr("IFLA_LINKINFO")
    return None if info is None else info.get_attr("IFLA_INFO_KIND")


def half_made(links: Sequence[Any], bridge: str) -> list[tuple[str, str]]:
    """(host end, peer) of each veth on ``bridge`` whose peer is in this namespace."""
    by_index = {link["index"]: link for link in links}
    master = next(
        (m for m in links if m.get_attr("IFLA_IFNAME") == bridge and _kind(m) == "bridge"), None
    )
    if master is None:
        return []
    out = []
    for link in links:
        if link.get_attr("IFLA_MASTER") != master["index"] or _kind(link) != "veth":
            continue
        if link.get_attr("IFLA_LINK_NETNSID") is not None:
            continue  # the peer is in another namespace: see the module docstring
        peer = by_index.get(link.get_attr("IFLA_LINK"))
        peer_name = "?" if peer is None else str(peer.get_attr("IFLA_IFNAME"))
        out.append((str(link.get_attr("IFLA_IFNAME")), peer_name))
    return out


def _dump() -> list[Any]:
    with netns.netlink(_HOST, allow_host=True) as ipr:
        return list(ipr.link("dump"))


def find_veths(scope: Scope) -> list[Finding]:
    bridge = scope.networks.bridge
    if not Path(f"/sys/class/net/{bridge}").exists():
        return []
    return [
        Finding(
            kind=VETH,
            where=f"{bridge}/{host}",
            what=f"a veth on {bridge} whose peer {peer} never left the host (a half-made pair)",
            fix="ctrexec gc",
            ref=host,
        )
        for host, peer in half_made(_dump(), bridge)
    ]


def remove_veth(scope: Scope, finding: Finding) -> None:
    """Delete the host end (its peer goes with it), if it is still such a pair."""
    try:
        with netns.netlink(_HOST, allow_host=True) as ipr:
            links = list(ipr.link("dump"))
            if finding.ref not in {h for h, _ in half_made(links, scope.networks.bridge)}:
                return
            index = next(m["index"] for m in links if m.get_attr("IFLA_IFNAME") == finding.ref)
            ipr.link("del", index=index)
    except NotFound:
        return  # gone meanwhile (netlink errors come out as ctrexec's at the with)


NAMESPACES = Check(kind=NETNS, find=find_namespaces, remove=remove_namespace)
VETHS = Check(kind=VETH, find=find_veths, remove=remove_veth)

__all__ = ["NAMESPACES", "NETNS", "VETH", "VETHS", "half_made", "named_by", "ours"]
