"""Snapshots and leases of the scope's namespace that nothing references.

containerd's own GC keeps a snapshot a container record names, a lease holds or a
``containerd.io/gc.root`` label pins, and collects the rest, but only at its next
pass, which a deletion triggers: an *active* or *view* snapshot (a root filesystem,
a mount for reading files) that nothing names lives until then. One of those, older
than the grace period, is what a destroy cut short or a record deleted outside
ctrexec left; gc removes it, or containerd's pass is first. What truly leaks is a
lease that holds snapshots, which the lease check reports. Committed snapshots are
images' layers: containerd's GC and ``image prune`` own them.

A lease is ctrexec's when its id starts :data:`~ctrexec.containerd.client.LEASE_ID_PREFIX`;
every one ctrexec makes carries ``containerd.io/gc.expire`` (a pull or create in
flight, or an interrupted pull kept for its retry, lives until then). So a lease is
garbage only past that time (containerd deletes an expired lease at its next
collection, which may be long in coming), or, with no expiry at all, once older than
the grace period (no call of ctrexec holds one so). Other tools' leases are left
alone, and so is everything in other containerd namespaces.
"""

from __future__ import annotations

from datetime import datetime

from ctrexec.containerd import snapshots as csnap
from ctrexec.containerd.client import LEASE_EXPIRE_LABEL, LEASE_ID_PREFIX, Lease
from ctrexec.doctor.findings import Check, Finding, Scope
from ctrexec.errors import NotFound

SNAPSHOT_KIND = "snapshot"
LEASE_KIND = "lease"
#: containerd's label that makes any object a GC root.
GC_ROOT_LABEL = "containerd.io/gc.root"
#: Snapshots that are roots of their own (see the module docstring).
_LOOSE_KINDS = frozenset({"active", "view"})


def _referenced(scope: Scope) -> tuple[set[str], set[tuple[str, str]]]:
    """The snapshotters in use, and every (snapshotter, key) a record or a lease holds."""
    records = scope.records()
    held = {(r.snapshotter, r.snapshot_key) for r in records if r.snapshot_key}
    for lease in scope.client.leases():
        for kind, key in scope.client.lease_resources(lease.id):
            if kind.startswith("snapshots/"):
                held.add((kind.removeprefix("snapshots/"), key))
    snapshotters = {csnap.DEFAULT_SNAPSHOTTER} | {r.snapshotter for r in records if r.snapshotter}
    return snapshotters, held


def loose(info: csnap.SnapshotInfo, snapshotter: str, held: set[tuple[str, str]]) -> bool:
    """Whether a snapshot is one nothing keeps (the rule; its age is judged apart)."""
    return (
        info.kind in _LOOSE_KINDS
        and (snapshotter, info.name) not in held
        and GC_ROOT_LABEL not in info.labels
    )


def find_snapshots(scope: Scope) -> list[Finding]:
    snapshotters, held = _referenced(scope)
    found = []
    for snapshotter in sorted(snapshotters):
        for info in csnap.list_snapshots(scope.client, snapshotter):
            if loose(info, snapshotter, held) and scope.old_enough(info.created):
                found.append(
                    Finding(
                        kind=SNAPSHOT_KIND,
                        where=info.name,
                        what=f"an {info.kind} {snapshotter} snapshot no container or lease names",
                        fix="ctrexec gc",
                        since=info.created,
                        ref=snapshotter,
                    )
                )
    return found


def remove_snapshot(scope: Scope, finding: Finding) -> None:
    _, held = _referenced(scope)
    if (finding.ref, finding.where) not in held:  # named since doctor looked: not garbage
        csnap.remove_snapshot(scope.client, finding.where, finding.ref)


def _expiry(lease: Lease) -> datetime | None:
    try:
        return datetime.fromisoformat(lease.labels[LEASE_EXPIRE_LABEL])
    except (KeyError, ValueError):
        return None


def stale_lease(scope: Scope, lease: Lease) -> datetime | None:
    """Since when a lease is garbage (its expiry, or its creation for one without),
    or None when it is not (the module docstring's rule)."""
    if not lease.id.startswith(LEASE_ID_PREFIX):
        return None
    expiry = _expiry(lease)
    if expiry is not None:
        return expiry if expiry.timestamp() <= scope.now else None
    if LEASE_EXPIRE_LABEL in lease.labels:
        return None  # an expiry we cannot read: containerd's to judge
    return lease.created_at if scope.old_enough(lease.created_at) else None


def find_leases(scope: Scope) -> list[Finding]:
    found = []
    for lease in scope.client.leases():
        since = stale_lease(scope, lease)
        if since is None:
            continue
        expired = LEASE_EXPIRE_LABEL in lease.labels
        found.append(
            Finding(
                kind=LEASE_KIND,
                where=lease.id,
                what="a lease past its expiry" if expired else "a lease with no expiry, unused",
                fix="ctrexec gc",
                since=since,
            )
        )
    return found


def remove_lease(scope: Scope, finding: Finding) -> None:
    try:
        scope.client.delete_lease(finding.where)
    except NotFound:
        return  # containerd's GC was first


SNAPSHOTS = Check(kind=SNAPSHOT_KIND, find=find_snapshots, remove=remove_snapshot)
LEASES = Check(kind=LEASE_KIND, find=find_leases, remove=remove_lease)
