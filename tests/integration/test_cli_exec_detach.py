"""docker's ``exec -d`` through the real binary: the command starts, the CLI returns at
once with exit 0, and the command runs on in the container until the container stops."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import Cli

from ctrexec.testing import wait_for

pytestmark = pytest.mark.integration

NAME = "execd-box"
#: What the detached command becomes after writing its marker (unique to this test).
ARGV = b"sleep\x004242\x00"


@pytest.fixture
def box(cli: Cli, test_image: str) -> Iterator[str]:
    made = cli("run", "-d", "--name", NAME, test_image, "sleep", "300")
    assert made.returncode == 0, made.stderr
    try:
        yield NAME
    finally:
        with contextlib.suppress(Exception):
            cli("rm", "-f", NAME)


def _detached_pids() -> list[int]:
    """Host pids of the detached ``sleep 4242`` in the box's cgroup."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if (proc / "cmdline").read_bytes() == ARGV and NAME in (proc / "cgroup").read_text():
                found.append(int(proc.name))
    return found


def test_exec_d_returns_at_once_and_the_command_runs_on(cli: Cli, box: str) -> None:
    # The command outlives the CLI: were the CLI waiting for it, this call would time out.
    out = cli("exec", "-d", box, "sh", "-c", "echo started > /tmp/execd; exec sleep 4242",
              timeout=60)  # fmt: skip
    assert (out.returncode, out.stdout, out.stderr) == (0, "", "")
    wait_for(lambda: len(_detached_pids()) == 1, timeout=30, what="the detached sleep running")
    (pid,) = _detached_pids()
    marker = cli("exec", box, "cat", "/tmp/execd")
    assert (marker.returncode, marker.stdout) == (0, "started\n"), marker.stderr
    top = cli("top", box)
    assert "4242" in top.stdout, top.stdout  # the container's own process list has it
    # Its env, workdir and user are exec's, as without -d.
    out = cli("exec", "-d", "-e", "EXECD=yes", "-w", "/tmp", "-u", "1234", box,
              "sh", "-c", 'echo "$EXECD $(pwd) $(id -u)" > /tmp/execd-opts')  # fmt: skip
    assert out.returncode == 0, out.stderr

    def opts() -> str:
        return cli("exec", box, "cat", "/tmp/execd-opts").stdout

    wait_for(lambda: opts() == "yes /tmp 1234\n", timeout=30, what="the options' effect")
    # The container is the command's keeper: stopping it ends the command.
    assert cli("stop", "-t", "1", box).returncode == 0
    wait_for(lambda: not Path(f"/proc/{pid}").exists() or pid not in _detached_pids(),
             timeout=30, what="the detached command gone with its container")  # fmt: skip
    state = json.loads(cli("inspect", box).stdout)[0]["State"]
    assert state["Status"] == "exited"


def test_exec_d_refusals(cli: Cli, box: str) -> None:
    both = cli("exec", "-d", "-t", box, "true")
    assert (both.returncode, both.stderr) == (
        125, "ctrexec: exec: -d cannot be used with -i, -t or --timeout\n",
    )  # fmt: skip
    stopped = cli("exec", "-d", "nosuch-execd", "true")
    assert stopped.returncode == 1 and "No such container: nosuch-execd" in stopped.stderr
