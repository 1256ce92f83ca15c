"""A group of two drivers: a ctrexec task and a task of a driver that joins the alloc's
namespace itself (Nomad's exec driver), stood in for by a plain process that enters
/var/run/netns/<allocID> with setns (nsenter). They share localhost; the ctrexec task
is killed and started again while the other keeps running; the namespace Nomad made
is the same one (same inode) throughout and after, never removed or made again."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from _allocnet import GroupNetwork
from _harness import AllocDir, check_inspect_response, check_start_response, task_config
from _node import Node

from ctrexec._api.nomad.drivers import driver_pb2 as dpb
from ctrexec.testing import wait_for

pytestmark = [pytest.mark.usefixtures("restore_ip_forward")]
IMAGE = "docker.io/library/ctrexec-test:latest"
HTTPD = {"image": IMAGE, "command": "httpd", "args": ["-f", "-p", "8080", "-h", "/var/www"]}
EXEC_PORT = 8081
EXEC_PAGE = "hello from the exec task\n"


def _ns_id(path: str | Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _in_group(group: GroupNetwork, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["nsenter", f"--net={group.path}", *argv],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.fixture
def exec_task(alloc: AllocDir, group: GroupNetwork) -> Iterator[subprocess.Popen[bytes]]:
    """The exec driver's task: a server on the alloc's localhost, in Nomad's namespace."""
    www = alloc.path / "exec-task" / "www"
    www.mkdir(parents=True)
    (www / "index.html").write_text(EXEC_PAGE)
    proc = subprocess.Popen(
        ["nsenter", f"--net={group.path}", "busybox", "httpd", "-f",
         "-p", f"127.0.0.1:{EXEC_PORT}", "-h", str(www)],
    )  # fmt: skip
    try:
        wait_for(
            lambda: (
                _in_group(group, "busybox", "wget", "-q", "-O", "-", _url(EXEC_PORT)).stdout
                == EXEC_PAGE
            ),
            timeout=30,
            what="the exec task serving",
        )
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _url(port: int) -> str:
    return f"http://127.0.0.1:{port}/"


def _start_web(node: Node, alloc: AllocDir, group: GroupNetwork) -> dpb.TaskHandle:
    resp = node.start(task_config(alloc, "web", node.task_spec, HTTPD, netns_path=group.path))
    check_start_response(resp)
    return resp.handle


def _pid(node: Node, task_id: str) -> int | None:
    resp = node.plugin.driver.InspectTask(dpb.InspectTaskRequest(task_id=task_id), timeout=10)
    check_inspect_response(resp)
    return int(resp.driver.attributes["pid"]) if resp.task.state == dpb.RUNNING else None


def _each_reaches_the_other(node: Node, web: dpb.TaskHandle, group: GroupNetwork) -> None:
    """The exec task fetches from ctrexec's server, ctrexec's task from the exec task's."""
    wait_for(
        lambda: (
            _in_group(group, "busybox", "wget", "-q", "-O", "-", _url(8080)).stdout
            == "hello from ctrexec\n"
        ),
        timeout=30,
        what="ctrexec's server answering the exec task on localhost",
    )
    got = node.plugin.driver.ExecTask(
        dpb.ExecTaskRequest(
            task_id=web.config.id, command=["wget", "-q", "-O", "-", _url(EXEC_PORT)]
        ),
        timeout=60,
    )
    assert (got.result.exit_code, got.stdout.decode()) == (0, EXEC_PAGE), got.stderr


def test_a_ctrexec_task_and_an_exec_task_share_the_alloc_namespace(
    node: Node, alloc: AllocDir, group: GroupNetwork, exec_task: subprocess.Popen[bytes]
) -> None:
    made = _ns_id(group.path)  # the namespace Nomad made and pinned
    assert _ns_id(f"/proc/{exec_task.pid}/ns/net") == made
    web = _start_web(node, alloc, group)
    wait_for(lambda: _pid(node, web.config.id), timeout=30, what="web running")
    pid = _pid(node, web.config.id)
    assert _ns_id(f"/proc/{pid}/ns/net") == made
    _each_reaches_the_other(node, web, group)

    # Killed; Nomad's restart policy starts it again (a new id) into the same namespace.
    node.plugin.driver.SignalTask(dpb.SignalTaskRequest(task_id=web.config.id, signal="SIGKILL"))
    assert node.wait(web.config.id).signal == 9
    node.plugin.driver.DestroyTask(dpb.DestroyTaskRequest(task_id=web.config.id, force=True))
    assert exec_task.poll() is None and _ns_id(group.path) == made
    again = _start_web(node, alloc, group)
    wait_for(lambda: _pid(node, again.config.id), timeout=30, what="web running again")
    assert _ns_id(f"/proc/{_pid(node, again.config.id)}/ns/net") == made
    _each_reaches_the_other(node, again, group)

    # The ctrexec task goes for good; the exec task and Nomad's namespace stay.
    node.plugin.driver.StopTask(dpb.StopTaskRequest(task_id=again.config.id), timeout=60)
    node.wait(again.config.id)
    node.plugin.driver.DestroyTask(dpb.DestroyTaskRequest(task_id=again.config.id), timeout=60)
    assert exec_task.poll() is None
    assert _ns_id(group.path) == made == _ns_id(f"/proc/{exec_task.pid}/ns/net")
    served = _in_group(group, "busybox", "wget", "-q", "-O", "-", _url(EXEC_PORT))
    assert served.stdout == EXEC_PAGE, served.stderr
