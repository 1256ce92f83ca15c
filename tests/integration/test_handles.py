"""What a scheduler gets from a handle: one run, its exit after a restart, the checks
that the handle is still the same task's, and where ctrexec keeps its files."""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from _limits import HOG, OOM_LIMIT
from _nethelpers import free_port, free_subnet, new_bridge_name
from _support import supervising, until

from ctrexec import errors
from ctrexec import labels as lbl
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import Status
from ctrexec.groups.spec import parse_group
from ctrexec.groups.updown import Groups
from ctrexec.net import netns
from ctrexec.net.networks import Networks
from ctrexec.tasks.config import RestartPolicy, TaskConfig
from ctrexec.tasks.executor import Executor
from ctrexec.tasks.reports import TaskHandle
from ctrexec.testing import stop_log_daemon

#: Doubles a shell string for ever: the busybox-only way to allocate without end.


@pytest.fixture
def ex(client: Client, tmp_path: Path, test_image: str) -> Iterator[Executor]:
    executor = Executor(client, log_dir=tmp_path / "logs", state_dir=tmp_path / "state")
    yield executor
    for info in executor.list(all_tasks=True):
        if info.id.startswith("hd-"):
            executor.destroy(info.id, force=True)
    files = tmp_path / "state" / "netns-files"
    assert not files.exists() or list(files.iterdir()) == []
    streams = tmp_path / "state" / "logd" / "streams"
    assert not streams.exists() or list(streams.iterdir()) == []  # every run ended
    stop_log_daemon(tmp_path / "state" / "logd")  # this test's daemon: its state_dir's


@pytest.fixture
def ns() -> Iterator[str]:
    name = f"cxt-hd{secrets.token_hex(3)}"
    netns.create(name)
    try:
        yield name
    finally:
        netns.remove(name)


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:  # not yet: the driver makes it when the task starts
        return b""


def _name() -> str:
    return f"hd-{secrets.token_hex(3)}"


def test_recover_after_a_restart_reports_the_old_runs_exit(ex: Executor, test_image: str) -> None:
    """The bug of issue 10: recover(old handle) used to report the new run."""
    name = _name()
    first = ex.start_task(TaskConfig(name=name, image=test_image, command=("sleep", "600")))
    assert first.run == 1
    ex.signal(name, "SIGKILL")
    died = ex.wait(name, timeout=30)
    assert died.exit_code == 137
    second = ex.start(name)
    assert second.run == 2 and second.pid != first.pid

    old = ex.recover(TaskHandle.from_json(first.to_json()))
    assert old.superseded and old.newer_run == 2
    assert old.run == 1 and old.pid == first.pid and old.status is Status.STOPPED
    assert old.exit_code == 137 and not old.oom_killed
    assert old.finished_at == died.exited_at and old.started_at == first.started_at
    assert old.addresses is None  # its own namespace went with it

    new = ex.recover(second)
    assert not new.superseded and new.newer_run is None
    assert new.run == 2 and new.status is Status.RUNNING and new.pid == second.pid
    assert new.exit is None and new.started_at == second.started_at


def test_an_oom_kill_survives_the_restart_in_the_old_handle(ex: Executor, test_image: str) -> None:
    name = _name()
    first = ex.start_task(TaskConfig(name=name, image=test_image, command=HOG, memory=OOM_LIMIT))
    assert ex.wait(name, timeout=60).oom_killed
    second = ex.start(name)  # the hog again: its own exit does not matter here
    old = ex.recover(first)
    assert old.superseded and old.newer_run == second.run
    assert old.exit_code == 137 and old.oom_killed
    assert old.to_json()["oom_killed"] is True
    ex.stop(name, timeout=1)


def test_supervisor_restarts_count_and_keep_the_old_exit(ex: Executor, test_image: str) -> None:
    name = _name()
    cfg = TaskConfig(
        name=name,
        image=test_image,
        command=("sh", "-c", "exit 3"),
        restart=RestartPolicy(policy="on-failure", max_attempts=1, delay=0),
    )
    first = ex.start_task(cfg)
    with supervising(ex):
        # The count, not the run's number (written before its task is made), says
        # the restart happened.
        until(lambda: ex.inspect(name).restart_count == 1, "the supervisor's restart")
        until(lambda: ex.inspect(name).status is Status.STOPPED, "the second run's exit")
    latest = ex.inspect(name)
    assert latest.run == 2 and latest.exit_code == 3 and not latest.superseded
    old = ex.recover(first)
    assert old.superseded and old.newer_run == 2 and old.run == 1 and old.exit_code == 3
    assert old.finished_at is not None and latest.started_at is not None
    assert old.finished_at <= latest.started_at


def test_a_start_by_hand_numbers_runs_on(ex: Executor, test_image: str) -> None:
    """Two runs later the first one's exit is no longer kept: it says so (None),
    and still that it was superseded."""
    name = _name()
    first = ex.start_task(TaskConfig(name=name, image=test_image, command=("true",)))
    ex.wait(name, timeout=30)
    ex.start(name)
    ex.wait(name, timeout=30)
    third = ex.start(name)
    ex.wait(name, timeout=30)
    assert third.run == 3
    old = ex.recover(first)
    assert old.superseded and old.newer_run == 3 and old.exit is None
    assert ex.recover(third).exit_code == 0 and not ex.recover(third).superseded


def test_recover_refuses_a_handle_that_does_not_match(
    ex: Executor, test_image: str, client: Client, containerd_address: str
) -> None:
    name = _name()
    handle = ex.start_task(TaskConfig(name=name, image=test_image, command=("sleep", "600")))
    assert ex.recover(handle).status is Status.RUNNING
    with pytest.raises(errors.HandleMismatch, match="namespace"):
        ex.recover(attrs.evolve(handle, namespace="elsewhere"))
    with pytest.raises(errors.HandleMismatch, match="containerd at"):
        ex.recover(attrs.evolve(handle, address="/run/no-such/containerd.sock"))
    # The same socket spelt another way is the same containerd.
    assert ex.recover(attrs.evolve(handle, address="unix://" + containerd_address)).run == 1
    with pytest.raises(errors.HandleMismatch, match="run 5"):
        ex.recover(attrs.evolve(handle, run=5))

    ex.destroy(name, force=True)
    with pytest.raises(errors.NotFound):
        ex.recover(handle)
    again = ex.start_task(TaskConfig(name=name, image=test_image, command=("sleep", "600")))
    assert again.container_created_at != handle.container_created_at
    with pytest.raises(errors.HandleMismatch, match="made again"):
        ex.recover(handle)
    assert ex.recover(again).status is Status.RUNNING


def test_info_times_and_addresses(ex: Executor, test_image: str, ns: str) -> None:
    name = _name()
    # An address of the test's own, on a veth pair wholly inside the test's namespace
    # (it goes with the namespace).
    for cmd in (
        ("ip", "-n", ns, "link", "add", "cxd0", "type", "veth", "peer", "name", "cxd1"),
        ("ip", "-n", ns, "addr", "add", "192.0.2.77/32", "dev", "cxd0"),
    ):
        subprocess.run(cmd, check=True)
    handle = ex.start_task(
        TaskConfig(name=name, image=test_image, command=("sleep", "600"), netns=ns)
    )
    info = ex.inspect(name)
    assert info.started_at == handle.started_at and info.finished_at is None
    assert info.addresses is not None
    assert [(a.ifname, a.cidr) for a in info.addresses] == [("cxd0", "192.0.2.77/32")]
    assert info.to_json()["addresses"] == [{"ifname": "cxd0", "address": "192.0.2.77/32"}]
    (listed,) = [i for i in ex.list() if i.id == name]
    assert listed.addresses is None  # list stays cheap unless asked
    (asked,) = [i for i in ex.list(addresses=True) if i.id == name]
    assert asked.addresses == info.addresses
    exit_status = ex.stop(name, timeout=1)
    assert exit_status is not None
    stopped = ex.inspect(name)
    assert (
        stopped.finished_at == exit_status.exited_at and stopped.exit_code == exit_status.exit_code
    )


def test_a_none_task_has_only_loopback(ex: Executor, test_image: str) -> None:
    name = _name()
    ex.start_task(TaskConfig(name=name, image=test_image, command=("sleep", "600")))
    assert ex.inspect(name).addresses == ()


def test_files_go_where_the_caller_said(
    ex: Executor, test_image: str, ns: str, tmp_path: Path
) -> None:
    """Logs in ``log_dir`` (a TaskConfig's own winning), the namespace's hosts files, the
    log daemon and the log driver's launcher in ``state_dir``: nothing of these tasks
    under /run/ctrexec."""
    name, other = _name(), _name()
    handle = ex.start_task(
        TaskConfig(
            name=name, image=test_image, command=("sh", "-c", "echo hi; sleep 600"), netns=ns
        )
    )
    own = tmp_path / "alloc-logs"
    handle2 = ex.start_task(
        TaskConfig(
            name=other, image=test_image, command=("echo", "there"), log_dir=str(own),
            log_transport="process",
        )
    )  # fmt: skip
    ns_name = ex.client.namespace
    assert handle.log_path == str(tmp_path / "logs" / ns_name / name / "task.log")
    assert handle2.log_path == str(own / ns_name / other / "task.log")
    until(lambda: b"hi" in _read(handle.log_path), "the task's log line")
    until(lambda: b"there" in _read(handle2.log_path), "the other log line")
    assert (tmp_path / "state" / "logd" / "logd.sock").is_socket()  # the first task's
    launchers = list((tmp_path / "state" / "bin").iterdir())  # the second task's
    assert len(launchers) == 1 and launchers[0].name.startswith("ctrexec-logdriver-")
    files = ex.inspect(name).labels[lbl.HOSTFILES_DIR]
    assert files.startswith(str(tmp_path / "state" / "netns-files"))
    assert sorted(p.name for p in Path(files).iterdir()) == ["hostname", "hosts", "resolv.conf"]
    ex.destroy(name, force=True)
    ex.destroy(other, force=True)
    assert not Path(handle.log_path).parent.exists() and not Path(files).exists()
    assert not (own / ns_name).exists() and own.exists()


@pytest.fixture
def groups(client: Client, tmp_path: Path, test_image: str) -> Iterator[Groups]:
    forward = Path("/proc/sys/net/ipv4/ip_forward").read_text()
    bridge = new_bridge_name()
    nets = Networks(
        network=bridge,
        bridge=bridge,
        subnet=str(free_subnet()),
        cache_dir=tmp_path / "cni-cache",
        ipam_dir=tmp_path / "ipam",
    )
    g = Groups(Executor(client, log_dir=tmp_path / "logs", state_dir=tmp_path / "state"), nets)
    try:
        yield g
    finally:
        for name in g.names():
            g.down(name, timeout=1)
        for a in nets.attachments():
            nets.teardown(a.owner, None, a.mode)
        nets.remove_bridge()
        Path("/proc/sys/net/ipv4/ip_forward").write_text(forward)
        stop_log_daemon(tmp_path / "state" / "logd")
    assert not Path(f"/sys/class/net/{bridge}").exists()


def test_group_task_info_has_its_address_and_ports(groups: Groups, test_image: str) -> None:
    port = free_port()
    name = f"cxthd{secrets.token_hex(2)}"
    spec = parse_group(
        {
            "name": name,
            "ports": [f"127.0.0.1:{port}:8080/tcp"],
            "task": [{"name": "web", "image": test_image, "command": ["sleep", "600"]}],
        }
    )
    groups.up(spec)
    info = groups.executor.inspect(f"{name}-web")
    (attachment,) = [a for a in groups.networks.attachments() if a.owner == name]
    assert info.addresses is not None
    assert [a.cidr for a in info.addresses if a.family == 4] == list(attachment.ips)
    assert [(p.host_ip, p.host_port, p.container_port) for p in info.ports] == [
        ("127.0.0.1", port, 8080)
    ]
    assert info.to_json()["ports"] == [f"127.0.0.1:{port}:8080/tcp"]
    groups.down(name, timeout=1)
