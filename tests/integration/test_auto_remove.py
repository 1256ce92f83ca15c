"""``--rm``: the container goes when its task exits, with and without a supervisor.

ctrexec has no daemon: ``ctrexec supervise`` removes exited ``--rm`` containers (at
once, or by its reconcile when it starts). Without one, ``run -d --rm`` warns, and
``ctrexec stop`` removes the container as docker's would.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from _cli import Cli
from _support import gone, scratch_executor, stopped, supervising, until

from ctrexec import CtrexecError, NotFound, TaskConfig
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import Status
from ctrexec.groups.presence import is_supervised
from ctrexec.groups.supervisor import Supervisor
from ctrexec.tasks.executor import Executor

WARNING = "ctrexec: warning: --rm: no `ctrexec supervise` runs for namespace ctrexec-test"


@pytest.fixture
def ex(client: Client, tmp_path: Path, test_image: str) -> Iterator[Executor]:
    with scratch_executor(client, tmp_path, "rm-") as executor:
        yield executor


@pytest.fixture
def supervised(ex: Executor) -> Iterator[Supervisor]:
    with supervising(ex) as sup:
        until(lambda: is_supervised(ex.client), "the supervisor's presence lock")
        yield sup


def test_run_d_rm_without_supervisor_warns_and_stop_removes(
    ex: Executor, cli: Cli, test_image: str
) -> None:
    assert not is_supervised(ex.client)
    out = cli("run", "-d", "--rm", "--name", "rm-nosup", test_image, "sleep", "1000")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "rm-nosup"
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(WARNING), out.stderr
    assert ex.inspect("rm-nosup").status is Status.RUNNING
    out = cli("stop", "-t", "1", "rm-nosup")
    assert out.returncode == 0, out.stderr
    assert gone(ex.client, "rm-nosup")


def test_restart_of_an_rm_container_restarts_it(ex: Executor, cli: Cli, test_image: str) -> None:
    """docker's restart of an --rm container restarts it: only stop removes."""
    out = cli("run", "-d", "--rm", "--name", "rm-restart", test_image, "sleep", "1000")
    assert out.returncode == 0, out.stderr
    out = cli("restart", "-t", "1", "rm-restart")
    assert out.returncode == 0, out.stderr
    assert ex.inspect("rm-restart").status is Status.RUNNING


def test_exit_without_supervisor_is_removed_when_one_starts(
    ex: Executor, cli: Cli, test_image: str
) -> None:
    out = cli("run", "-d", "--rm", "--name", "rm-late", test_image, "true")
    assert out.returncode == 0, out.stderr
    until(lambda: stopped(ex.client, "rm-late"), "the exit")
    assert not gone(ex.client, "rm-late")  # nobody watches: it stays, as warned
    log_dir = Path(ex.inspect("rm-late").log_path).parent
    with supervising(ex):
        until(lambda: gone(ex.client, "rm-late"), "removal by the supervisor's reconcile")
    assert not log_dir.exists()


def test_run_d_rm_with_supervisor_is_removed_on_exit(
    ex: Executor, supervised: Supervisor, cli: Cli, test_image: str
) -> None:
    out = cli("run", "-d", "--rm", "--name", "rm-sup", test_image, "sh", "-c", "sleep 0.5")
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    until(lambda: gone(ex.client, "rm-sup"), "removal on exit")


def test_foreground_rm_with_supervisor_keeps_output_and_exit_code(
    ex: Executor, supervised: Supervisor, cli: Cli, test_image: str
) -> None:
    # Both the CLI and the supervisor remove it; whoever comes second must not fail.
    out = cli("run", "--rm", "--name", "rm-fg", test_image, "sh", "-c", "echo hello; exit 3")
    assert out.returncode == 3, out.stderr
    assert out.stdout == "hello\n"
    assert out.stderr == ""
    until(lambda: gone(ex.client, "rm-fg"), "removal")


def test_an_exit_removed_before_anyone_waited_is_seen_by_start_watched(
    ex: Executor, test_image: str
) -> None:
    """What the supervisor does to a quick ``--rm`` task, done here by hand and without a
    race: the task exits and is removed before the caller waits. A wait begun after the
    start finds nothing; the future armed before the start has the exit."""
    config = TaskConfig(name="rm-watched", image=test_image, command=["sh", "-c", "exit 3"])
    handle, exit_future = ex.start_watched(config)
    until(lambda: stopped(ex.client, handle.id), "the exit")
    ex.destroy(handle.id)
    with pytest.raises(NotFound):
        ex.wait(handle.id, timeout=30)
    assert exit_future.result(timeout=30).exit_code == 3

    ex.create(attrs.evolve(config, name="rm-watched-2"))
    handle, exit_future = ex.start_watched("rm-watched-2")  # a created one: start's path
    until(lambda: stopped(ex.client, handle.id), "the exit")
    ex.destroy(handle.id)
    assert exit_future.result(timeout=30).exit_code == 3


def test_start_watched_of_a_failing_start_leaves_no_wait_behind(
    ex: Executor, test_image: str
) -> None:
    config = TaskConfig(name="rm-watched-bad", image=test_image, command=["/no/such/file"])
    with pytest.raises(CtrexecError):
        ex.start_watched(config)
    assert gone(ex.client, "rm-watched-bad")
