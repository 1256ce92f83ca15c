"""The embedded containerd: started on demand, answers, stops with no shim or mount left."""

from __future__ import annotations

import tempfile
from pathlib import Path

from _cli import TEST_NAMESPACE

from ctrexec._linux import mounts_under
from ctrexec.containerd.client import Client
from ctrexec.containerd.daemon import DaemonPaths, EmbeddedContainerd
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.executor import Executor
from ctrexec.testing import import_image


def _shims_of(address: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and address.encode() in argv:
            found.append(int(proc.name))
    return found


#: The run's own namespace: it names the task's cgroup (``/ctrexec/<ns>/<id>``), which
#: the matrix's sessions share; a fixed one let another session's removal of its
#: ``t1`` kill this one's runc init between create and start.
NAMESPACE = f"{TEST_NAMESPACE}-emb"


def test_start_run_stop_leaves_nothing(test_image_archive: Path, tmp_path: Path) -> None:
    base = Path(tempfile.mkdtemp(prefix="cxe-", dir="/var/tmp"))
    daemon = EmbeddedContainerd(DaemonPaths.under(base))
    try:
        assert not daemon.is_running()
        daemon.start()
        assert daemon.is_running()
        daemon.start()  # a second start finds the running daemon
        import_image(daemon.address, NAMESPACE, test_image_archive)
        with Client.connect(daemon.address, namespace=NAMESPACE) as client:
            ex = Executor(client, log_dir=tmp_path / "logs", files_dir=tmp_path / "files")
            ex.start_task(
                TaskConfig(
                    name="t1",
                    image="docker.io/library/ctrexec-test:latest",
                    command=["sleep", "100"],
                )
            )
            assert len(_shims_of(daemon.address)) == 1
            assert mounts_under(base) != []
        daemon.stop()
        assert not daemon.is_running()
        assert _shims_of(daemon.address) == []
        assert mounts_under(base) == []
        # Restart on the same directories: the container record survived, the task did not.
        daemon.start()
        with Client.connect(daemon.address, namespace=NAMESPACE) as client:
            ex = Executor(client, log_dir=tmp_path / "logs", files_dir=tmp_path / "files")
            info = ex.inspect("t1")
            assert info.pid == 0
            ex.destroy("t1", force=True)
    finally:
        daemon.stop()
        assert mounts_under(base) == []
        import shutil

        shutil.rmtree(base, ignore_errors=True)
