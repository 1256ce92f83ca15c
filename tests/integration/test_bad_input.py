"""Bad input: a clear one-line error, exit 125, and nothing created."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ctrexec.client import Client
from ctrexec.mounts_table import mounts_under
from ctrexec.testing import audit


def _snapshot(client: Client, tmp_path: Path, address: str) -> tuple[object, ...]:
    netns_dir = Path("/run/netns")
    return (
        sorted(audit(client)),
        sorted(p.name for p in netns_dir.iterdir() if p.name.startswith("bad"))
        if netns_dir.exists()
        else [],
        mounts_under(Path(address).parent.parent),
        sorted(str(p) for p in tmp_path.rglob("*")),
    )


CASES = {
    "slash-id": ["--name", "a/b"],
    "dotdot-id": ["--name", ".."],
    "space-id": ["--name", "a b"],
    "empty-id": ["--name", ""],
    "long-id": ["--name", "x" * 77],
    "missing-image": ["IMAGE=docker.io/library/does-not-exist:v0"],
    "missing-netns": ["--netns", "cxt-no-such-ns"],
    "regular-file-netns": ["--netns", "/etc/hostname"],
    "host-netns-path": ["--netns", "/proc/1/ns/net"],
    "missing-mount-source": ["-v", "/no/such/dir:/data"],
    "containerd-socket-mount": ["-v", "SOCKET:/sock"],
    "netns-dir-mount": ["-v", "/run/netns:/x"],
    "unknown-runtime": ["--runtime", "nosuchrt"],
    "user-not-in-image": ["--user", "nosuchuser"],
    "tiny-memory": ["--memory", "1m"],
    "containerd-label": ["--label", "containerd.io/gc.ref=x"],
    "ctrexec-label": ["--label", "io.ctrexec.managed=false"],
    "bad-sysctl": ["--sysctl", "kernel.shm_rmid_forced=1"],
    "bad-signal": ["--stop-signal", "SIGNOPE"],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_run_input(
    case: str, client: Client, containerd_address: str, test_image: str, tmp_path: Path
) -> None:
    flags = [f.replace("SOCKET", containerd_address) for f in CASES[case]]
    image = test_image
    if flags and flags[0].startswith("IMAGE="):
        image = flags.pop(0).removeprefix("IMAGE=")
    if "--name" not in flags:
        flags += ["--name", f"bad-{case}"]
    logs = tmp_path / "logs"
    before = _snapshot(client, tmp_path, containerd_address)
    out = subprocess.run(  # noqa: PLW1510 - the exit code is the assertion
        [
            sys.executable,
            "-m",
            "ctrexec.cli.main",
            "run",
            "--address",
            containerd_address,
            "--namespace",
            "ctrexec-test",
            "--log-dir",
            str(logs),
            *flags,
            image,
            "true",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 125, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("ctrexec: ")
    assert "Traceback" not in out.stderr
    assert _snapshot(client, tmp_path, containerd_address) == before
