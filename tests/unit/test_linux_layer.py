"""The Linux layer: importing ctrexec forks nothing and loads libc only when used."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ctrexec import _linux
from ctrexec.testing import wait_for

# Run in a fresh interpreter: every ctrexec module (the CLI's too) is imported, the CLI
# parses, and pyroute2 is loaded, with fork, exec and ctypes.CDLL watched; then libc is
# used once.
_PROBE = textwrap.dedent(
    """
    import ctypes, importlib, json, os, pkgutil, subprocess, sys
    forks, libcs = [], []

    def no_fork(*args, **kwargs):
        forks.append(repr(args[:1]))
        raise OSError("fork refused by the test")

    class Popen:
        def __init__(self, *args, **kwargs):
            no_fork(*args)

    subprocess.Popen = Popen
    os.fork = no_fork
    os.posix_spawn = os.posix_spawnp = no_fork
    real_cdll = ctypes.CDLL

    class CDLL(real_cdll):
        def __init__(self, name, *args, **kwargs):
            libcs.append(name)
            super().__init__(name, *args, **kwargs)

    ctypes.CDLL = CDLL
    import contextlib, io
    import ctrexec
    for info in pkgutil.walk_packages(ctrexec.__path__, "ctrexec."):
        if "._api" not in info.name:
            importlib.import_module(info.name)
    from ctrexec.cli.main import main
    from ctrexec.net import _pyroute2
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        main(["run", "--help"])
    _pyroute2.load()  # netlink's first use loads pyroute2's IPRoute
    imported = list(libcs)
    from ctrexec import _linux
    used = _linux.fstatfs_type(os.open("/proc/self/ns/net", os.O_RDONLY))
    print(json.dumps({"forks": forks, "at_import": imported, "after_use": len(libcs),
                      "nsfs": used == _linux.NSFS_MAGIC}))
    """
)


def test_importing_ctrexec_forks_nothing_and_binds_libc_lazily() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, timeout=120
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["forks"] == []  # ctypes.util.find_library would have run ldconfig
    assert got["at_import"] == []
    assert got["after_use"] == 1  # bound once, on first use
    assert got["nsfs"] is True


@pytest.mark.parametrize(
    ("mountinfo", "under", "expected"),
    [
        (
            "36 35 0:1 / /run/a rw - tmpfs t rw\n37 36 0:2 / /run/a/b\\040c rw - tmpfs t rw\n"
            "38 35 0:3 / /run/ab rw - tmpfs t rw\n",
            "/run/a",
            ["/run/a", "/run/a/b c"],
        ),
        ("36 35 0:1 / /x rw - tmpfs t rw\n", "/run", []),
    ],
)
def test_mounts_under(mountinfo: str, under: str, expected: list[str]) -> None:
    assert _linux.mounts_under(under, mountinfo) == expected


def test_unmount_of_a_plain_directory_is_fine(tmp_path: Path) -> None:
    # EINVAL (not a mount point) and ENOENT (gone) are what "already unmounted" means;
    # as non-root the kernel answers EPERM, which must surface.
    try:
        _linux.unmount(str(tmp_path))
        _linux.unmount(str(tmp_path / "gone"))
    except PermissionError:
        pytest.skip("needs root: umount2 answers EPERM first")
    assert str(tmp_path) not in _linux.mount_points()


def test_remove_empty_cgroups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_linux, "CGROUP_ROOT", tmp_path)
    (tmp_path / "memory" / "ctrexec" / "ns" / "t1").mkdir(parents=True)
    (tmp_path / "ctrexec" / "ns" / "busy" / "child").mkdir(parents=True)
    assert _linux.remove_empty_cgroups("ctrexec/ns/t1") is True
    assert not (tmp_path / "memory" / "ctrexec" / "ns").exists()  # its empty parent went too
    assert (tmp_path / "memory" / "ctrexec").is_dir()  # the top, every namespace's, stays
    assert _linux.remove_empty_cgroups("ctrexec/ns/busy", parents=False) is False
    assert (tmp_path / "ctrexec" / "ns" / "busy" / "child").is_dir()


_FORKS_A_WORKER = """
import os, signal, time
from ctrexec import die_with_parent
ready_r, ready_w = os.pipe()
pid = os.fork()
if pid == 0:
    die_with_parent(signal.SIGKILL)
    os.write(ready_w, b"x")
    time.sleep(60)
    os._exit(0)
os.read(ready_r, 1)
print(pid, flush=True)
"""


def _gone(pid: int) -> bool:
    """Exited: no process, or a zombie its new parent has not reaped yet. A process
    that is reaped between the open of its stat file and the read makes the read fail
    with ESRCH (seen in the Debian 13 guest), which says it is gone as well."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def test_a_worker_dies_with_the_process_that_forked_it() -> None:
    """``die_with_parent``: the worker, set before its parent's exit, goes with it."""
    out = subprocess.run(
        [sys.executable, "-c", _FORKS_A_WORKER], capture_output=True, text=True,
        timeout=30, check=True,
    )  # fmt: skip
    pid = int(out.stdout)
    try:
        wait_for(lambda: _gone(pid), timeout=10, what=f"worker {pid} to die with its parent")
    finally:
        if not _gone(pid):
            os.kill(pid, signal.SIGKILL)
