"""A test session killed in the middle of a test, and the next session's sweep.

CI runs on the machine of the session that submitted, right after everything that
session left running is killed. One such kill caught a published container in flight;
its pin, host files, CNI rules and bridge failed 32 tests of the next run. The next
session now removes them first (tests/_sweep.py). Here a private containerd with one
published container is killed as that stop kills it (containerd, shim and task, all
at once, no cleanup). The sweep must then leave nothing of it on the host, also when
the CNI cache that ``rm -f`` tears down from is gone too.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from _chaoslib import cgroup_dirs, remove_cgroups, shims
from _cli import CLI_PROG, Cli
from _sweep import remove_bridges, remove_dead_dir, remove_rules

from ctrexec._linux import mounts_under, unmount_all
from ctrexec.containerd.daemon import DaemonPaths, EmbeddedContainerd
from ctrexec.net.hostfiles import DEFAULT_DIR as HOST_FILES
from ctrexec.testing import import_image, wait_for

SUBNET = "10.231.203.0/24"
SUBNET_NET = ipaddress.ip_network(SUBNET)
IMAGE = "docker.io/library/ctrexec-test:latest"


class Killed:
    """One private containerd whose session is about to be killed."""

    def __init__(self, base: Path, tmp: Path, archive: Path) -> None:
        self.base = base
        self.tag = secrets.token_hex(2)
        self.net = f"cxks{self.tag}"
        self.name = f"ks-{self.tag}"
        self.namespace = f"cxks-{self.tag}"
        self.cache = tmp / "cni-cache"
        self.daemon = EmbeddedContainerd(DaemonPaths.under(base))
        self.daemon.start()
        import_image(self.daemon.address, self.namespace, archive)
        self.cli = Cli(self.daemon.address, log_dir=tmp / "logs")
        self.pins_before = set(os.listdir("/run/netns"))

    def run(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        return self.cli(*args, namespace=self.namespace, check=check)

    def kill_everything(self) -> None:
        """What a session's stop does: every process of it SIGKILLed, nothing cleaned."""
        shown = json.loads(self.run("inspect", self.name, check=True).stdout)
        others = [shown[0]["State"]["Pid"], *shims(self.daemon.address)]
        for pid in [*others, self.daemon.pid()]:
            with contextlib.suppress(ProcessLookupError, TypeError):
                os.kill(pid, signal.SIGKILL)  # type: ignore[arg-type]
        wait_for(  # is_running() also reaps the daemon, which is this process's child
            lambda: not self.daemon.is_running()
            and not any(Path(f"/proc/{p}").exists() for p in others),
            timeout=30, what="the session's processes to die",
        )  # fmt: skip

    def leftovers(self) -> list[str]:
        rules = subprocess.run(["iptables-save"], capture_output=True, text=True, check=True)
        found = {
            "pins": sorted(set(os.listdir("/run/netns")) - self.pins_before),
            "host files": sorted(p.name for p in HOST_FILES.glob(f"{self.namespace}+*")),
            "rules": [r for r in rules.stdout.splitlines() if "10.231.203." in r],
            "bridge": [self.net] if Path(f"/sys/class/net/{self.net}").exists() else [],
            "shims": shims(self.daemon.address),
            "cgroups": [str(p) for p in cgroup_dirs(self.namespace)],
            "mounts": mounts_under(self.base),
            "directory": [str(self.base)] if self.base.exists() else [],
        }
        return [f"{what}: {left}" for what, left in found.items() if left]


@pytest.fixture
def killed(
    tmp_path: Path, test_image_archive: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Killed]:
    base = Path(tempfile.mkdtemp(prefix="cxk-", dir="/var/tmp"))
    k = None
    try:
        k = Killed(base, tmp_path, test_image_archive)
        for var in ("CTREXEC_NETWORK", "CTREXEC_BRIDGE"):
            monkeypatch.setenv(var, k.net)
        monkeypatch.setenv("CTREXEC_SUBNET", SUBNET)
        monkeypatch.setenv("CTREXEC_CNI_CACHE_DIR", str(k.cache))
        monkeypatch.setenv("CTREXEC_IPAM_DIR", str(tmp_path / "ipam"))
        yield k
    finally:  # what the sweep under test failed to remove, so the session goes on clean
        if k is not None:
            with contextlib.suppress(Exception):
                remove_dead_dir(base, CLI_PROG)
            k.daemon.is_running()  # reaps it, when the test failed before the kill
            subprocess.run(["ip", "link", "del", k.net], capture_output=True, check=False)
            remove_rules(SUBNET_NET)
            remove_cgroups(k.namespace)
        unmount_all(mounts_under(base))
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("cache", ["kept", "wiped"])
def test_the_sweep_removes_what_a_killed_session_left(killed: Killed, cache: str) -> None:
    k = killed
    ran = k.run("run", "-d", "--name", k.name, "-p", "8080", IMAGE, "sleep", "1000")
    assert ran.returncode == 0, ran.stderr
    k.kill_everything()
    assert k.leftovers() != [], "the kill left nothing: this test would prove nothing"
    if cache == "wiped":
        shutil.rmtree(k.cache)
    gone = remove_dead_dir(k.base, CLI_PROG)
    assert f"container {k.namespace}/{k.name}" in gone, gone
    remove_rules(SUBNET_NET)
    remove_bridges(SUBNET_NET)
    wait_for(lambda: not k.leftovers(), timeout=30, what="the sweep to leave nothing")
