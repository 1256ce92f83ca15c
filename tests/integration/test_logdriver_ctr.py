"""The log driver under a real containerd 1.6 shim, driven with ``ctr --log-uri``.

Proves the ``binary://`` contract end to end: the shim starts the launcher with the
URI's query as arguments, the task's stdout and stderr land in the log tagged by
stream, output keeps flowing with no client attached, rotation holds its bound, and
deleting the task ends the driver.

Self-contained on purpose (its own containerd on a unique root, state and socket,
stopped by pid); the shared session fixture can replace it later.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import TEST_NAMESPACE

from ctrexec._linux import remove_empty_cgroups
from ctrexec.logs.reader import log_uri, read_logs, rotated_paths, write_launcher

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "docker.io/library/ctrexec-test:latest"
NAMESPACE = f"{TEST_NAMESPACE}-ctr"

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root"),
    pytest.mark.skipif(
        not all(shutil.which(b) for b in ("containerd", "ctr", "runc", "containerd-shim-runc-v2")),
        reason="needs containerd, ctr, runc and the runc v2 shim",
    ),
    pytest.mark.skipif(not Path("/bin/busybox").is_file(), reason="needs /bin/busybox"),
]

CONFIG = """version = 2
root = "{base}/root"
state = "{base}/state"
disabled_plugins = [
  "io.containerd.grpc.v1.cri",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
]
[grpc]
  address = "{base}/c.sock"
[ttrpc]
  address = "{base}/c.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{base}/opt"
"""


class Ctr:
    """``ctr`` against one private containerd."""

    def __init__(self, address: str) -> None:
        self.address = address

    def __call__(self, *args: str, check: bool = True, timeout: float = 60) -> str:
        res = subprocess.run(
            ["ctr", "--address", self.address, "--namespace", NAMESPACE, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and res.returncode != 0:
            raise AssertionError(f"ctr {' '.join(args)} failed: {res.stderr.strip()}")
        return res.stdout


def _mounts_under(base: Path) -> list[str]:
    prefix = str(base).rstrip("/") + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split(" ")[4].replace("\\040", " ")
        if point.startswith(prefix):
            points.append(point)
    return points


def _pids_with_in_cmdline(needle: str) -> list[int]:
    """Processes whose command line mentions ``needle`` (our unique socket or log path)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmdline:
            pids.append(int(entry.name))
    return pids


def _cleanup_containers(ctr: Ctr) -> None:
    """Kill and delete every task and container in our private namespace."""
    for cid in ctr("containers", "list", "--quiet", check=False).split():
        ctr("tasks", "kill", "--signal", "SIGKILL", cid, check=False)
        deadline = time.monotonic() + 10
        while cid in ctr("tasks", "list", "--quiet", check=False).split():
            ctr("tasks", "delete", cid, check=False, timeout=30)
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        ctr("containers", "delete", cid, check=False)


@pytest.fixture(scope="module")
def containerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ctr]:
    """A private containerd with the test image imported; everything undone after."""
    base = tmp_path_factory.mktemp("cxl")
    address = str(base / "c.sock")
    assert len(address) + len(".ttrpc") < 100, f"socket path too long: {address}"
    config = base / "config.toml"
    config.write_text(CONFIG.format(base=base))
    archive = base / "image.tar"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build-test-image"), "--out", str(archive)],
        check=True,
        capture_output=True,
    )
    log = (base / "containerd.log").open("wb")
    proc = subprocess.Popen(
        ["containerd", "--config", str(config)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    ctr = Ctr(address)
    try:
        deadline = time.monotonic() + 30
        while subprocess.run(
            ["ctr", "--address", address, "version"], capture_output=True, check=False
        ).returncode:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"containerd did not start: {log.name}")
            time.sleep(0.1)
        ctr("images", "import", str(archive))
        yield ctr
    finally:
        _cleanup_containers(ctr)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
        log.close()
        # Shims outlive containerd; any left were started for this daemon only.
        for pid in _pids_with_in_cmdline(f"-address {address}"):
            os.kill(pid, signal.SIGKILL)
        for point in sorted(_mounts_under(base), key=len, reverse=True):
            subprocess.run(["umount", "--lazy", point], check=False, capture_output=True)
        leftover = _mounts_under(base)
        shutil.rmtree(base, ignore_errors=True)
        # ctr runs a task in /<namespace>/<id>; runc removes only the task's own level.
        cgroup_gone = remove_empty_cgroups(NAMESPACE, parents=False)
        assert not leftover, f"mounts left behind: {leftover}"
        assert cgroup_gone, f"cgroup /{NAMESPACE} left behind (a task still in it?)"


@pytest.fixture(scope="module")
def launcher(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_launcher(tmp_path_factory.mktemp("launcher"))


def test_stdout_and_stderr_land_tagged(containerd: Ctr, launcher: str, tmp_path: Path) -> None:
    path = tmp_path / "logs" / "t1.log"
    uri = log_uri(path, 1 << 20, 3, driver=launcher)
    script = "echo out-line; echo err-line >&2; printf no-newline"
    containerd("run", "--rm", "--log-uri", uri, IMAGE, "ld-t1", "sh", "-c", script)
    got = list(read_logs(path))
    assert [(e.stream, e.message) for e in got if e.stream == "stdout"] == [
        ("stdout", "out-line\n"),
        ("stdout", "no-newline"),
    ]
    assert [(e.stream, e.message) for e in got if e.stream == "stderr"] == [
        ("stderr", "err-line\n")
    ]
    assert not _pids_with_in_cmdline(str(path)), "driver outlived its task"


def task_status(ctr: Ctr, cid: str) -> str:
    for line in ctr("tasks", "list").splitlines()[1:]:
        fields = line.split()
        if fields and fields[0] == cid:
            return fields[-1]
    return ""


def test_output_flows_without_a_client_and_rotates(
    containerd: Ctr, launcher: str, tmp_path: Path
) -> None:
    """Detached: the client is gone at once, yet ~150 KB (more than a pipe holds) is
    written and the task runs to its end; rotation keeps the bound."""
    path = tmp_path / "t2.log"
    max_size, max_files = 8192, 3
    uri = log_uri(path, max_size, max_files, driver=launcher)
    # stderr is sparse (every 100th line): its reader may lag stdout's by all of its
    # backlog, and that backlog (30 entries) is far smaller than what rotation keeps,
    # so stdout's tail, "done" included, always survives.
    script = (
        "i=0; while [ $i -lt 3000 ]; do i=$((i+1)); "
        'echo "out $i xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"; '
        '[ $((i % 100)) -eq 0 ] && echo "err $i" >&2; done; echo done'
    )
    containerd("run", "--detach", "--log-uri", uri, IMAGE, "ld-t2", "sh", "-c", script)
    try:
        # ctr has exited: the task can only finish if the shim's driver drains it.
        deadline = time.monotonic() + 30
        while task_status(containerd, "ld-t2") != "STOPPED":
            assert time.monotonic() < deadline, "task blocked: its output was not drained"
            time.sleep(0.1)
        drivers = _pids_with_in_cmdline(str(path))
        assert len(drivers) == 1, "one driver per task"
        shim = int(Path(f"/proc/{drivers[0]}/stat").read_text().rsplit(")", 1)[1].split()[1])
        assert b"containerd-shim-runc-v2" in Path(f"/proc/{shim}/cmdline").read_bytes()
        # Delete closes the pipes, signals the driver and waits for it: the log is final.
        containerd("tasks", "delete", "ld-t2")
        assert not _pids_with_in_cmdline(str(path)), "driver outlived its task"
    finally:
        _cleanup_containers(containerd)
    got = list(read_logs(path))
    files = [Path(p) for p in rotated_paths(path)] + [path]
    assert len(files) == max_files
    assert sum(f.stat().st_size for f in files) <= max_size * max_files
    # Two pipes, two reader threads: order is defined within a stream only, and
    # what is left after rotation is a contiguous tail of each stream.
    outs = [e.message for e in got if e.stream == "stdout"]
    assert outs[-1] == "done\n"
    nums = [int(m.split()[1]) for m in outs[:-1]]
    assert nums == list(range(nums[0], 3001))
    errs = [int(e.message.split()[1]) for e in got if e.stream == "stderr"]
    if errs:  # stderr may have been rotated away entirely
        assert errs == list(range(errs[0], 3001, 100))
