"""``ps`` and ``inspect`` as a docker user reads them, through the real binary."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator

import pytest
from _cli import Cli

pytestmark = pytest.mark.integration


@pytest.fixture
def three(cli: Cli, test_image: str) -> Iterator[None]:
    """pst-up (running, label tier=web, group pst-g), pst-done (exited 3), pst-new (created)."""
    runs = [
        ("run", "-d", "--name", "pst-up", "-l", "tier=web", "--group", "pst-g",
         test_image, "sleep", "300"),
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
    assert bad.returncode == 125 and "unknown field .Nope" in bad.stderr
    bad = cli("ps", "--filter", "colour=red")
    assert bad.returncode == 125 and "invalid filter 'colour=red'" in bad.stderr


def test_inspect_fields_and_template(cli: Cli, three: None) -> None:
    up, done = json.loads(cli("inspect", "pst-up", "pst-done").stdout)
    assert up["pid"] > 0 and done["pid"] is None  # a pid only while it runs
    assert up["started_at"] and up["finished_at"] is None
    assert done["started_at"] and done["finished_at"]
    assert (done["exit_code"], done["oom_killed"], done["restart_count"]) == (3, False, 0)
    assert up["addresses"] == [] and up["ports"] == []  # --netns none: loopback only
    out = cli("inspect", "-f", "{{.State.Pid}} {{.State.Status}} {{.exit_code}}", "pst-up")
    assert out.stdout == f"{up['pid']} running <no value>\n"  # Go's text for a null
    out = cli(
        "inspect", "-f", "{{.State.ExitCode}} {{json .State.OOMKilled}}", "pst-done", "nosuch"
    )
    assert (out.returncode, out.stdout) == (1, "3 false\n")
    assert out.stderr == "ctrexec: No such container: nosuch\n"
    bad = cli("inspect", "-f", "{{.Nope}}", "pst-up")
    assert bad.returncode == 1 and "no field .Nope" in bad.stderr
