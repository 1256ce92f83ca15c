"""docker's smaller behaviours through the real binary: read-only host files with
``--read-only``, the primary group in ``id``, ``top`` with ps options, ``ps --format
json``, ``stats --format`` and its I/O columns, ``attach`` to a task without -i/-t."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _cli import Cli

from ctrexec.testing import wait_for

pytestmark = pytest.mark.integration


def _run(cli: Cli, made: list[str], name: str, *argv: str) -> None:
    made.append(name)
    out = cli("run", "-d", "--name", name, *argv)
    assert out.returncode == 0, out.stderr


def test_read_only_makes_the_host_files_read_only(
    cli: Cli, test_image: str, made: list[str]
) -> None:
    _run(cli, made, "ps-ro", "--read-only", test_image, "sleep", "300")
    _run(cli, made, "ps-rw", test_image, "sleep", "300")
    for path in ("/etc/hosts", "/etc/hostname", "/etc/resolv.conf"):
        out = cli("exec", "ps-ro", "sh", "-c", f"echo x >> {path}")
        assert out.returncode != 0, path
        assert "Read-only file system" in out.stderr, out.stderr
    # without --read-only, /etc/hosts stays writable, as docker's
    out = cli("exec", "ps-rw", "sh", "-c", "echo '10.9.9.9 added' >> /etc/hosts; cat /etc/hosts")
    assert out.returncode == 0, out.stderr
    assert "10.9.9.9 added" in out.stdout


def test_id_lists_the_primary_group(cli: Cli, test_image: str, made: list[str]) -> None:
    made.append("ps-id")
    out = cli("run", "--name", "ps-id", "-u", "1000", test_image, "id")
    # the image's app user (1000) is in staff (50); the kernel sorts the groups
    want = "uid=1000(app) gid=1000(app) groups=50(staff),1000(app)\n"
    assert (out.returncode, out.stdout) == (0, want), out.stderr
    _run(cli, made, "ps-id2", "-u", "4242", test_image, "sleep", "300")
    out = cli("exec", "ps-id2", "id")  # a uid the image does not list: gid 0, as docker's
    assert (out.returncode, out.stdout) == (0, "uid=4242 gid=0(root) groups=0(root)\n")
    out = cli("exec", "-u", "4242:50", "ps-id2", "id")  # an exec's own user alike
    assert (out.returncode, out.stdout) == (0, "uid=4242 gid=50(staff) groups=50(staff)\n")


def test_top_takes_ps_options(cli: Cli, test_image: str, made: list[str]) -> None:
    _run(cli, made, "ps-top", test_image, "sh", "-c", "sleep 301 & sleep 302")
    wait_for(lambda: "sleep 301" in cli("top", "ps-top").stdout, timeout=30, what="both sleeps")
    out = cli("top", "ps-top", "-eo", "pid,args")
    assert out.returncode == 0, out.stderr
    header, *rows = out.stdout.splitlines()
    assert header.split() == ["PID", "COMMAND"]
    assert sorted(r.split(None, 1)[1] for r in rows) == ["sleep 301", "sleep 302"]
    out = cli("top", "ps-top", "aux")  # BSD options; the command's spaces stay one column
    assert out.returncode == 0, out.stderr
    header, *rows = out.stdout.splitlines()
    assert header.split()[:2] == ["USER", "PID"] and header.split()[-1] == "COMMAND"
    assert sorted(r.split(None, 10)[10] for r in rows) == ["sleep 301", "sleep 302"]
    out = cli("top", "ps-top", "-eo", "comm")
    assert (out.returncode, out.stdout) == (125, "")
    assert out.stderr == "ctrexec: Couldn't find PID field in ps output\n"
    out = cli("top", "ps-top", "--no-such-option")
    assert (out.returncode, out.stdout) == (125, "")
    assert out.stderr.startswith("ctrexec: ps: ")


#: The keys of docker's ``ps --format json`` that ctrexec has (not Size, LocalVolumes).
DOCKER_PS_KEYS = {
    "Command", "CreatedAt", "ID", "Image", "Labels", "Mounts", "Names", "Networks", "Ports",
    "RunningFor", "State", "Status",
}  # fmt: skip


def test_ps_format_json_is_a_json_object_a_line(
    cli: Cli, test_image: str, made: list[str], tmp_path: Path
) -> None:
    _run(
        cli,
        made,
        "ps-json1",
        "-l",
        "tier=web",
        "-v",
        f"{tmp_path}:/data",
        test_image,
        "sleep",
        "300",
    )
    made.append("ps-json2")
    assert cli("create", "--name", "ps-json2", test_image, "true").returncode == 0
    out = cli("ps", "-a", "--filter", "name=ps-json", "--format", "json")
    assert out.returncode == 0, out.stderr
    rows = {r["Names"]: r for r in map(json.loads, out.stdout.splitlines())}
    assert set(rows) == {"ps-json1", "ps-json2"}
    assert all(set(r) >= DOCKER_PS_KEYS for r in rows.values())
    up, created = rows["ps-json1"], rows["ps-json2"]
    assert (up["State"], up["Labels"], up["Networks"]) == ("running", "tier=web", "none")
    assert up["Command"] == '"sleep 300"' and up["Status"].startswith("Up ")
    assert created["State"] == "created" and created["Mounts"] == ""
    whole = cli("ps", "-a", "--no-trunc", "--filter", "name=ps-json1", "--format", "json")
    assert json.loads(whole.stdout)["Mounts"] == str(tmp_path)
    # ctrexec's own --json is kept: its whole view, as one document
    own = cli("ps", "-a", "--filter", "name=ps-json", "--json")
    assert own.returncode == 0, own.stderr
    assert isinstance(json.loads(own.stdout), list)
