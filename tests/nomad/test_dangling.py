"""The dangling-container reconciler against a real containerd: it removes this
driver's containers that no task claims, once past the grace, and nothing else."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _harness import AllocDir, task_config
from _node import Node, agent_config

from ctrexec import labels as lbl
from ctrexec.containerd import containers
from ctrexec.nomad.taskmap import container_id
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.executor import Executor
from ctrexec.testing import wait_for

FAST = {"enabled": True, "dry_run": False, "period": "200ms", "creation_grace": "1s"}
SLEEP = ("sleep", "600")


@pytest.fixture
def made(nomad_client: Any, nomad_image: str, tmp_path: Path) -> Iterator[Executor]:
    """An orphan with the driver's labels (its allocation is gone) and a container of
    someone else's in the plugin's namespace; both removed after the test if left."""
    ex = Executor(nomad_client, log_dir=tmp_path / "logs", files_dir=tmp_path / "files")
    owner = {
        lbl.NOMAD_TASK_ID: "gone/web/1",
        lbl.NOMAD_ALLOC_ID: "gone",
        lbl.NOMAD_TASK_NAME: "web",
    }
    ex.start_task(
        TaskConfig(name="dangling-orphan", image=nomad_image, command=SLEEP), owner_labels=owner
    )
    ex.start_task(TaskConfig(name="not-nomads", image=nomad_image, command=SLEEP))
    try:
        yield ex
    finally:
        for name in ("dangling-orphan", "not-nomads"):
            if name in _ids(nomad_client):
                ex.destroy(name, force=True)


def _ids(client: Any) -> set[str]:
    return {c.id for c in containers.list_containers(client)}


def _node(containerd_address: str, **policy: Any) -> Node:
    return Node(
        containerd_address, agent_config(containerd_address, dangling_containers={**FAST, **policy})
    )


def test_only_unclaimed_containers_of_this_driver_go(
    containerd_address: str, nomad_client: Any, made: Executor, alloc: AllocDir
) -> None:
    node = _node(containerd_address)
    try:
        tc = task_config(
            alloc,
            "kept",
            node.task_spec,
            {"image": "docker.io/library/ctrexec-test:latest", "command": "sleep", "args": ["600"]},
        )
        node.start(tc)
        wait_for(
            lambda: "dangling-orphan" not in _ids(nomad_client), timeout=60, what="the orphan to go"
        )
        wait_for(
            lambda: any(e["@message"] == "removed dangling container" for e in node.plugin.logs),
            timeout=30, what="the log line",
        )  # fmt: skip
        assert {"not-nomads", container_id(tc.id)} <= _ids(nomad_client)
    finally:
        node.cleanup()


def test_a_dry_run_only_names_them(
    containerd_address: str, nomad_client: Any, made: Executor
) -> None:
    node = _node(containerd_address, dry_run=True)
    try:
        wait_for(
            lambda: any(
                e["@message"] == "dangling container kept (dry run)"
                and e.get("container_id") == "dangling-orphan"
                for e in node.plugin.logs
            ),
            timeout=60, what="the dry run's log line",
        )  # fmt: skip
        assert {"dangling-orphan", "not-nomads"} <= _ids(nomad_client)
    finally:
        node.cleanup()
