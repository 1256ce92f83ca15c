"""``netns rm`` and ``netns ls`` with other tenants of /run/netns, through the real CLI.

A namespace something still uses (a process this test starts with ``ip netns exec``,
a task, a second bind mount) is refused without ``--force``, naming the user;
``netns ls`` tells the namespaces ctrexec made from other tools' and shows what uses
each. Every namespace is named after this run and removed after its test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _cli import CLI_PROG, Cli

from ctrexec import _linux
from ctrexec.net import nsmarks
from ctrexec.testing import wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
]

RUN_TAG = f"cxt-nu{os.getpid() % 10000}-{uuid.uuid4().hex[:4]}"


@pytest.fixture
def names() -> Iterator[list[str]]:
    """Namespace names the test makes; whatever is left of them is removed after."""
    made: list[str] = []
    yield made
    for name in made:
        if Path("/run/netns", name).exists():
            subprocess.run(["ip", "netns", "del", name], check=False)
        nsmarks.unmark(f"/run/netns/{name}")  # what ip netns del leaves of ctrexec's


def _ctrexec(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI for the netns verbs that talk to no containerd (create, ls)."""
    return subprocess.run(
        [*CLI_PROG, *args], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.fixture
def sleeper() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes the test starts inside a namespace; killed by pid after."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def _listing() -> dict[str, dict[str, Any]]:
    out = _ctrexec("netns", "ls", "--json")
    assert out.returncode == 0, out.stderr
    return {n["name"]: n for n in json.loads(out.stdout)}


def _sleep_in(name: str, started: list[subprocess.Popen[bytes]]) -> int:
    proc = subprocess.Popen(["ip", "netns", "exec", name, "sleep", "60"])
    started.append(proc)

    def inside() -> bool:
        users = _listing()[name]["users"]
        return any(u["pid"] == proc.pid and u["command"] == "sleep" for u in users)

    wait_for(inside, timeout=30, what=f"sleep (pid {proc.pid}) in {name}")
    return proc.pid


def _create(names: list[str], suffix: str) -> str:
    name = f"{RUN_TAG}-{suffix}"
    names.append(name)
    out = _ctrexec("netns", "create", name)
    assert out.returncode == 0, out.stderr
    return name


def _refused(cli: Cli, name: str) -> str:
    out = cli("netns rm", name)
    assert out.returncode == 125, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"ctrexec: netns {name} is in use by ")
    assert lines[0].endswith("; use --force")
    assert Path("/run/netns", name).exists()
    return lines[0]


def _forced(cli: Cli, name: str) -> None:
    out = cli("netns rm", "--force", name)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [name]
    assert not Path("/run/netns", name).exists()


def test_rm_refuses_a_namespace_a_plain_process_uses(
    cli: Cli, names: list[str], sleeper: list[subprocess.Popen[bytes]]
) -> None:
    name = _create(names, "proc")
    pid = _sleep_in(name, sleeper)
    assert f"pid {pid} (sleep)" in _refused(cli, name)
    _forced(cli, name)
    assert sleeper[0].poll() is None  # --force removes the name, not someone else's process


def test_rm_refuses_a_namespace_a_task_uses(cli: Cli, names: list[str], test_image: str) -> None:
    name = _create(names, "task")
    task = f"{RUN_TAG}-t"
    out = cli("run", "-d", "--name", task, "--netns", name, test_image, "sleep", "100")
    assert out.returncode == 0, out.stderr
    try:
        line = _refused(cli, name)
        assert f"(sleep) of container {task}" in line, line
        _forced(cli, name)
    finally:
        assert cli("rm", "-f", task).returncode == 0


def test_rm_refuses_a_namespace_mounted_elsewhere_too(
    cli: Cli, names: list[str], tmp_path: Path
) -> None:
    name = _create(names, "mnt")
    pin = tmp_path / "pin"
    pin.touch()
    subprocess.run(["mount", "--bind", f"/run/netns/{name}", str(pin)], check=True)
    try:
        assert f"mount {pin}" in _refused(cli, name)
        users = [{"how": "mount", "pid": None, "command": "", "container": None, "mount": str(pin)}]
        assert _listing()[name]["users"] == users
        inspected = cli("netns inspect", name)
        assert inspected.returncode == 0, inspected.stderr
        assert json.loads(inspected.stdout)["users"] == users
        assert json.loads(inspected.stdout)["ctrexec"] is True
        _forced(cli, name)
    finally:
        _linux.unmount(str(pin))


def test_ls_shows_who_made_each_namespace_and_what_uses_it(
    names: list[str], sleeper: list[subprocess.Popen[bytes]]
) -> None:
    ours = _create(names, "ours")
    theirs = f"{RUN_TAG}-theirs"
    names.append(theirs)
    subprocess.run(["ip", "netns", "add", theirs], check=True)
    pid = _sleep_in(theirs, sleeper)

    listing = _listing()
    assert (listing[ours]["ctrexec"], listing[ours]["users"]) == (True, [])
    assert listing[theirs]["ctrexec"] is False
    out = _ctrexec("netns", "ls")
    assert out.returncode == 0, out.stderr
    header, *rows = out.stdout.splitlines()
    assert header.split() == ["NAME", "PATH", "CREATED", "BY", "USED", "BY"]
    table = {r.split()[0]: r.split(None, 3)[2:] for r in rows}
    assert table[ours] == ["ctrexec", "-"]
    assert table[theirs] == ["-", f"pid {pid} (sleep)"]

    # a name ctrexec made, removed behind its back and made again by another tool
    assert subprocess.run(["ip", "netns", "del", ours], check=False).returncode == 0
    subprocess.run(["ip", "netns", "add", ours], check=True)
    assert _listing()[ours]["ctrexec"] is False


def test_the_library_names_who_made_each_namespace_and_what_uses_it(
    names: list[str], sleeper: list[subprocess.Popen[bytes]]
) -> None:
    """``netns_usage`` is what ``netns ls`` and ``inspect`` print: by name, by path, or all."""
    from ctrexec import NetnsUsage, NetnsUser, netns_usage

    ours = _create(names, "lib-ours")
    theirs = f"{RUN_TAG}-lib-theirs"
    names.append(theirs)
    subprocess.run(["ip", "netns", "add", theirs], check=True)
    pid = _sleep_in(theirs, sleeper)

    mine, other = netns_usage(ours, f"/run/netns/{theirs}")
    assert mine == NetnsUsage(name=ours, path=f"/run/netns/{ours}", made_by_ctrexec=True, users=())
    assert (other.name, other.made_by_ctrexec) == (theirs, False)
    assert [(u.how, u.pid, u.command) for u in other.users] == [("process", pid, "sleep")]
    assert all(isinstance(u, NetnsUser) for u in other.users)
    every = {u.name: u for u in netns_usage()}
    assert (every[ours], every[theirs]) == (mine, other)
