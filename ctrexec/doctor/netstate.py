"""What CNI left on the host for attachments that are gone: cached results, host-local
reservations, NAT rules.

An attachment is live while any of these says so: a record in some containerd
namespace names its group (the CNI owner is the group's name), the group's namespace
``cx-NAME`` is pinned (:mod:`ctrexec.net.holders` owns the prefix), or, for an
address, some live ``cx-*`` namespace carries it. Only ctrexec's own state is
looked at: the CNI cache and the host-local pool of the scope's :class:`Networks`,
and the NAT rules whose comments name its bridge network (another network's, another
tool's and every other chain are left alone).

A group no record names, whose pin's recorded owner is the scope's containerd namespace
(:mod:`ctrexec.owners`), whose pinned namespace nothing but its pin keeps (no process,
no open fd), whose lock no act holds (:mod:`ctrexec.tasks.grouplock`) and which is past
the grace period is *abandoned*: what a ``group down`` (or ``up``) killed mid-way left.
Its pin and cached result no longer account for its reservation and rules, which are
named with ``ctrexec group down NAME`` (it runs the DEL the killed one did not).

Ownership is recorded, not inferred: an attachment's owner record
(:func:`ctrexec.owners.attachment_record`, the owner of its result and of the
reservation its ADD made) must name the scope's containerd namespace. Another
containerd's result or reservation is not listed; one with no record (made by another
tool, or by ctrexec before it recorded owners) is listed as spared, with the reason,
and never removed. An abandoned group's pin is recorded as the scope's, and so counts
as the owner of its reservation when an older ADD recorded none.

gc undoes a dead cached result with a CNI DEL (``Networks.teardown``), which also
releases its address and its rules; then the reservations and rules no result
explains go one by one. A cached result and a reservation are files with an age, and
the grace period applies (an ADD writes its reservation before its result). Rules
have no age, and need none: an ADD caches its record before the first plugin runs,
in a namespace already pinned, so no rule of a create in flight is without both.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
from collections.abc import Collection, Iterable, Iterator
from pathlib import Path

from ctrexec import inflight, owners
from ctrexec import labels as lbl
from ctrexec.doctor.files import judge_owner, spared
from ctrexec.doctor.findings import Check, Finding, Scope, every_record, stamp
from ctrexec.errors import CtrexecError, FailedPrecondition, NetworkError
from ctrexec.net import health, holders, ipamstore, iptables, netns, nsmarks, nsrefs
from ctrexec.net.cni import CNI
from ctrexec.net.cniconf import CNIAttachment
from ctrexec.net.networks import IFNAME
from ctrexec.tasks import grouplock

CNI_RESULT = "cni-result"
IPAM = "ipam"
NAT_RULES = "iptables"
_FIX = "ctrexec gc"


def recorded_groups(scope: Scope) -> set[str]:
    """Every group some record in some containerd namespace belongs to."""
    return {g for _, r in every_record(scope) if (g := r.labels.get(lbl.GROUP))}


def pinned(group: str) -> bool:
    """Whether the group's namespace is pinned (mounted at ``cx-NAME``)."""
    path = f"{netns.NETNS_RUN_DIR}/{holders.NETNS_PREFIX}{group}"
    return netns.is_mounted(path)


def _mtime(path: Path) -> float | None:
    with contextlib.suppress(OSError):
        return path.stat().st_mtime
    return None


def abandoned(scope: Scope) -> set[str]:
    """The groups a killed ``group down`` or ``up`` left (see the module's text)."""
    groups = recorded_groups(scope)
    prefix = holders.NETNS_PREFIX
    loose = {
        ns.name[len(prefix) :]: ns.path
        for ns in netns.list_namespaces()
        if ns.name.startswith(prefix) and ns.name[len(prefix) :] not in groups
    }
    if not loose:
        return set()
    users = nsrefs.users_of_each(list(loose.values()))
    spaces = scope.client.namespaces()
    address, namespace = scope.client.address, scope.client.namespace
    return {
        group
        for group, path in loose.items()
        # Only a pin recorded as this containerd namespace's: another daemon's stopped
        # group, or one made before owners were recorded, is not judged abandoned.
        if owners.spared(nsmarks.owner_of(path), address, namespace) is None
        and not users.get(path)
        and not inflight.busy(inflight.netns_key(prefix + group))  # a run -p under way
        and netns.is_mounted(path)
        and scope.old_enough(_mtime(Path(path)))
        and not any(grouplock.busy(scope.client.with_namespace(n), group) for n in spaces)
    }


@contextlib.contextmanager
def _claimed(owner: str, where: str) -> Iterator[None]:
    """gc's removal of what an attachment of ``owner`` left, holding its pin's in-flight
    lock (:mod:`ctrexec.inflight`): no create of that name makes its reservation and
    rules meanwhile, which come before its record."""
    with inflight.claimed(inflight.netns_key(holders.NETNS_PREFIX + owner)) as free:
        if not free:
            raise FailedPrecondition(f"{where} belongs to a create under way; left alone")
        yield


def _killed(owner: str, gone: Collection[str]) -> str:
    if owner not in gone:
        return ""
    return f" (group {owner} has no record and nothing uses its namespace: a killed group down)"


def _fix_for(owner: str, gone: Collection[str]) -> str:
    return f"ctrexec group down {owner}" if owner in gone else _FIX


def _judged(
    scope: Scope, found: Finding, network: str, holder: str, gone: Collection[str] = ()
) -> Finding | None:
    """``found`` as gc may act on it, by the attachment's recorded owner (see the
    module's text): None for another containerd's, spared for one with no record."""
    owner = scope.networks.cni.owner(network, holder, IFNAME)
    if owner is None and holder in gone:  # its pin is recorded as this scope's
        owner = owners.Owner(scope.client.address, scope.client.namespace, holder)
    why = judge_owner(scope, owner)
    if why is None:
        return found
    return None if owner is not None else spared(found, why)


# ------------------------------------------------------------------ CNI results


def _result_path(scope: Scope, cached: CNIAttachment) -> Path:
    return scope.networks.cni.cache_path(cached.network, cached.container_id, cached.ifname)


def dead_results(scope: Scope) -> list[tuple[CNIAttachment, float | None]]:
    """The cached ADDs of no recorded group whose namespace is gone, with their age."""
    groups = recorded_groups(scope)
    out = []
    for cached in scope.networks.cni.attachments():
        if cached.ifname != IFNAME:
            continue  # not an attachment ctrexec makes (nor one its DEL would undo)
        if cached.container_id in groups or netns.is_mounted(cached.netns):
            continue
        out.append((cached, _mtime(_result_path(scope, cached))))
    return out


def find_results(scope: Scope) -> list[Finding]:
    out = []
    for cached, since in dead_results(scope):
        if not scope.old_enough(since):
            continue
        found = Finding(
            kind=CNI_RESULT,
            where=os.fspath(_result_path(scope, cached)),
            what=f"the cached attachment of {cached.container_id} to {cached.network}, "
            f"whose group and namespace are gone",
            fix=_FIX,
            since=stamp(since),
            ref=f"{cached.network}\n{cached.container_id}",
        )
        judged = _judged(scope, found, cached.network, cached.container_id)
        if judged is not None:
            out.append(judged)
    return out


def remove_result(scope: Scope, finding: Finding) -> None:
    """A CNI DEL from the cached ADD: the address and the rules go with the result."""
    network, owner = finding.ref.split("\n", 1)
    nets = scope.networks
    mode = "bridge" if network == nets.network else f"cni:{network}"
    with _claimed(owner, finding.where):  # a create of that name makes its result anew
        if Path(finding.where).exists() and (owner in recorded_groups(scope) or pinned(owner)):
            raise FailedPrecondition(f"{finding.where} is live again; left alone")
        nets.teardown(owner, None, mode)
    if Path(finding.where).exists():
        raise NetworkError(f"CNI DEL of {owner} on {network} left {finding.where}")


# --------------------------------------------------------------- reservations


def explained(
    scope: Scope,
    gone: Collection[str] = (),
) -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """Addresses a cached result or a live group namespace accounts for (an abandoned
    group's, ``gone``, accounts for none)."""
    out: set[ipaddress.IPv4Address | ipaddress.IPv6Address] = {
        address
        for address, owners in holders.all_holders(IFNAME).items()
        if any(owner not in gone for owner in owners)
    }
    for cached in scope.networks.cni.attachments():
        if cached.container_id not in gone:
            out.update(ipaddress.ip_interface(a).ip for a in health.addresses(cached))
    return out


def _pool(scope: Scope) -> ipamstore.Pool | None:
    nets = scope.networks
    pools = ipamstore.host_local_pools(nets.network, nets.bridge_network.plugins)
    return pools[0] if pools else None


def reservations(pool: ipamstore.Pool) -> Iterable[tuple[Path, str]]:
    """Each reservation file of the pool (named by an address in it) and its holder."""
    try:
        entries = list(pool.directory.iterdir())
    except OSError:
        return []
    out = []
    for path in sorted(entries):
        try:
            if not pool.holds(ipaddress.ip_address(path.name)):
                continue
            holder, _ = ipamstore.parse_reservation(path.read_bytes().decode("utf-8", "replace"))
        except (ValueError, OSError):
            continue  # lock, last_reserved_ip.0, a file gone meanwhile
        out.append((path, holder))
    return out


def find_reservations(scope: Scope) -> list[Finding]:
    pool = _pool(scope)
    if pool is None:
        return []
    gone = abandoned(scope)
    live = explained(scope, gone)
    out = []
    for path, holder in reservations(pool):
        since = _mtime(path)
        if ipaddress.ip_address(path.name) in live or not scope.old_enough(since):
            continue
        found = Finding(
            kind=IPAM,
            where=os.fspath(path),
            what=f"{path.name} reserved for {holder or '?'}, which no attachment "
            "and no live namespace holds" + _killed(holder, gone),
            fix=_fix_for(holder, gone),
            since=stamp(since),
            ref=holder,
        )
        judged = _judged(scope, found, pool.directory.name, holder, gone) if holder else None
        if judged is not None or not holder:
            out.append(judged or spared(found, owners.UNRECORDED))
    return out


def remove_reservation(scope: Scope, finding: Finding) -> None:
    pool = _pool(scope)
    path = Path(finding.where)
    if pool is None or path.parent != pool.directory:
        raise NetworkError(f"{path} is not in the pool of {scope.networks.network}")
    with _claimed(finding.ref, finding.where):
        if ipaddress.ip_address(path.name) in explained(scope, abandoned(scope)):
            raise FailedPrecondition(f"{path} is held again; left alone")
        ipamstore.release_own(pool, [path.name], finding.ref)
        cni = scope.networks.cni
        if not cni.cache_path(pool.directory.name, finding.ref, IFNAME).exists():
            owners.forget(cni.owner_path(pool.directory.name, finding.ref, IFNAME))
    if path.exists():
        raise NetworkError(f"{path} is still there (it names another holder now)")


# ---------------------------------------------------------------------- rules


def dead_owners(scope: Scope, gone: set[str] | None = None) -> list[str]:
    """Owners of the bridge network's NAT rules whose attachment is gone."""
    network = scope.networks.network
    found: set[str] = set()
    for tool in iptables.TOOLS:
        found |= iptables.owners(iptables.list_rules(tool), network)
    if not found:
        return []
    groups = recorded_groups(scope)
    cache = scope.networks.cni
    gone = abandoned(scope) if gone is None else gone
    return sorted(
        owner
        for owner in found
        if owner not in groups
        and (owner in gone or (not pinned(owner) and not _cached(cache, network, owner)))
    )


def _cached(cache: CNI, network: str, owner: str) -> bool:
    """Whether a result is cached for (network, owner); an id CNI would refuse has none."""
    try:
        return cache.cache_path(network, owner, IFNAME).exists()
    except CtrexecError:
        return False


def find_rules(scope: Scope) -> list[Finding]:
    network = scope.networks.network
    gone = abandoned(scope)
    return [
        Finding(
            kind=NAT_RULES,
            where=f"nat {iptables.chain_name(network, owner)} "
            f"{iptables.masq_comment(network, owner)}",
            what=f"masquerade and port rules of {owner}, whose attachment is gone"
            + _killed(owner, gone),
            fix=_fix_for(owner, gone),
            ref=owner,
        )
        for owner in dead_owners(scope, gone)
    ]


def remove_rules(scope: Scope, finding: Finding) -> None:
    network = scope.networks.network
    with _claimed(finding.ref, finding.where):
        if finding.ref not in dead_owners(scope):
            raise FailedPrecondition(f"{finding.where}: its attachment is live again; left alone")
        iptables.remove_attachment(network, finding.ref)
    for tool in iptables.TOOLS:
        if finding.ref in iptables.owners(iptables.list_rules(tool), network):
            raise NetworkError(f"{tool}: rules of {finding.ref} are still there")


RESULTS = Check(kind=CNI_RESULT, find=find_results, remove=remove_result)
RESERVATIONS = Check(kind=IPAM, find=find_reservations, remove=remove_reservation)
RULES = Check(kind=NAT_RULES, find=find_rules, remove=remove_rules)

__all__ = [
    "CNI_RESULT",
    "IPAM",
    "NAT_RULES",
    "RESERVATIONS",
    "RESULTS",
    "RULES",
    "dead_owners",
    "dead_results",
    "explained",
    "recorded_groups",
    "reservations",
]
