"""The damage that breaks a group's promise of one namespace and one address.

None of it is garbage: each finding names the command that repairs it today (README,
"When things go wrong"), and gc leaves it alone. The facts come from where ``ps``,
``inspect`` and ``group ps`` get them, so doctor and they never disagree:
:mod:`ctrexec.tasks.health` (a lost pin, a split, an attachment no longer wired),
:mod:`ctrexec.groups.missing` (a member deleted outside ctrexec) and
:mod:`ctrexec.net.holders` (an address two group namespaces carry).

Groups are the scope's containerd namespace's (the repairs are run in it); an address
held twice is the host's, whichever namespaces the two groups' records are in.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence

from ctrexec import labels as lbl
from ctrexec.containerd import containers, tasks
from ctrexec.doctor.findings import Check, Finding, Scope
from ctrexec.errors import CtrexecError
from ctrexec.groups import missing
from ctrexec.net import grouppin, holders
from ctrexec.net import health as nethealth
from ctrexec.net import settings as net_settings
from ctrexec.net.networks import IFNAME
from ctrexec.tasks import health

PIN_LOST = "pin-lost"
SPLIT = "split"
MISSING = "member-missing"
NOT_ATTACHED = "not-attached"
ADDRESS_TWICE = "address-twice"
_KINDS = {health.PIN_LOST: PIN_LOST, health.SPLIT: SPLIT}


def _command(repair: str) -> str:
    """A Problem's repair ("run ctrexec start x to ...") as the command alone."""
    return repair.removeprefix("run ").split(" to ", 1)[0]


def _damage(kind: str, group: str, what: str, fix: str) -> Finding:
    return Finding(kind=kind, where=f"group {group}", what=what, fix=fix, garbage=False)


def pin_findings(
    group: str, records: Sequence[containers.Container], pids: Mapping[str, int]
) -> list[Finding]:
    """A lost pin or a split, as ``ps`` reports them (``pids``: the running members)."""
    pinned = [r for r in records if health.pin_of(r.labels) is not None]
    if not pinned:
        return []
    pin = str(health.pin_of(pinned[0].labels))
    found = grouppin.check(pin, {r.id: pids[r.id] for r in pinned if r.id in pids})
    name = found.living_member() or sorted(r.id for r in pinned)[0]
    return [  # the repair ps, inspect and group ps give: one owner (health.split_repair)
        _damage(_KINDS[p.what], group, f"{p.what}: {p.detail}", _command(p.repair))
        for p in health.pin_problems(found, name)
    ]


def wiring_findings(
    group: str, records: Sequence[containers.Container], pids: Mapping[str, int]
) -> list[Finding]:
    """An attachment no longer wired (eth0, its address, its host end, the bridge),
    for a group whose pin is sound and one of whose wired members runs."""
    running = sorted((r for r in records if r.id in pids), key=lambda r: r.id)
    wired = [r for r in running if health.wired_mode(r.labels) is not None]
    if not wired:
        return []
    member = wired[0]
    pin, mode = str(health.pin_of(member.labels)), str(health.wired_mode(member.labels))
    try:
        nets = net_settings.from_label(health.settings_text(member.labels) or "")
        faults = nethealth.faults(nets, group, pin, mode)
    except CtrexecError as exc:
        faults = [f"cannot be checked: {exc}"]
    return [
        _damage(NOT_ATTACHED, group, f"not attached: {fault}", f"ctrexec start {member.id}")
        for fault in faults
    ]


def find_groups(scope: Scope) -> list[Finding]:
    records = scope.managed()
    states = tasks.states_of(scope.client, [r.id for r in records])
    by_group: dict[str, list[containers.Container]] = {}
    for record in records:
        if group := record.labels.get(lbl.GROUP):
            by_group.setdefault(group, []).append(record)
    out = []
    for group, members in sorted(by_group.items()):
        pids = health.live_pids(members, states)
        pinning = pin_findings(group, members, pids)
        out += pinning
        out += [
            _damage(MISSING, group, missing.report(group, gone), "ctrexec group up FILE")
            for gone in missing.missing(members)
        ]
        if not pinning:
            out += wiring_findings(group, members, pids)
    return out


def _rightful(scope: Scope, address: str, groups: Sequence[str]) -> list[str]:
    """The groups whose cached attachment gave them ``address`` (the rightful holder)."""
    out = []
    for group in groups:
        try:
            cached = scope.networks.record(group, "bridge")
        except CtrexecError:
            continue
        ips = [] if cached is None else nethealth.addresses(cached)
        if any(str(ipaddress.ip_interface(ip).ip) == address for ip in ips):
            out.append(group)
    return out


def twice(scope: Scope, address: str, groups: Sequence[str]) -> Finding:
    """One address on two groups' eth0: the ones not given it by CNI must move."""
    rightful = _rightful(scope, address, groups)
    movers = [g for g in groups if g not in rightful] if len(rightful) == 1 else list(groups[1:])
    downs = ", ".join(f"ctrexec group down {g}" for g in movers)
    return Finding(
        kind=ADDRESS_TWICE,
        where=address,
        what=f"{address} is on eth0 of groups {', '.join(groups)}",
        fix=f"{downs}, then ctrexec group up FILE of each (it gets a free address)",
        garbage=False,
    )


def find_addresses(scope: Scope) -> list[Finding]:
    return [
        twice(scope, str(address), groups)
        for address, groups in sorted(
            holders.all_holders(IFNAME).items(), key=lambda kv: str(kv[0])
        )
        if len(groups) > 1
    ]


GROUPS = Check(kind="group", find=find_groups)
ADDRESSES = Check(kind=ADDRESS_TWICE, find=find_addresses)

__all__ = [
    "ADDRESSES",
    "ADDRESS_TWICE",
    "GROUPS",
    "MISSING",
    "NOT_ATTACHED",
    "PIN_LOST",
    "SPLIT",
    "pin_findings",
    "twice",
    "wiring_findings",
]
