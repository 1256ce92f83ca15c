"""Restart policies applied by the supervisor, against real containerd events."""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from _limits import HOG, OOM_LIMIT
from _support import supervising, until

from ctrexec import labels as lbl
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import Status
from ctrexec.groups.presence import is_supervised
from ctrexec.groups.supervisor import Supervisor
from ctrexec.net import netns
from ctrexec.tasks.config import RestartPolicy, TaskConfig
from ctrexec.tasks.executor import Executor
from ctrexec.tasks.restarts import should_restart
from ctrexec.testing import wait_for


@pytest.fixture
def ex(client: Client, tmp_path: Path, test_image: str) -> Iterator[Executor]:
    executor = Executor(client, log_dir=tmp_path / "logs", files_dir=tmp_path / "files")
    yield executor
    for info in executor.list(all_tasks=True):
        executor.destroy(info.id, force=True)


@pytest.fixture
def supervisor(ex: Executor) -> Iterator[Supervisor]:
    with supervising(ex) as sup:
        # Subscribed soon after; an exit before that is found by its first reconcile.
        until(lambda: is_supervised(ex.client), "the supervisor's presence lock")
        yield sup


def _said(caplog: pytest.LogCaptureFixture, line: str) -> bool:
    """Whether the supervisor logged ``line``: each is written once what it says was
    decided or done, so a test may wait for one (never for an announcement)."""
    return any(r.getMessage() == line for r in caplog.records)


def test_sigkilled_task_restarts_in_same_netns(
    ex: Executor, supervisor: Supervisor, test_image: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ctrexec.groups.supervisor")
    name = f"cxt-{secrets.token_hex(3)}"
    ns = netns.create(name)
    try:
        cfg = TaskConfig(
            name="always1",
            image=test_image,
            command=("sleep", "1000"),
            netns=name,
            restart=RestartPolicy(policy="always", delay=0.1),
        )
        first = ex.start_task(cfg)
        ex.signal("always1", "SIGKILL")
        until(
            lambda: (
                ex.inspect("always1").status is Status.RUNNING
                and ex.inspect("always1").pid != first.pid
            ),
            "restart",
        )
        until(lambda: ex.inspect("always1").restart_count == 1, "the restart counted")
        info = ex.inspect("always1")
        assert info.netns_path == ns.path
        ns_inode = Path(ns.path).stat().st_ino
        assert Path(f"/proc/{info.pid}/ns/net").stat().st_ino == ns_inode
        # A stop by hand is respected: the supervisor sees the exit and lets it be.
        ex.stop("always1", timeout=5)
        until(lambda: _said(caplog, "always1 exited with code 137"), "the exit, left alone")
        info = ex.inspect("always1")
        assert (info.status, info.run, info.restarting) == (Status.STOPPED, 2, False)
    finally:
        ex.destroy("always1", force=True)
        netns.remove(ns.path)


def test_on_failure_with_max_attempts(
    ex: Executor, supervisor: Supervisor, test_image: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ctrexec.groups.supervisor")
    cfg = TaskConfig(
        name="fail1",
        image=test_image,
        command=("sh", "-c", "exit 3"),
        restart=RestartPolicy(policy="on-failure", max_attempts=2, delay=0.1),
    )
    ex.start_task(cfg)
    # The third run's exit, which the policy does not restart, is the last.
    until(lambda: _said(caplog, "fail1 exited with code 3"), "the policy to give up")
    info = ex.inspect("fail1")
    assert (info.status, info.run, info.restart_count) == (Status.STOPPED, 3, 2)
    assert not info.restarting
    ok = TaskConfig(
        name="ok1",
        image=test_image,
        command=("true",),
        restart=RestartPolicy(policy="on-failure", delay=0.1),
    )
    ex.start_task(ok)
    until(lambda: _said(caplog, "ok1 exited with code 0"), "the exit, left alone")
    info = ex.inspect("ok1")
    assert (info.status, info.run, info.restart_count) == (Status.STOPPED, 1, 0)
    assert "io.ctrexec.restart.count" not in info.labels


def test_exit_while_supervisor_was_down_is_reconciled(ex: Executor, test_image: str) -> None:
    cfg = TaskConfig(
        name="late1",
        image=test_image,
        command=("sh", "-c", "exit 1"),
        restart=RestartPolicy(policy="on-failure", max_attempts=1, delay=0.1),
    )
    ex.start_task(cfg)
    until(lambda: ex.inspect("late1").status is Status.STOPPED, "exit")
    with supervising(ex):
        until(lambda: ex.inspect("late1").restart_count == 1, "the restart, counted once made")
        assert ex.inspect("late1").run == 2


def test_policy_table() -> None:
    base = {"io.ctrexec.restart.policy": "on-failure"}
    assert should_restart(base, 1)
    assert not should_restart(base, 0)
    assert should_restart({"io.ctrexec.restart.policy": "always"}, 0)
    assert not should_restart({}, 1)
    assert not should_restart({**base, "io.ctrexec.restart.stopped-by-user": "true"}, 1)
    assert not should_restart(
        {**base, "io.ctrexec.restart.max-attempts": "2", "io.ctrexec.restart.count": "2"}, 1
    )


def test_crash_loop_restart_delays_grow(
    ex: Executor, supervisor: Supervisor, test_image: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ctrexec.groups.supervisor")
    name = "sup-crashloop"
    ex.start_task(
        TaskConfig(
            name=name,
            image=test_image,
            command=("sh", "-c", "exit 1"),
            restart=RestartPolicy(policy="on-failure", max_attempts=5, delay=0.1),
        )
    )
    # The count is written once a restart's task has started, so it never runs ahead
    # of the runs; the sixth run's exit, left alone, is the end: no restart can follow
    # it, so the start by hand below cannot meet one (the count alone, or a stopped
    # task, may be seen inside the last backoff).
    seen: set[tuple[int, int, Status]] = set()

    def counted(count: int) -> bool:
        info = ex.inspect(name, addresses=False)
        seen.add((info.restart_count, info.run, info.status))
        return info.restart_count == count

    wait_for(lambda: counted(5), timeout=60, what="5 restarts", interval=0.01)
    # A count of N claims run N+1's task started: never a later count, nor a task
    # still being made (no task, or one not started yet, reads as created).
    early = [(c, r, s) for c, r, s in seen if r < c + 1 or (r == c + 1 and s is Status.CREATED)]
    assert not early, sorted(seen, key=str)
    until(lambda: _said(caplog, f"{name} exited with code 1"), "the policy to give up")
    assert (ex.inspect(name).status, ex.inspect(name).run) == (Status.STOPPED, 6)
    delays = [
        float(m.group(1))
        for r in caplog.records
        if r.getMessage().startswith(name)
        and (m := re.search(r"restarting in ([0-9.]+)s", r.getMessage()))
    ]
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.6]
    assert ex.inspect(name).labels[lbl.RESTART_BACKOFF] == "1.6"
    # A start by hand forgets the backoff, as it forgets the count.
    ex.start(name)
    labels = ex.inspect(name).labels
    assert lbl.RESTART_BACKOFF not in labels and lbl.RESTART_STARTED_AT not in labels


def test_a_long_enough_run_resets_the_backoff(ex: Executor, test_image: str) -> None:
    name = "sup-reset"
    with supervising(ex, reset_after=0.5):
        ex.start_task(
            TaskConfig(
                name=name,
                image=test_image,
                command=("sh", "-c", "sleep 1; exit 1"),
                restart=RestartPolicy(policy="on-failure", max_attempts=3, delay=0.1),
            )
        )
        until(lambda: ex.inspect(name).labels.get(lbl.RESTART_COUNT) == "3", "3 restarts")
        assert ex.inspect(name).labels[lbl.RESTART_BACKOFF] == "0.1"


def test_oom_kill_is_in_the_supervisor_log(
    ex: Executor, supervisor: Supervisor, test_image: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ctrexec.groups.supervisor")
    name = "sup-oom"
    ex.start_task(
        TaskConfig(
            name=name,
            image=test_image,
            command=HOG,
            memory=OOM_LIMIT,
            restart=RestartPolicy(policy="on-failure", max_attempts=1, delay=0.1),
        )
    )
    line = f"{name} exited with code 137 (OOM killed); restarting in 0.1s"
    until(lambda: any(r.getMessage() == line for r in caplog.records), "the OOM exit logged")
    # The OOM event and the exit come from the shim by separate paths (the cgroup's
    # OOM notification, the reaper), in either order: the exit's "(OOM killed)" is read
    # from the cgroup's counter, so the event's line may come after it.
    until(
        lambda: any(
            r.getMessage().startswith(f"{name}: the OOM killer ran") for r in caplog.records
        ),
        "the OOM event logged",
    )
    until(lambda: ex.inspect(name).restart_count == 1, "the restart, counted once made")
    final = f"{name} exited with code 137 (OOM killed)"
    until(lambda: any(r.getMessage() == final for r in caplog.records), "the last exit logged")
    assert ex.inspect(name).oom_killed
