"""The default spec really runs: runc executes busybox under our seccomp profile.

This test talks to runc directly (no containerd) with a private ``--root`` for
runc's state, so it proves the spec builder alone: the default capabilities,
mounts, masked paths, device rules and seccomp profile are enough for a shell,
a web server and a client, and the profile blocks what it should.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from _cli import TEST_NAMESPACE

from ctrexec.oci import (
    build_spec,
    with_added_capabilities,
    with_args,
    with_cgroups_path,
    with_hostname,
    with_memory_limit,
    with_pids_limit,
    with_privileged,
    with_seccomp,
    with_sysctls,
)
from ctrexec.oci.caps import DEFAULT_CAPABILITIES
from ctrexec.oci.seccomp import load_default_profile
from ctrexec.tasks.spec import host_bounding_capabilities

pytestmark = pytest.mark.integration

RUNC = shutil.which("runc") or "/usr/sbin/runc"
BUSYBOX = Path("/bin/busybox")
APPLETS = (
    "sh",
    "echo",
    "wget",
    "httpd",
    "ls",
    "cat",
    "mkdir",
    "hostname",
    "unshare",
    "mount",
    "grep",
    "ping",
    "chroot",
    "true",
    "test",
    "sed",
)

requires_root_runc = pytest.mark.skipif(
    os.geteuid() != 0 or not Path(RUNC).exists() or not BUSYBOX.exists(),
    reason="needs root, runc and a static /bin/busybox",
)


def _make_bundle(tmp_path: Path, spec: dict[str, object]) -> Path:
    bundle = tmp_path / "bundle"
    rootfs = bundle / "rootfs"
    for sub in ("bin", "proc", "sys", "dev", "tmp", "www", "etc"):
        (rootfs / sub).mkdir(parents=True, exist_ok=True)
    shutil.copy2(BUSYBOX, rootfs / "bin" / "busybox")
    for applet in APPLETS:
        (rootfs / "bin" / applet).symlink_to("busybox")
    (rootfs / "www" / "index.html").write_text("hello from httpd\n")
    (bundle / "config.json").write_text(json.dumps(spec))
    return bundle


def _run(tmp_path: Path, script: str, *opts: object) -> subprocess.CompletedProcess[str]:
    container_id = f"{TEST_NAMESPACE}-{uuid.uuid4().hex[:12]}"
    spec = build_spec(
        with_args(["sh", "-c", script]),
        with_hostname("ocitest"),
        with_cgroups_path(f"/{TEST_NAMESPACE}/{container_id}"),
        *opts,  # type: ignore[arg-type]
    )
    bundle = _make_bundle(tmp_path, spec)
    state = tmp_path / "runc-state"
    state.mkdir()
    try:
        return subprocess.run(
            [RUNC, "--root", str(state), "run", "--bundle", str(bundle), container_id],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    finally:
        subprocess.run(
            [RUNC, "--root", str(state), "delete", "-f", container_id],
            capture_output=True,
            check=False,
        )
        # runc removes the leaf cgroup; the shared parent (v1: one per
        # controller, v2: one) is ours to tidy. Busy parents are left alone.
        parents = [
            *Path("/sys/fs/cgroup").glob(f"*/{TEST_NAMESPACE}"),
            Path(f"/sys/fs/cgroup/{TEST_NAMESPACE}"),
        ]
        for parent in parents:
            with contextlib.suppress(OSError):
                parent.rmdir()


@requires_root_runc
def test_default_spec_runs_shell_httpd_and_wget(tmp_path: Path) -> None:
    script = (
        "ls / >/dev/null && echo ok"
        " && hostname"
        " && mkdir -p /tmp/x && echo data >/tmp/x/f && cat /tmp/x/f"
        " && httpd -p 127.0.0.1:8080 -h /www"
        " && wget -q -O - http://127.0.0.1:8080/index.html"
        " && ping -c 1 -W 2 127.0.0.1 >/dev/null && echo pinged"
        " && chroot / true && echo chrooted"
        "; echo done"
    )
    result = _run(
        tmp_path,
        script,
        with_memory_limit("64m"),
        with_pids_limit(64),
        with_sysctls({"net.ipv4.ip_unprivileged_port_start": "0"}),
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines == [
        "ok",
        "ocitest",
        "data",
        "hello from httpd",
        "pinged",
        "chrooted",
        "done",
    ], result.stdout


@requires_root_runc
def test_default_spec_confines_the_process(tmp_path: Path) -> None:
    script = (
        "grep -E '^(Seccomp|NoNewPrivs|CapBnd|CapEff|CapInh|CapAmb):' /proc/self/status;"
        " test -s /proc/kcore && echo kcore-visible || echo kcore-masked;"
        " echo 1 >/proc/sys/kernel/panic 2>/dev/null || echo proc-sys-readonly;"
        " echo x >/sys/kernel/x 2>/dev/null || echo sys-readonly;"
        " sed 's/^/cgroup /' /proc/self/cgroup"
    )
    result = _run(tmp_path, script)
    assert result.returncode == 0, result.stderr
    status = dict(line.split(":\t") for line in result.stdout.splitlines() if ":\t" in line)
    # Docker's 14 default capabilities, bits 0-1, 3-8, 10, 13, 18, 27, 29, 31.
    assert status["CapBnd"] == status["CapEff"] == "00000000a80425fb"
    assert status["CapInh"] == status["CapAmb"] == "0000000000000000"
    assert status["Seccomp"] == "2"
    assert status["NoNewPrivs"] == "1"
    assert "kcore-masked" in result.stdout
    assert "proc-sys-readonly" in result.stdout
    assert "sys-readonly" in result.stdout
    # The cgroup namespace hides the host's cgroup paths: each one reads as "/".
    cgroups = [line for line in result.stdout.splitlines() if line.startswith("cgroup ")]
    assert cgroups, result.stdout
    assert all(line.endswith(":/") for line in cgroups), cgroups


@requires_root_runc
def test_default_profile_blocks_namespaces_and_mounts(tmp_path: Path) -> None:
    # unshare(2) and mount(2) are outside the default profile: EPERM, not success.
    script = (
        "unshare -n true && echo unshare-allowed;"
        " mount -t tmpfs none /tmp && echo mount-allowed;"
        " echo end"
    )
    result = _run(tmp_path, script)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["end"], result.stdout
    assert "Operation not permitted" in result.stderr


@requires_root_runc
def test_seccomp_blocks_mount_even_with_sys_admin(tmp_path: Path) -> None:
    # The capability alone would allow mount(2); a profile made for the default
    # capabilities must still refuse it, so the filter is really in force.
    narrow = load_default_profile(capabilities=DEFAULT_CAPABILITIES)
    result = _run(
        tmp_path,
        "mount -t tmpfs none /tmp && echo mount-allowed; echo end",
        with_added_capabilities(["SYS_ADMIN"]),
        with_seccomp(narrow),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["end"], result.stdout
    assert "mount: permission denied" in result.stderr  # busybox's words for EPERM


@requires_root_runc
def test_added_sys_admin_regenerates_profile(tmp_path: Path) -> None:
    # With CAP_SYS_ADMIN the profile follows the capability: mount works.
    result = _run(
        tmp_path,
        "mount -t tmpfs none /tmp && echo mounted",
        with_added_capabilities(["SYS_ADMIN"]),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["mounted"]


@requires_root_runc
def test_privileged_spec_runs(tmp_path: Path) -> None:
    # Every capability this process holds, no seccomp, /sys writable: mount works.
    result = _run(
        tmp_path,
        "grep -E '^(Seccomp|CapEff):' /proc/self/status;"
        " mount -t tmpfs none /tmp && echo mounted;"
        " grep -q ' /sys sysfs rw' /proc/mounts && echo sys-rw",
        with_privileged(capabilities=host_bounding_capabilities()),
    )
    assert result.returncode == 0, result.stderr
    ours = next(
        line.split()[1]
        for line in Path("/proc/self/status").read_text().splitlines()
        if line.startswith("CapBnd:")
    )
    assert result.stdout.splitlines() == [
        f"CapEff:\t{ours}",
        "Seccomp:\t0",
        "mounted",
        "sys-rw",
    ], result.stdout
