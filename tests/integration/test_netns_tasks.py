"""Tasks joining one namespace: many threads at once, and namespaces made by ``ip netns add``.

Real containerd, runc and the busybox test image. Namespaces are named
``cxt-nt<hex>...`` and removed in the fixtures' finalizers; containers are destroyed
there too, and each test ends with an audit that nothing of it is left.
"""

from __future__ import annotations

import contextlib
import secrets
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ctrexec import errors
from ctrexec import labels as lbl
from ctrexec._linux import mounts_under
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import Status
from ctrexec.net import nsinfo
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.executor import Executor
from ctrexec.testing import host_audit, wait_for

TAG = f"cxt-nt{secrets.token_hex(3)}"


@pytest.fixture
def ex(client: Client, tmp_path: Path, containerd_address: str) -> Iterator[Executor]:
    executor = Executor(client, log_dir=tmp_path / "logs", files_dir=tmp_path / "files")
    yield executor
    for info in executor.list(all_tasks=True):
        if info.id.startswith(TAG):
            with contextlib.suppress(errors.NotFound):
                executor.destroy(info.id, force=True)
    assert mounts_under(Path(containerd_address).parent.parent) == []
    files = tmp_path / "files"
    assert not files.exists() or list(files.iterdir()) == [], "netns files left"


@pytest.fixture
def ip_netns() -> Iterator[Callable[[], str]]:
    """Namespaces made by ``ip netns add`` (loopback down), deleted the same way."""
    made: list[str] = []

    def make() -> str:
        name = f"{TAG}-{len(made)}"
        subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
        made.append(name)
        return name

    yield make
    for name in made:
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)
    assert host_audit(TAG) == []


def _lo_up(name: str) -> bool:
    out = subprocess.run(
        ["ip", "-n", name, "-o", "link", "show", "lo"], check=True, capture_output=True, text=True
    ).stdout
    return "<" in out and "UP" in out.split("<", 1)[1].split(">", 1)[0].split(",")


def test_sixteen_threads_start_tasks_into_one_namespace(
    ex: Executor, test_image: str, ip_netns: Callable[[], str]
) -> None:
    """The Executor is thread-safe: 16 threads creating tasks in one namespace at once
    all run, each with its own host files."""
    ns = ip_netns()
    count = 16
    barrier = threading.Barrier(count)
    failures: list[BaseException] = []

    def start(n: int) -> None:
        config = TaskConfig(
            name=f"{TAG}-t{n}", image=test_image, command=("sleep", "1000"), netns=ns
        )
        barrier.wait()
        try:
            ex.start_task(config)
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=start, args=(n,)) for n in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    infos = [ex.inspect(f"{TAG}-t{n}") for n in range(count)]
    assert {i.status for i in infos} == {Status.RUNNING}
    assert {i.netns_path for i in infos} == {f"/run/netns/{ns}"}
    assert len(list(ex.files_dir.iterdir())) == count
    for n in (0, count - 1):  # every task sees its own files
        directory = Path(infos[n].labels[lbl.HOSTFILES_DIR])
        assert sorted(p.name for p in directory.iterdir()) == ["hostname", "hosts", "resolv.conf"]
        assert ex.exec(f"{TAG}-t{n}", ["cat", "/etc/hostname"]).stdout == f"{TAG}-t{n}\n".encode()
    for n in range(count):
        ex.destroy(f"{TAG}-t{n}", force=True)


def test_loopback_of_an_ip_netns_add_namespace_is_brought_up(
    ex: Executor, test_image: str, ip_netns: Callable[[], str]
) -> None:
    """``ip netns add`` leaves ``lo`` down; a task joining must still reach its
    group's other tasks on 127.0.0.1, as in docker's shared namespaces."""
    ns = ip_netns()
    assert not _lo_up(ns)
    server = TaskConfig(
        name=f"{TAG}-srv",
        image=test_image,
        command=("httpd", "-f", "-p", "127.0.0.1:8080", "-h", "/var/www"),
        netns=ns,
    )
    ex.start_task(server)
    assert _lo_up(ns)
    ex.start_task(
        TaskConfig(name=f"{TAG}-cli", image=test_image, command=("sleep", "1000"), netns=ns)
    )
    fetched: list[bytes] = []

    def served() -> bool:
        # No -T: Debian's busybox-static 1.35 wget segfaults with a timeout option.
        r = ex.exec(f"{TAG}-cli", ["wget", "-q", "-O", "-", "http://127.0.0.1:8080/"])
        fetched.append(r.stdout + r.stderr)
        return r.exit_code == 0

    try:
        wait_for(served, timeout=20, what="wget over the namespace's loopback")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; wget said {fetched[-1:]!r}") from exc
    assert b"hello from ctrexec" in fetched[-1]
    info = nsinfo.inspect(f"/run/netns/{ns}")
    assert [i.name for i in info.interfaces] == ["lo"]  # lo up is all that was touched
    for task in ("srv", "cli"):
        ex.destroy(f"{TAG}-{task}", force=True)
