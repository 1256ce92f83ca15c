"""``group up`` of N members lists the group once, not once per member (issue 40): each
member's create and start repaired the group's namespace pin, and each repair listed
the group's records and the namespace's tasks, so an up of N cost N listings of N.

The listings are counted, not timed: an up of 6 members makes as many as one of 2, and
every member runs after it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _support import audited_groups

from ctrexec.containerd import containers, tasks
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import Status
from ctrexec.groups.spec import parse_group
from ctrexec.groups.updown import Groups

pytestmark = pytest.mark.integration

SUBNET = "10.231.190.0/24"


@pytest.fixture
def groups(client: Client, tmp_path: Path, containerd_address: str) -> Iterator[Groups]:
    with audited_groups(client, tmp_path, containerd_address, "cxgc", SUBNET) as g:
        yield g


def _counted(counts: Counter[str], what: str, call: Callable[..., Any]) -> Callable[..., Any]:
    def counting(*args: Any, **kwargs: Any) -> Any:
        counts[what] += 1
        return call(*args, **kwargs)

    return counting


def _listings_of_up(
    groups: Groups, image: str, monkeypatch: pytest.MonkeyPatch, name: str, n: int
) -> Counter[str]:
    """Bring up a fresh group of ``n`` members; the listings of records and of tasks
    the up made. Every member runs after it."""
    spec = parse_group(
        {
            "name": name,
            "network": "bridge",
            "task": [
                {"name": f"m{i}", "image": image, "command": ["sleep", "1000"]} for i in range(n)
            ],
        }
    )
    counts: Counter[str] = Counter()
    with monkeypatch.context() as patch:
        patch.setattr(
            containers,
            "list_containers",
            _counted(counts, "records", containers.list_containers),
        )
        patch.setattr(tasks, "list_tasks", _counted(counts, "tasks", tasks.list_tasks))
        infos = groups.up(spec)
    assert sorted(i.id for i in infos) == sorted(f"{name}-m{i}" for i in range(n))  # its ids
    assert {i.status for i in infos} == {Status.RUNNING}
    return counts


def test_up_of_six_members_lists_as_often_as_up_of_two(
    groups: Groups, test_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    few = _listings_of_up(groups, test_image, monkeypatch, "guc-a", 2)
    many = _listings_of_up(groups, test_image, monkeypatch, "guc-b", 6)
    assert few["records"] > 0  # the counting saw the up's own listing
    assert many == few
