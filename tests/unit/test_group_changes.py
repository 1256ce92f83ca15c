"""What ``group up`` of an edited file changes (ctrexec.groups.changes), decided from
the records' labels alone: no daemon."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from ctrexec import labels as lbl
from ctrexec.containerd.containers import Container, Runtime
from ctrexec.errors import FailedPrecondition
from ctrexec.groups import changes
from ctrexec.groups.spec import GroupSpec, parse_group

pytestmark = pytest.mark.unit


def _spec(**edits: Any) -> GroupSpec:
    data: dict[str, Any] = {
        "name": "web",
        "network": "bridge",
        "ports": ["8080:80/tcp"],
        "task": [
            {"name": "app", "image": "busybox", "command": ["sleep", "1"]},
            {"name": "db", "image": "busybox", "command": ["sleep", "2"]},
        ],
    }
    data.update(edits)
    return parse_group(data)


def _records(spec: GroupSpec, *, member_hash: bool = True) -> list[Container]:
    """The records ``up`` of ``spec`` makes, by their labels."""
    out = []
    for cfg in spec.task_configs():
        labels = {
            lbl.GROUP_SPEC: spec.digest(),
            lbl.NETWORK_MODE: spec.network,
            lbl.GROUP_PORTS: ",".join(spec.ports),
        }
        if member_hash:
            labels[lbl.MEMBER_SPEC] = changes.member_digest(cfg)
        out.append(
            Container(
                id=cfg.name, image=cfg.image, labels=labels, spec={}, snapshotter="overlayfs",
                snapshot_key=cfg.name, runtime=Runtime(name="io.containerd.runc.v2"),
                extensions={}, created_at=None,
            )
        )  # fmt: skip
    return out


def test_nothing_changes_for_the_same_file() -> None:
    spec = _spec()
    assert changes.plan(spec, spec.task_configs(), _records(spec)) == changes.Changes()


def test_force_recreates_every_member() -> None:
    spec = _spec()
    plan = changes.plan(spec, spec.task_configs(), _records(spec), force=True)
    assert plan == changes.Changes(recreate=("web-app", "web-db"))


def test_only_the_edited_member_is_recreated_and_the_other_relabelled() -> None:
    old, new = _spec(), _spec()
    edited = attrs.evolve(new.tasks[1], command=("sleep", "3"))
    new = GroupSpec.of("web", [new.tasks[0], edited], ports=new.ports)
    plan = changes.plan(new, new.task_configs(), _records(old))
    assert plan == changes.Changes(recreate=("web-db",), relabel=("web-app",))


def test_a_member_left_out_of_the_file_is_removed() -> None:
    old = _spec()
    new = GroupSpec.of("web", old.tasks[:1], ports=old.ports)
    plan = changes.plan(new, new.task_configs(), _records(old))
    assert plan == changes.Changes(removed=("web-db",), relabel=("web-app",))


def test_members_of_an_older_ctrexec_are_recreated_only_when_the_group_changed() -> None:
    old = _spec()
    unchanged = changes.plan(old, old.task_configs(), _records(old, member_hash=False))
    assert unchanged == changes.Changes()
    new = _spec(hostname="other")
    edited = changes.plan(new, new.task_configs(), _records(old, member_hash=False))
    assert edited == changes.Changes(recreate=("web-app", "web-db"))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"ports": ["9090:80/tcp"]}, "its ports 8080:80/tcp changed to 9090:80/tcp"),
        ({"ports": []}, "its ports 8080:80/tcp changed to none"),
        ({"network": "none", "ports": []}, "its network bridge changed to network none"),
    ],
)
def test_an_edit_of_the_network_or_ports_is_refused(edit: dict[str, Any], message: str) -> None:
    new = _spec(**edit)
    with pytest.raises(FailedPrecondition, match=message):
        changes.plan(new, new.task_configs(), _records(_spec()))
