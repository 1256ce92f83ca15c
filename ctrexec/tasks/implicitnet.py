"""A ``run -p`` container's own network, as its record's labels describe it.

``ctrexec.tasks.publishing`` makes the namespace when ``run`` creates the container; from
then on the record's labels (:data:`~ctrexec.labels.IMPLICIT_GROUP` with the network
settings, the group's name, mode and ports) say everything the tasks' side needs: a
destroy or a rename releases it, and :func:`readdress` makes a member's label and hosts
file follow a new address. A start wires it again as any group member's
(:mod:`ctrexec.tasks.groupnet`). This lives below ``groups/``, so the executor never
reaches up.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ctrexec import labels as lbl
from ctrexec.containerd import containers
from ctrexec.containerd.client import Client
from ctrexec.net import groupns
from ctrexec.tasks import config as taskconfig
from ctrexec.tasks import files as taskfiles


def readdress(client: Client, record: containers.Container, addresses: str) -> containers.Container:
    """The record with ``addresses`` (comma-separated) as its label, and its hosts file
    rewritten to match, if they differed: its group was re-attached with a new address.
    In place, for a running task's bind-mounted /etc/hosts (a task about to start gets its
    files from :mod:`ctrexec.tasks.groupnet`)."""
    if addresses == record.labels.get(lbl.ADDRESSES, ""):
        return record
    record = containers.update_labels(client, record.id, {lbl.ADDRESSES: addresses})
    taskfiles.rewrite_hosts(record.id, record.labels, taskconfig.config_of(record))
    return record


def release(files_dir: Path, labels: Mapping[str, str]) -> None:
    """Release the network of a record with these labels (a no-op for any other):
    CNI DEL with the settings it was wired with, then its namespace."""
    text = labels.get(lbl.IMPLICIT_GROUP)
    name = labels.get(lbl.GROUP)
    if not text or not name:
        return
    # Here, for start-up cost: only such a record loads the CNI side.
    from ctrexec.net import settings
    from ctrexec.net.ports import parse_port

    mode = labels.get(lbl.NETWORK_MODE, "bridge")
    ports = [parse_port(p) for p in labels.get(lbl.GROUP_PORTS, "").split(",") if p]
    addresses = [a for a in labels.get(lbl.ADDRESSES, "").split(",") if a]
    groupns.release(
        settings.from_label(text), files_dir, name, mode, ports=ports, addresses=addresses
    )
