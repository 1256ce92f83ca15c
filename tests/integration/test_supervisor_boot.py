"""After a host restart, ``ctrexec supervise`` starts what dockerd would start at boot.

containerd keeps no task across a reboot, so a container whose task vanished left no
exit to react to. The supervisor tells them by their run's start time, which comes
before the host's boot. Its ``boot_time`` is moved here to just after the tasks were
taken away by hand, so the test sees a reboot without one happening.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _support import scratch_executor, supervising, until

from ctrexec.containerd import tasks
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import Status
from ctrexec.groups.supervisor import Supervisor
from ctrexec.tasks.config import RestartPolicy, TaskConfig
from ctrexec.tasks.executor import Executor

pytestmark = pytest.mark.integration

#: policy, stopped by hand before the "reboot", started again after it
CASES = {
    "sb-always": ("always", False, True),
    "sb-always-stopped": ("always", True, True),
    "sb-unless": ("unless-stopped", False, True),
    "sb-unless-stopped": ("unless-stopped", True, False),
    "sb-failure": ("on-failure", False, True),
    "sb-none": ("no", False, False),
}


@pytest.fixture
def ex(client: Client, tmp_path: Path) -> Iterator[Executor]:
    with scratch_executor(client, tmp_path, "sb-") as executor:
        yield executor


def test_tasks_the_host_restart_took_come_back_by_policy(ex: Executor, test_image: str) -> None:
    for name, (policy, stopped, _) in CASES.items():
        config = TaskConfig(
            name=name, image=test_image, command=("sleep", "600"),
            restart=RestartPolicy(policy=policy),
        )  # fmt: skip
        ex.start_task(config)
        if stopped:
            ex.stop(name, timeout=1)
    for name in CASES:  # what the reboot does: every task is gone, no exit seen
        tasks.force_delete(ex.client, name)
    time.sleep(0.01)  # the "boot" comes strictly after every run's start
    booted = time.time()
    assert all(ex.inspect(n).status is Status.CREATED for n in CASES)
    with supervising(ex, boot_time=lambda: booted) as sup:
        expected = {n for n, (_, _, back) in CASES.items() if back}
        until(
            lambda: {n for n in CASES if ex.inspect(n).status is Status.RUNNING} == expected,
            "the policy's tasks to run again",
        )
        until(lambda: sup.restarts == len(expected), "the supervisor to count them")
    for name in CASES.keys() - expected:  # reported exited, with the reason, as docker's
        until(
            lambda n=name: ex.inspect(n).exit_reason == "host restarted",
            f"{name} to be reported exited",
        )
        info = ex.inspect(name)
        assert info.status is Status.STOPPED and info.exit_code == 255
    assert ex.inspect("sb-always-stopped").labels.get("io.ctrexec.restart.stopped-by-user") is None


def test_a_run_that_began_after_the_boot_is_left_alone(ex: Executor, test_image: str) -> None:
    """A start under way (its run's labels written, its task not made yet) looks the
    same as a vanished task, but began after the boot: the supervisor keeps out."""
    config = TaskConfig(
        name="sb-later", image=test_image, command=("sleep", "600"),
        restart=RestartPolicy(policy="always"),
    )  # fmt: skip
    ex.start_task(config)
    tasks.force_delete(ex.client, "sb-later")
    sup = Supervisor(ex, boot_time=lambda: time.time() - 3600)
    sup.reconcile()  # what run() does first; it schedules synchronously
    assert sup.pending == set()
    assert ex.inspect("sb-later").status is Status.CREATED


def test_tasks_lost_while_containerd_was_down_are_not_left_created(
    ex: Executor, test_image: str
) -> None:
    """Their run began after the boot, and no task came: the policy's start again, the
    others are reported exited with the reason (not Created forever)."""
    for name, policy in (("sb-lost-always", "always"), ("sb-lost-none", "no")):
        config = TaskConfig(
            name=name, image=test_image, command=("sleep", "600"),
            restart=RestartPolicy(policy=policy),
        )  # fmt: skip
        ex.start_task(config)
        tasks.force_delete(ex.client, name)  # what a shim killed while containerd was down leaves
    booted = time.time() - 3600
    with supervising(ex, boot_time=lambda: booted, lost_after=0.0):
        until(
            lambda: ex.inspect("sb-lost-always").status is Status.RUNNING,
            "the policy's task to run again",
        )
        until(lambda: ex.inspect("sb-lost-none").exit_reason == "task lost", "the report")
    info = ex.inspect("sb-lost-none")
    assert info.status is Status.STOPPED and info.exit_code == 255
