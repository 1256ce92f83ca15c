"""examples/scheduler.py runs as a user runs it (a program of its own, the venv's
Python) on the session's containerd, and does what it says: its jobs end with the exit
codes their scripts give, the job that fails once is restarted by its supervisor and
succeeds, its published port answers, and when it is done nothing of it is left.

It gets a containerd namespace of its own (the test image imported there), its own
group names, and a bridge and subnet of its own (``audited_groups``, which removes the
bridge after and audits addresses, rules and links); traffic goes only to loopback.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import TEST_NAMESPACE
from _nethelpers import free_port, free_subnet
from _support import audited_groups, until

from ctrexec import Client, FailedPrecondition, NotFound, list_images, remove_image
from ctrexec.testing import audit, host_audit, import_image

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "scheduler.py"
NAMESPACE = f"{TEST_NAMESPACE}-example"
#: A generous bound for the whole program on a loaded machine (it takes seconds).
RUN_TIMEOUT = 300


@pytest.fixture
def sched(containerd_address: str, test_image_archive: Path) -> Iterator[Client]:
    """A client in the example's namespace, which holds the test image; the image and
    the namespace are removed after (the test has audited what the example left)."""
    import_image(containerd_address, NAMESPACE, test_image_archive)
    with Client.connect(containerd_address, namespace=NAMESPACE) as client:
        try:
            yield client
        finally:
            for image in list_images(client):
                remove_image(client, image.name, sync=True)
            until(lambda: _namespace_deleted(client), "its namespace to go", timeout=60)


def _namespace_deleted(client: Client) -> bool:
    """False while containerd still holds content of it (its GC frees it a moment later)."""
    try:
        client.delete_namespace()
    except NotFound:
        return True
    except FailedPrecondition:
        return False
    return True


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """The program in a session of its own, killed with everything it started if it hangs."""
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    ) as proc:
        try:
            out, err = proc.communicate(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            err += f"\n(killed: still running after {RUN_TIMEOUT} s)"
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _report(out: str) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The program's lines ``NAME: WHAT`` by name, and the log lines under each."""
    said: dict[str, str] = {}
    logs: dict[str, list[str]] = {}
    name = ""
    for line in out.splitlines():
        if line.startswith("  | "):
            logs.setdefault(name, []).append(line[4:])
        elif ": " in line:
            name, what = line.split(": ", 1)
            said[name] = what
    return said, logs


def test_the_example_scheduler_runs_its_jobs_and_leaves_nothing(
    sched: Client, containerd_address: str, test_image: str, tmp_path: Path
) -> None:
    prefix = f"xs{secrets.token_hex(2)}-"
    port = free_port()
    subnet = str(free_subnet())
    with audited_groups(sched, tmp_path, containerd_address, "cxtxs", subnet) as groups:
        argv = [
            sys.executable, str(EXAMPLE), "--address", containerd_address,
            "--namespace", NAMESPACE, "--image", test_image, "--port", str(port),
            "--prefix", prefix, "--state-dir", str(tmp_path),
            "--bridge", groups.networks.bridge, "--subnet", subnet,
        ]  # fmt: skip
        done = _run(argv)
        assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
        said, logs = _report(done.stdout)
        context = done.stdout + done.stderr
        # The page came over the published port: the server wrote it inside its task.
        assert said[f"{prefix}web"] == (
            f"http://127.0.0.1:{port}/ answered 200 hello from the web job"
        ), context
        assert said[f"{prefix}count-odd"] == "exit_code=0 restarts=0", context
        assert said[f"{prefix}count-even"] == "exit_code=0 restarts=0", context
        assert logs[f"{prefix}count-odd"] == ["odd 1", "odd 2", "odd 3"], context
        assert said[f"{prefix}broken-main"] == "exit_code=3 restarts=0", context
        assert logs[f"{prefix}broken-main"] == ["no input"], context
        # Its first run always exits 3: a 0 is a second run, which the supervisor made.
        assert said[f"{prefix}flaky-main"] == "exit_code=0 restarts=1", context
        # ``ps`` after the fact: the groups' records, read once every job was done.
        assert said[f"ps {prefix}flaky-main"] == "stopped exit_code=0 restarts=1 ports=-", context
        web = said[f"ps {prefix}web-server"]
        assert web.startswith("running ") and web.endswith(f" ports={port}->8080"), context
        # Nothing of the example is left: groups, containerd's objects, namespaces, files.
        assert groups.names() == []
        assert audit(sched) == []
        assert host_audit(f"cx-{prefix}") == []
        left = [p for p in (tmp_path / "netns-files", tmp_path / "logs") if p.exists()]
        assert [f for where in left for f in where.rglob("*") if f.is_file()] == []
