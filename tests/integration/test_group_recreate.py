"""``group up`` of an edited group file, through the real binary, as compose does it.

Only the members whose definition changed are recreated; the others keep running
(same process). The namespace (same inode), its address and its published port stay.
``--force-recreate`` recreates every member; a member no longer in the file is
removed, and the kept members' /etc/hosts follows the new member list. An edit of the
group's network or ports is refused before anything is touched.
"""

from __future__ import annotations

import json
import os
import secrets
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _cli import Cli
from _nethelpers import cli_bridge, free_port, free_subnet

from ctrexec.testing import wait_for

pytestmark = pytest.mark.integration

HTTPD = '["httpd", "-f", "-p", "8080", "-h", "/var/www"]'


@pytest.fixture
def bridge(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    with cli_bridge(monkeypatch, tmp_path, str(free_subnet())) as name:
        yield name


@pytest.fixture
def group(cli: Cli, bridge: str) -> Iterator[str]:
    name = f"cxrc{secrets.token_hex(2)}"
    try:
        yield name
    finally:
        cli("group down", "-t", "1", name)


def _file(tmp_path: Path, name: str, image: str, port: int, **members: str) -> Path:
    """A group file: ``server`` runs httpd behind ``port``; each of ``members`` is a
    task name and the shell line it runs."""
    text = f'name = "{name}"\nnetwork = "bridge"\nports = ["{port}:8080/tcp"]\n'
    text += f'[[task]]\nname = "server"\nimage = "{image}"\ncommand = {HTTPD}\n'
    for task, line in members.items():
        text += f'[[task]]\nname = "{task}"\nimage = "{image}"\n'
        text += f"command = {json.dumps(['sh', '-c', line])}\n"
    path = tmp_path / f"{name}-{secrets.token_hex(2)}.toml"
    path.write_text(text)
    return path


def _up(cli: Cli, path: Path, *flags: str) -> str:
    up = cli("group up", *flags, str(path))
    assert up.returncode == 0, up.stderr
    return up.stderr


def _inspect(cli: Cli, task_id: str) -> dict[str, Any]:
    out = cli("inspect", task_id)
    assert out.returncode == 0, out.stderr
    (doc,) = json.loads(out.stdout)
    assert isinstance(doc, dict)
    return doc


def _facts(cli: Cli, group: str, task_id: str) -> tuple[int, str, list[str]]:
    """The member's pid, its group's address, and what it runs."""
    doc = _inspect(cli, task_id)
    return doc["State"]["Pid"], doc["NetworkSettings"]["IPAddress"], doc["Args"]


def _answers(port: int) -> None:
    """Wait until httpd answers a GET through the published port (a server just started
    listens a moment after its task does)."""

    def get() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    wait_for(get, timeout=30, what=f"httpd to answer on port {port}")


def _hosts(cli: Cli, task_id: str) -> str:
    out = cli("exec", task_id, "cat", "/etc/hosts")
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_only_the_changed_member_is_recreated(
    cli: Cli, group: str, tmp_path: Path, test_image: str
) -> None:
    port = free_port()
    _up(cli, _file(tmp_path, group, test_image, port, worker="sleep 1000"))
    inode = os.stat(f"/run/netns/cx-{group}").st_ino
    server_pid, address, _ = _facts(cli, group, f"{group}-server")
    worker_pid, _, _ = _facts(cli, group, f"{group}-worker")

    said = _up(cli, _file(tmp_path, group, test_image, port, worker="sleep 2000"))

    assert said.splitlines() == [f"group {group}: recreated {group}-worker"], said
    assert _facts(cli, group, f"{group}-server")[:2] == (server_pid, address)
    pid, now, args = _facts(cli, group, f"{group}-worker")
    assert pid != worker_pid and now == address and args[-1] == "sleep 2000"
    assert os.stat(f"/run/netns/cx-{group}").st_ino == inode
    _answers(port)  # the published port still reaches the kept server


def test_an_unchanged_file_touches_nothing_and_force_recreates_all(
    cli: Cli, group: str, tmp_path: Path, test_image: str
) -> None:
    port = free_port()
    path = _file(tmp_path, group, test_image, port, worker="sleep 1000")
    _up(cli, path)
    before = {t: _facts(cli, group, f"{group}-{t}") for t in ("server", "worker")}

    assert _up(cli, path) == ""
    assert {t: _facts(cli, group, f"{group}-{t}") for t in before} == before

    said = _up(cli, path, "--force-recreate")
    assert sorted(said.splitlines()) == [
        f"group {group}: recreated {group}-server",
        f"group {group}: recreated {group}-worker",
    ], said
    for task, (pid, address, args) in before.items():
        now_pid, now_address, now_args = _facts(cli, group, f"{group}-{task}")
        assert now_pid != pid and (now_address, now_args) == (address, args)
    _answers(port)


def test_members_added_and_removed_and_hosts_follow(
    cli: Cli, group: str, tmp_path: Path, test_image: str
) -> None:
    port = free_port()
    _up(cli, _file(tmp_path, group, test_image, port, old="sleep 1000"))
    server_pid = _facts(cli, group, f"{group}-server")[0]
    assert f"{group}-old" in _hosts(cli, f"{group}-server")

    said = _up(cli, _file(tmp_path, group, test_image, port, new="sleep 1000"))

    assert said.splitlines() == [
        f"group {group}: removed {group}-old, no longer in the group file"
    ], said
    assert cli("inspect", f"{group}-old").returncode == 1
    assert _facts(cli, group, f"{group}-server")[0] == server_pid
    hosts = _hosts(cli, f"{group}-server")
    assert f"{group}-new" in hosts and f"{group}-old" not in hosts
    ps = cli("group ps", group)
    assert ps.returncode == 0, ps.stderr
    assert "missing" not in ps.stdout + ps.stderr


def test_an_edit_of_the_ports_is_refused_untouched(
    cli: Cli, group: str, tmp_path: Path, test_image: str
) -> None:
    port = free_port()
    _up(cli, _file(tmp_path, group, test_image, port, worker="sleep 1000"))
    before = _facts(cli, group, f"{group}-worker")

    other = free_port()
    up = cli("group up", str(_file(tmp_path, group, test_image, other, worker="sleep 2000")))

    assert up.returncode == 125
    assert up.stderr.strip() == (
        f"ctrexec: group {group}: its ports {port}:8080/tcp changed to {other}:8080/tcp; "
        "the network and ports belong to its namespace, which up keeps: "
        f"run 'ctrexec group down {group}' first"
    )
    assert _facts(cli, group, f"{group}-worker") == before
    _answers(port)
