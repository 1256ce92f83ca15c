"""What ``group up`` of an edited group file changes, decided before anything is touched.

compose's rule, for a group: a member whose definition changed is recreated (stopped,
removed, made again from the file), the others are left running; ``--force-recreate``
recreates every member. A member no longer in the file is removed: it would run in the
group's namespace under a definition that no longer names it, and every member's
/etc/hosts lists the group's members.

The namespace, its address and its published ports are the group's, not a member's:
they are kept whatever the members do. So an edit of the group's network or ports
is refused before anything is touched: it needs a new namespace, which ``group down``
and ``up`` make.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

import attrs

from ctrexec import labels as lbl
from ctrexec.containerd import containers
from ctrexec.errors import FailedPrecondition
from ctrexec.groups.spec import GroupSpec
from ctrexec.tasks.config import TaskConfig


@attrs.frozen
class Changes:
    """``recreate``: members made again; ``removed``: members no longer in the file;
    ``relabel``: members left as they run whose labels name an older definition."""

    recreate: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    relabel: tuple[str, ...] = ()


def member_digest(config: TaskConfig) -> str:
    """A stable hash of one member's definition, as its record's label keeps it."""
    data = json.dumps(config.to_record(), sort_keys=True)
    return hashlib.sha256(data.encode()).hexdigest()[:16]


def plan(
    spec: GroupSpec,
    configs: Sequence[TaskConfig],
    existing: Sequence[containers.Container],
    *,
    force: bool = False,
) -> Changes:
    """What ``up`` of ``spec`` changes in a group whose members are ``existing``.

    A member made before members had their own hash is recreated unless the whole
    group's definition is unchanged.
    """
    digest = spec.digest()
    edited = [c for c in existing if c.labels.get(lbl.GROUP_SPEC) != digest]
    if edited:
        _same_wiring(spec, edited)
    wanted = {cfg.name: member_digest(cfg) for cfg in configs}
    recreate, relabel = [], []
    for record in existing:
        if record.id not in wanted:
            continue
        own = record.labels.get(lbl.MEMBER_SPEC)
        unchanged = own == wanted[record.id] if own else record.labels.get(lbl.GROUP_SPEC) == digest
        if force or not unchanged:
            recreate.append(record.id)
        elif record.labels.get(lbl.GROUP_SPEC) != digest:
            relabel.append(record.id)
    removed = [c.id for c in existing if c.id not in wanted]
    return Changes(tuple(recreate), tuple(removed), tuple(relabel))


def _same_wiring(spec: GroupSpec, records: Sequence[containers.Container]) -> None:
    """Refuse an edit of the group's network or ports, naming the old and the new."""
    for record in records:
        mode = record.labels.get(lbl.NETWORK_MODE, "bridge")
        ports = [p for p in record.labels.get(lbl.GROUP_PORTS, "").split(",") if p]
        if mode != spec.network:
            was, now = f"network {mode}", f"network {spec.network}"
        elif sorted(ports) != sorted(spec.ports):
            was, now = f"ports {','.join(ports) or 'none'}", f"{','.join(spec.ports) or 'none'}"
        else:
            continue
        raise FailedPrecondition(
            f"group {spec.name}: its {was} changed to {now}; the network and ports belong "
            f"to its namespace, which up keeps: run 'ctrexec group down {spec.name}' first"
        )
