"""A ``run -p`` container's own network, as its record's labels describe it.

``ctrexec.groups.implicit`` makes the namespace when ``run`` creates the container; from
then on the record's labels (:data:`~ctrexec.labels.IMPLICIT_GROUP` with the network
settings, the group's name, mode and ports) say everything the tasks' side needs: a
start wires the namespace again when a reboot emptied /run, and a destroy or a rename
releases it. Both live here, below ``groups/``, so the executor never reaches up.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ctrexec import labels as lbl
from ctrexec.containerd import containers
from ctrexec.containerd.client import Client
from ctrexec.net import groupns
from ctrexec.tasks import files as taskfiles
from ctrexec.tasks import info as taskinfo


def rewire(client: Client, record: containers.Container) -> containers.Container:
    """The record, its namespace made and wired again if it is gone (a reboot empties
    /run): the same name and ports, from its labels, as docker's ``start`` after a
    reboot. The address may differ; its label and the task's hosts file follow it."""
    labels = record.labels
    path, name = labels.get(lbl.NETNS_PATH), labels.get(lbl.GROUP)
    if not path or not name or Path(path).exists():
        return record
    # Here, not at the top, for start-up cost: only such a record loads the CNI side.
    from ctrexec.net import settings
    from ctrexec.net.ports import parse_port

    networks = settings.from_label(labels[lbl.IMPLICIT_GROUP])
    ports = [parse_port(p) for p in labels.get(lbl.GROUP_PORTS, "").split(",") if p]
    mode = labels.get(lbl.NETWORK_MODE, "bridge")
    _, attachment = groupns.wire(networks, name, mode, ports)
    addresses = ",".join(attachment.addresses())
    if addresses == labels.get(lbl.ADDRESSES):
        return record
    record = containers.update_labels(client, record.id, {lbl.ADDRESSES: addresses})
    taskfiles.write(record.id, record.labels, taskinfo.config_of(record), replace=True)
    return record


def readdress(client: Client, record: containers.Container, addresses: str) -> containers.Container:
    """The record with ``addresses`` (comma-separated) as its label, and its hosts file
    rewritten to match, if they differed: its group was re-attached with a new address.
    In place, for a running task's bind-mounted /etc/hosts (see :func:`rewire` for the
    files of a task about to start)."""
    if addresses == record.labels.get(lbl.ADDRESSES, ""):
        return record
    record = containers.update_labels(client, record.id, {lbl.ADDRESSES: addresses})
    taskfiles.rewrite_hosts(record.id, record.labels, taskinfo.config_of(record))
    return record


def release(files_dir: Path, labels: Mapping[str, str]) -> None:
    """Release the network of a record with these labels (a no-op for any other):
    CNI DEL with the settings it was wired with, then its namespace."""
    text = labels.get(lbl.IMPLICIT_GROUP)
    name = labels.get(lbl.GROUP)
    if not text or not name:
        return
    from ctrexec.net import settings  # here, for start-up cost, as in rewire()
    from ctrexec.net.ports import parse_port  # as settings above

    mode = labels.get(lbl.NETWORK_MODE, "bridge")
    ports = [parse_port(p) for p in labels.get(lbl.GROUP_PORTS, "").split(",") if p]
    addresses = [a for a in labels.get(lbl.ADDRESSES, "").split(",") if a]
    groupns.release(
        settings.from_label(text), files_dir, name, mode, ports=ports, addresses=addresses
    )
