"""A group member's namespace, made whole before the member is started or created.

A group has one network namespace for its whole life. Its pin (``/run/netns/cx-NAME``)
can be lost while the members run on (a tmpfiles rule, another tool), and a reboot
empties /run with everything in it. Before a member starts (by hand, by ``group up``,
by the supervisor), or a new member is created into the group:

- while any member runs, its namespace *is* the group's: it is pinned again
  (:mod:`ctrexec.net.grouppin`) and keeps its address, nothing is released;
- members in two namespaces are a split: refused, naming which are where;
- with no member running and the pin gone, the old attachment is released first
  (CNI DEL with what is known), then a new namespace is made and wired with the same
  ports, asking for the same address, from the settings in the record's labels
  (:data:`~ctrexec.labels.NETWORK_SETTINGS`, or a ``run -p`` record's
  :data:`~ctrexec.labels.IMPLICIT_GROUP`). Every member's address label and hosts
  file follow the address if it changed.

The group's running members are found by :func:`ctrexec.tasks.health.members`.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from ctrexec import labels as lbl
from ctrexec import owners
from ctrexec.containerd import containers
from ctrexec.containerd.client import Client
from ctrexec.net import groupns, grouppin
from ctrexec.tasks import config as taskconfig
from ctrexec.tasks import files as taskfiles
from ctrexec.tasks import grouplock, health, implicitnet
from ctrexec.tasks import info as taskinfo

log = logging.getLogger("ctrexec.tasks.groupnet")

#: One repair per group at a time in this process (the supervisor starts a group's
#: members on timer threads of their own, at once after a reboot).
_guard = threading.Lock()
_locks: dict[str, threading.Lock] = {}


def _lock(group: str) -> threading.Lock:
    with _guard:
        return _locks.setdefault(group, threading.Lock())


def repair(client: Client, group: str, pin: str) -> grouppin.PinCheck:
    """Pin the group's namespace again from a running member if the pin was lost;
    FailedPrecondition for a split. The check as it was before the repair."""
    _, pids = health.members(client, group)
    found = grouppin.check(pin, pids)
    taken = grouppin.repin(Path(pin).name, found, pids)
    if taken is not None:
        log.info(
            "group %s: namespace pin %s was lost; pinned again from %s (pid %d), address kept",
            group, pin, taken, pids[taken],
        )  # fmt: skip
    return found


def before_create(client: Client, group: str, path: str) -> None:
    """A new member joins the group's namespace: its pin is repaired first when it is
    the group's own (``cx-GROUP``; ``--group`` with a path of the user's shares the
    shim only)."""
    if path == groupns.netns_path(group):
        with grouplock.hold(client, group), _lock(group):
            repair(client, group, path)


def ensure(client: Client, record: containers.Container, files_dir: Path) -> containers.Container:
    """The record, its group's namespace made whole first (see the module's text)."""
    pin = health.pin_of(record.labels)
    group = record.labels.get(lbl.GROUP)
    if pin is None or group is None:
        return record
    with _lock(group):
        found = repair(client, group, pin)
        text = health.settings_text(record.labels)
        if text is None:
            return record  # a record too old to say how it was wired
        if not found.lost or found.members:  # sound, or pinned again
            return _reattach(client, record, group, text, pin)
        return _remake(client, record, group, text, files_dir)


def _reattach(
    client: Client, record: containers.Container, group: str, text: str, pin: str
) -> containers.Container:
    """The namespace attached as its labels say: no plugin runs while the attachment is
    sound; a broken one (eth0, its veth or the bridge deleted) is attached again asking
    for its address back. The members' labels and hosts files follow a new address."""
    mode = health.wired_mode(record.labels)
    if mode is None:
        return record
    # Here, not at the top, for start-up cost: only a wired member's start loads CNI.
    from ctrexec.net import settings

    labels = record.labels
    old = [a for a in labels.get(lbl.ADDRESSES, "").split(",") if a]
    networks = settings.from_label(text)
    ports = taskinfo.group_ports(labels)
    addresses = ",".join(groupns.attach(networks, group, pin, mode, ports, prefer=old).addresses())
    if addresses == labels.get(lbl.ADDRESSES, ""):
        return record
    mine = record
    records, _ = health.members(client, group)
    for other in records:  # in place: the other members' tasks may run
        updated = implicitnet.readdress(client, other, addresses)
        mine = updated if other.id == record.id else mine
    return mine


def _remake(
    client: Client, record: containers.Container, group: str, text: str, files_dir: Path
) -> containers.Container:
    """Release what is known of the old attachment, then a new namespace, wired as the
    old one was; the members' address labels and hosts files follow."""
    # Here, not at the top, for start-up cost: only a re-make loads the CNI side.
    from ctrexec.net import settings

    labels = record.labels
    networks = settings.from_label(text)
    mode = labels.get(lbl.NETWORK_MODE, "bridge")
    old = [a for a in labels.get(lbl.ADDRESSES, "").split(",") if a]
    ports = taskinfo.group_ports(labels)
    groupns.release(networks, files_dir, group, mode, ports=ports, addresses=old)
    owner = owners.Owner(client.address, client.namespace, group)
    _, attachment = groupns.wire(networks, group, mode, ports, prefer=old, owner=owner)
    addresses = attachment.addresses()
    kept = "the same address" if set(addresses) == set(old) else "a new address"
    log.info(
        "group %s: namespace re-made and wired again (%s: %s)",
        group, kept, ", ".join(addresses) or "no address",
    )  # fmt: skip
    if ",".join(addresses) == labels.get(lbl.ADDRESSES, ""):
        return record
    return _readdress(client, record, group, ",".join(addresses))


def _readdress(
    client: Client, record: containers.Container, group: str, addresses: str
) -> containers.Container:
    """Every member's address label and hosts file, for the group's new address."""
    mine = record
    records, _ = health.members(client, group)
    for other in records:
        if other.labels.get(lbl.ADDRESSES, "") == addresses:
            continue
        updated = containers.update_labels(client, other.id, {lbl.ADDRESSES: addresses})
        taskfiles.write(updated.id, updated.labels, taskconfig.config_of(updated), replace=True)
        if other.id == record.id:
            mine = updated
    return mine
