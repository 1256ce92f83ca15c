"""A group of TaskConfigs, brought up through the public API only, is the group its
group file makes: one network namespace for its members, and ``up`` from the file
afterwards finds nothing to change."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from _support import audited_groups

from ctrexec import Client, Groups, GroupSpec, TaskConfig, load_group_file

SUBNET = "10.231.233.0/24"


@pytest.fixture
def groups(client: Client, tmp_path: Path, containerd_address: str) -> Iterator[Groups]:
    with audited_groups(client, tmp_path, containerd_address, "cxty", SUBNET) as g:
        yield g


def _netns(pid: int) -> tuple[int, int]:
    """The kernel's word for a process's network namespace: its nsfs inode."""
    st = os.stat(f"/proc/{pid}/ns/net")
    return st.st_dev, st.st_ino


def test_a_group_of_task_configs_runs_and_its_file_changes_nothing(
    groups: Groups, test_image: str, tmp_path: Path
) -> None:
    name = f"cxy{secrets.token_hex(2)}"
    spec = GroupSpec.of(
        name,
        [
            TaskConfig(name="one", image=test_image, command=["sleep", "1000"]),
            TaskConfig(name="two", image=test_image, command=["sleep", "1001"], env={"A": "1"}),
        ],
    )
    infos = {i.id: i for i in groups.up(spec)}
    assert sorted(infos) == [f"{name}-one", f"{name}-two"]
    pids = {i.id: i.pid for i in groups.executor.list() if i.group == name}
    assert sorted(pids) == sorted(infos) and all(pids.values())
    # Both members are in one namespace, the group's pinned one, not the host's.
    spaces = {_netns(pid) for pid in pids.values()}
    pinned = os.stat(spec.netns_path)
    assert spaces == {(pinned.st_dev, pinned.st_ino)}
    assert spaces != {_netns(os.getpid())}

    file = tmp_path / "group.toml"
    file.write_text(
        f'name = "{name}"\n'
        f'[[task]]\nname = "one"\nimage = "{test_image}"\ncommand = ["sleep", "1000"]\n'
        f'[[task]]\nname = "two"\nimage = "{test_image}"\ncommand = ["sleep", "1001"]\n'
        'env = { A = "1" }\n'
    )
    changed: list[str] = []
    again = groups.up(load_group_file(file), on_change=changed.append)
    assert changed == []
    assert {i.id: i.pid for i in again} == pids  # no member was recreated
    assert {i.id: i.pid for i in groups.executor.list() if i.group == name} == pids

    groups.down(name, timeout=1)
    assert [i for i in groups.executor.list(all_tasks=True) if i.group == name] == []
    assert not Path(spec.netns_path).exists()
