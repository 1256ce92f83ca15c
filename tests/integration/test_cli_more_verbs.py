"""docker's other verbs through the real binary: wait, restart, port, top, stats, logs
--since/--until."""

from __future__ import annotations

import json
import secrets
import signal
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from _cli import Cli
from _nethelpers import free_port
from _support import audited_groups

from ctrexec.containerd.client import Client
from ctrexec.groups.spec import parse_group
from ctrexec.groups.updown import Groups
from ctrexec.testing import wait_for

pytestmark = pytest.mark.integration


def _run(cli: Cli, made: list[str], name: str, *argv: str, detach: bool = True) -> None:
    made.append(name)
    out = cli("run", *(["-d"] if detach else []), "--name", name, *argv)
    assert out.returncode == 0 or not detach, out.stderr


def _inspect(cli: Cli, name: str) -> dict[str, object]:
    out = cli("inspect", name)
    assert out.returncode == 0, out.stderr
    info: dict[str, object] = json.loads(out.stdout)[0]["Ctrexec"]  # ctrexec's own view
    return info


def test_wait_prints_each_exit_code(cli: Cli, test_image: str, made: list[str]) -> None:
    _run(cli, made, "mv-w3", test_image, "sh", "-c", "exit 3", detach=False)
    _run(cli, made, "mv-w5", test_image, "sh", "-c", "sleep 1; exit 5")
    out = cli("wait", "mv-w3", "mv-nosuch", "mv-w5")
    assert (out.returncode, out.stdout) == (1, "3\n5\n"), out.stderr
    assert out.stderr == "ctrexec: No such container: mv-nosuch\n"


def test_restart_starts_a_new_run(cli: Cli, test_image: str, made: list[str]) -> None:
    _run(cli, made, "mv-rs", test_image, "sleep", "300")
    before = _inspect(cli, "mv-rs")
    out = cli("restart", "-t", "1", "mv-rs")
    assert (out.returncode, out.stdout) == (0, "mv-rs\n"), out.stderr
    after = _inspect(cli, "mv-rs")
    assert after["status"] == "running"
    assert after["run"] == int(str(before["run"])) + 1
    assert after["pid"] != before["pid"]


def test_top_lists_the_tasks_processes(cli: Cli, test_image: str, made: list[str]) -> None:
    _run(cli, made, "mv-top", test_image, "sh", "-c", "sleep 301 & sleep 302")
    wait_for(lambda: "sleep 301" in cli("top", "mv-top").stdout, timeout=30, what="both sleeps")
    out = cli("top", "mv-top")
    assert out.returncode == 0, out.stderr
    header, *rows = out.stdout.splitlines()
    assert header.split() == ["UID", "PID", "PPID", "TIME", "CMD"]
    by_pid = {int(row.split()[1]): row.split(None, 4)[4] for row in rows}
    assert set(by_pid.values()) == {"sleep 301", "sleep 302"}  # sh execs its last command
    assert by_pid[int(str(_inspect(cli, "mv-top")["pid"]))] == "sleep 302"
    assert all(row.split()[0] == "root" for row in rows)
    cli("kill", "mv-top")
    wait_for(lambda: _inspect(cli, "mv-top")["status"] == "stopped", timeout=30, what="exit")
    stopped = cli("top", "mv-top")
    assert (stopped.returncode, stopped.stderr) == (
        125,
        "ctrexec: container mv-top is not running\n",
    )


def test_logs_since_and_until(cli: Cli, test_image: str, made: list[str]) -> None:
    script = "echo early; sleep 2; echo late"
    _run(cli, made, "mv-logs", test_image, "sh", "-c", script, detach=False)
    out = cli("logs", "-t", "mv-logs")
    assert out.returncode == 0, out.stderr
    stamps = {line.split(" ", 1)[1]: line.split(" ", 1)[0] for line in out.stdout.splitlines()}
    late = datetime.fromisoformat(stamps["late"][:26] + "+00:00")
    cut = late.timestamp() - 1  # between the two lines: they are two seconds apart
    assert cli("logs", "--since", f"{cut:.3f}", "mv-logs").stdout == "late\n"
    assert cli("logs", "--until", f"{cut:.3f}", "mv-logs").stdout == "early\n"
    assert cli("logs", "--since", "1h", "mv-logs").stdout == "early\nlate\n"
    assert cli("logs", "--until", "1h", "mv-logs").stdout == ""
    after = f"{late.timestamp() + 1:.3f}"  # --until --tail: the last of those up to it
    assert cli("logs", "--until", after, "--tail", "1", "mv-logs").stdout == "late\n"
    assert cli("logs", "--until", f"{cut:.3f}", "--tail", "1", "mv-logs").stdout == "early\n"
    assert cli("logs", "--until", after, "--tail", "0", "mv-logs").stdout == ""
    both = cli("logs", "--since", "1h", "--until", after, "--tail", "5", "mv-logs")
    assert both.stdout == "early\nlate\n"
    iso = datetime.fromtimestamp(cut, UTC).isoformat()
    assert cli("logs", "--since", iso, "mv-logs").stdout == "late\n"
    bad = cli("logs", "--since", "yesterday", "mv-logs")
    assert bad.returncode == 125 and "expected a time" in bad.stderr


def test_stats_streams_all_running_tasks(cli: Cli, test_image: str, made: list[str]) -> None:
    _run(cli, made, "mv-st1", test_image, "sleep", "300")
    _run(cli, made, "mv-st2", test_image, "sleep", "300")
    once = cli("stats", "--no-stream")
    assert once.returncode == 0, once.stderr
    names = {line.split()[0] for line in once.stdout.splitlines()[1:]}
    assert {"mv-st1", "mv-st2"} <= names
    argv = cli.argv("stats", "--interval", "0.2", "mv-st1")
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            headers = 0
            while headers < 3:  # a fresh table each interval, until interrupted
                line = proc.stdout.readline()
                assert line, "stats ended on its own"
                headers += line.startswith("NAME ")
            assert proc.poll() is None
        finally:
            proc.send_signal(signal.SIGINT)
            code = proc.wait(timeout=30)
    assert code == 130


SUBNET = "10.231.186.0/24"


@pytest.fixture
def groups(client: Client, tmp_path: Path, containerd_address: str) -> Iterator[Groups]:
    with audited_groups(client, tmp_path, containerd_address, "cxtp", SUBNET) as g:
        yield g


def test_port_lists_published_ports(cli: Cli, groups: Groups, test_image: str) -> None:
    port = free_port()
    name = f"cxp{secrets.token_hex(2)}"
    task = {"name": "web", "image": test_image, "command": ["sleep", "300"]}
    groups.up(parse_group({"name": name, "ports": [f"{port}:8080/tcp"], "task": [task]}))
    out = cli("port", f"{name}-web")
    assert (out.returncode, out.stdout) == (0, f"8080/tcp -> 0.0.0.0:{port}\n"), out.stderr
    assert cli("port", f"{name}-web", "8080").stdout == f"0.0.0.0:{port}\n"
    assert cli("port", f"{name}-web", "8080/tcp").stdout == f"0.0.0.0:{port}\n"
    unpublished = cli("port", f"{name}-web", "9999/tcp")
    assert (unpublished.returncode, unpublished.stdout, unpublished.stderr) == (
        1,
        "",
        f"ctrexec: No public port '9999/tcp' published for {name}-web\n",
    )
    none = cli("port", "nosuch")
    assert (none.returncode, none.stderr) == (1, "ctrexec: No such container: nosuch\n")
