"""docker's smaller behaviours through the real binary: read-only host files with
``--read-only``, the primary group in ``id``, ``top`` with ps options, ``ps --format
json``, ``stats --format`` and its I/O columns, ``attach`` to a task without -i/-t."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import Cli
from _nethelpers import cli_bridge, free_port

from ctrexec.cli.views.stats import bytes_size
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


SUBNET = "10.231.222.0/24"


@pytest.fixture
def bridge(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    """ctrexec's bridge network under this file's names; all of it is gone after."""
    with cli_bridge(monkeypatch, tmp_path, SUBNET) as name:
        yield name


def _get(port: int) -> bool:
    """One GET; False while nothing answers yet (httpd starts after ``run`` returns)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as resp:
            return resp.status == 200
    except OSError:
        return False


def _stats(cli: Cli, fmt: str, *names: str) -> list[str]:
    out = cli("stats", "--no-stream", "--interval", "0.1", "--format", fmt, *names)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_stats_format_and_its_io_and_limit_columns(
    bridge: str, cli: Cli, test_image: str, made: list[str]
) -> None:
    """(``bridge`` first: its teardown, which looks for leftover rules, runs after the
    tasks' removal.)"""
    port = free_port()
    httpd = ["httpd", "-f", "-p", "8080", "-h", "/var/www"]
    _run(cli, made, "ps-stn", "-p", f"{port}:8080", test_image, *httpd)
    _run(cli, made, "ps-stm", "--memory", "64m", test_image, "sleep", "300")
    wait_for(lambda: _get(port), timeout=30, what="httpd answers")
    lines = _stats(cli, "{{.Name}}|{{.NetIO}}|{{.BlockIO}}|{{.MemUsage}}|{{.PIDs}}", "ps-stn")
    name, net, block, memory, pids = lines[0].split("|")
    rx, tx = net.split(" / ")
    assert name == "ps-stn" and pids.isdigit()  # httpd forks a child per request
    # a GET went in and a page came out, over the task's eth0 (loopback is not counted)
    assert rx != "0B" and tx != "0B", net
    assert re.fullmatch(r"[0-9.]+(B|kB|MB|GB) / [0-9.]+(B|kB|MB|GB)", block), block
    # no limit: the host's memory, as docker shows it
    host = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert memory.endswith(f" / {bytes_size(host)}"), memory
    (limited,) = _stats(cli, "{{.MemUsage}} {{.NetIO}}", "ps-stm")
    assert limited.endswith(" / 64MiB 0B / 0B"), limited  # no network: nothing but lo
    header, *rows = _stats(cli, r"table {{.Container}}\t{{.CPUPerc}}", "ps-stn", "ps-stm")
    assert header.split() == ["CONTAINER", "CPU", "%"]
    assert [r.split()[0] for r in rows] == ["ps-stn", "ps-stm"]
    assert all(r.split()[1].endswith("%") for r in rows)
    docs = [json.loads(line) for line in _stats(cli, "json", "ps-stm")]
    assert (docs[0]["Name"], docs[0]["PIDs"]) == ("ps-stm", "1")
    bad = cli("stats", "--no-stream", "--format", "{{.Nope}}", "ps-stm")
    assert (bad.returncode, bad.stdout) == (1, "")  # docker's code for a failing template
    assert bad.stderr.startswith("ctrexec: stats --format: unknown field .Nope")


def test_attach_to_a_task_without_i_or_t_streams_its_output(
    cli: Cli, test_image: str, made: list[str], tmp_path: Path
) -> None:
    """docker's attach of a detached, non-interactive container: what it writes from
    now on, stdout and stderr apart, until it exits; then its exit code."""
    script = (
        "i=0; while [ ! -e /x/stop ]; do echo $i; i=$((i+1)); sleep 0.1; done; echo err >&2; exit 7"
    )
    _run(cli, made, "ps-att", "-v", f"{tmp_path}:/x", test_image, "sh", "-c", script)
    # two lines are in the log before the attach: it leaves them out, as docker's
    wait_for(lambda: "1\n" in cli("logs", "ps-att").stdout, timeout=30, what="two lines")
    argv = cli.argv("attach", "ps-att")
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        guard = threading.Timer(120, proc.kill)  # a broken attach fails, not hangs
        guard.start()
        try:
            assert proc.stdout is not None
            seen = [proc.stdout.readline() for _ in range(3)]
            (tmp_path / "stop").touch()
            rest, err = proc.communicate()
        finally:
            guard.cancel()
    numbers = [int(n) for n in [*seen, *rest.splitlines()]]
    assert numbers[0] >= 2, numbers
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))
    assert (proc.returncode, err) == (7, "err\n")
    stopped = cli("attach", "ps-att")
    assert stopped.returncode == 125
    assert stopped.stderr == (
        "ctrexec: You cannot attach to a stopped container ps-att, start it first\n"
    )
