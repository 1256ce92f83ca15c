"""``ps`` and ``inspect`` as a docker user reads them, through the real binary."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import Cli

pytestmark = pytest.mark.integration


@pytest.fixture
def three(cli: Cli, test_image: str) -> Iterator[None]:
    """pst-up (running, label tier=web, env GREETING=hi, group pst-g), pst-done (exited 3),
    pst-new (created)."""
    runs = [
        ("run", "-d", "--name", "pst-up", "-l", "tier=web", "--group", "pst-g",
         "-e", "GREETING=hi", test_image, "sleep", "300"),
        ("run", "--name", "pst-done", test_image, "sh", "-c", "exit 3"),
        ("create", "--name", "pst-new", test_image, "true"),
    ]  # fmt: skip
    try:
        for argv in runs:
            cli(*argv)
        yield
    finally:
        with contextlib.suppress(Exception):
            cli("rm", "-f", "pst-up", "pst-done", "pst-new")


def _ours(text: str) -> list[str]:
    return [line for line in text.splitlines() if "pst-" in line]


def test_ps_columns_and_status(cli: Cli, three: None) -> None:
    out = cli("ps", "-a")
    assert out.returncode == 0, out.stderr
    header = out.stdout.splitlines()[0]
    assert re.split(r"\s{2,}", header) == [
        "CONTAINER ID", "IMAGE", "COMMAND", "CREATED", "STATUS", "PORTS", "NAMES", "NETNS",
        "GROUP",
    ]  # fmt: skip
    rows = {line.split()[0]: line for line in _ours(out.stdout)}
    assert re.search(
        r'"sleep 300"\s+\S.* ago\s+Up (Less than a second|\d+ seconds?)', rows["pst-up"]
    )
    assert re.search(r"Exited \(3\) .* ago", rows["pst-done"]), rows["pst-done"]
    assert "Created" in rows["pst-new"]
    assert "pst-g" in rows["pst-up"]
    running = cli("ps")
    assert [line.split()[0] for line in _ours(running.stdout)] == ["pst-up"]


def test_ps_quiet_format_filter_last(cli: Cli, three: None) -> None:
    assert cli("ps", "-a", "-q", "--filter", "name=pst-").stdout.split() == [
        "pst-new",
        "pst-done",
        "pst-up",
    ]  # fmt: skip newest first
    assert cli("ps", "-n", "2", "-q", "-f", "name=pst-").stdout.split() == ["pst-new", "pst-done"]
    assert cli("ps", "-a", "-q", "-f", "status=exited", "-f", "name=pst-").stdout == "pst-done\n"
    assert cli("ps", "-a", "-q", "-f", "label=tier=web").stdout == "pst-up\n"
    assert cli("ps", "-a", "-q", "-f", "label=tier").stdout == "pst-up\n"
    assert cli("ps", "-a", "-q", "-f", "group=pst-g").stdout == "pst-up\n"
    none = cli("ps", "-a", "-q", "-f", "netns=none", "-f", "name=pst-").stdout.split()
    assert sorted(none) == ["pst-done", "pst-new", "pst-up"]
    fmt = cli("ps", "-a", "-f", "name=pst-", "--format", "{{.Names}} {{.State}} {{.Pid}}|")
    lines = fmt.stdout.splitlines()
    assert lines[0] == "pst-new created |" and lines[1] == "pst-done exited |"
    assert re.fullmatch(r"pst-up running \d+\|", lines[2]), lines
    table = cli("ps", "-f", "name=pst-", "--format", r"table {{.Names}}\t{{.Status}}")
    assert re.split(r"\s{2,}", table.stdout.splitlines()[0]) == ["NAMES", "STATUS"]
    bad = cli("ps", "--format", "{{.Nope}}")
    assert bad.returncode == 1 and "unknown field .Nope" in bad.stderr  # docker's code
    bad = cli("ps", "--filter", "colour=red")
    assert bad.returncode == 125 and "invalid filter 'colour=red'" in bad.stderr


ZERO_TIME = "0001-01-01T00:00:00Z"
RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z")


def _is_pst_up(pid: int) -> bool:
    """The pid is pst-up's task: it runs ``sleep 300`` in that container's cgroup."""
    proc = Path(f"/proc/{pid}")
    return (proc / "cmdline").read_bytes() == b"sleep\x00300\x00" and "pst-up" in (
        proc / "cgroup"
    ).read_text()


def test_inspect_is_docker_s_document(cli: Cli, three: None) -> None:
    out = cli("inspect", "pst-up", "pst-done", "pst-new")
    assert out.returncode == 0, out.stderr
    up, done, new = json.loads(out.stdout)
    assert (up["Id"], up["Name"], up["RestartCount"]) == ("pst-up", "/pst-up", 0)
    assert RFC3339.fullmatch(up["Created"]) and RFC3339.fullmatch(up["State"]["StartedAt"])
    state = up["State"]
    assert (state["Status"], state["Running"], state["Paused"], state["ExitCode"]) == (
        "running", True, False, 0,
    )  # fmt: skip
    assert _is_pst_up(state["Pid"]) and state["FinishedAt"] == ZERO_TIME
    assert (up["Config"]["Cmd"], up["Config"]["Labels"]) == (["sleep", "300"], {"tier": "web"})
    assert "GREETING=hi" in up["Config"]["Env"]
    assert (up["Config"]["Entrypoint"], up["Path"], up["Args"]) == (None, "sleep", ["300"])
    assert up["HostConfig"]["RestartPolicy"] == {"Name": "no", "MaximumRetryCount": 0}
    assert up["NetworkSettings"]["IPAddress"] == ""  # --netns none: loopback only
    assert up["Ctrexec"]["group"] == "pst-g" and up["Ctrexec"]["pid"] == state["Pid"]
    assert (done["State"]["Status"], done["State"]["ExitCode"], done["State"]["Pid"]) == (
        "exited", 3, 0,
    )  # fmt: skip
    assert (
        RFC3339.fullmatch(done["State"]["FinishedAt"]) and done["State"]["FinishedAt"] != ZERO_TIME
    )
    assert done["Ctrexec"]["pid"] is None  # a pid only while it runs
    assert (new["State"]["Status"], new["State"]["StartedAt"]) == ("created", ZERO_TIME)


def test_inspect_templates_as_docker_users_write_them(cli: Cli, three: None) -> None:
    out = cli("inspect", "-f", "{{.State.Status}} {{.State.ExitCode}} {{.State.Pid}}",
              "pst-up", "pst-done", "pst-new")  # fmt: skip
    assert out.returncode == 0, out.stderr
    first, *rest = out.stdout.splitlines()
    pid = int(first.split()[-1])
    assert first == f"running 0 {pid}" and _is_pst_up(pid)
    assert rest == ["exited 3 0", "created 0 0"]
    state = json.loads(cli("inspect", "-f", "{{json .State}}", "pst-done", check=True).stdout)
    assert (state["Status"], state["ExitCode"], state["OOMKilled"]) == ("exited", 3, False)
    env = cli("inspect", "-f", "{{range .Config.Env}}{{println .}}{{end}}", "pst-up", check=True)
    assert "GREETING=hi" in env.stdout.splitlines()
    labels = '{{index .Config.Labels "tier"}}|{{index .Config.Labels "nope"}}|{{.Name}}'
    assert cli("inspect", "-f", labels, "pst-up", check=True).stdout == "web||/pst-up\n"
    cond = "{{if .State.Running}}up{{else}}down ({{.State.ExitCode}}){{end}}"
    assert cli("inspect", "-f", cond, "pst-up", "pst-done").stdout == "up\ndown (3)\n"
    out = cli("inspect", "-f", "{{.State.ExitCode}}", "pst-done", "nosuch")
    assert (out.returncode, out.stdout) == (1, "3\n")
    assert out.stderr == "ctrexec: No such container: nosuch\n"
    ps = cli(
        "ps", "-a", "-f", "name=pst-", "--format", '{{if eq .State "exited"}}{{.Names}}{{end}}'
    )
    assert [line for line in ps.stdout.splitlines() if line] == ["pst-done"]


def test_inspect_refuses_a_bad_template_in_one_line(cli: Cli, three: None) -> None:
    bad = cli("inspect", "-f", "{{.State.Pid", "pst-up", "nosuch")
    assert (bad.returncode, bad.stdout) == (64, "")  # docker inspect's; before any lookup
    assert bad.stderr == "ctrexec: template parsing error: template: :1: unclosed action\n"
    bad = cli("inspect", "-f", "{{.Nope}}", "pst-up")
    assert (bad.returncode, bad.stdout) == (1, "")  # docker's for one that fails as it runs
    assert bad.stderr == (
        'ctrexec: template parsing error: template: :1: executing "" at <.Nope>: '
        'map has no entry for key "Nope"\n'
    )
    bad = cli("inspect", "-f", "{{nosuch .Id}}", "pst-up")
    assert bad.returncode == 64 and 'function "nosuch" not defined' in bad.stderr
