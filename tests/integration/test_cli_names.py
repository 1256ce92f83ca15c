"""Containers named by a unique prefix, as docker takes an id's, through the real binary.

``ps`` cuts every id to 12 characters (a generated name has 16), so what it prints
must be something every verb accepts: ``rm -f $(ps -aq)``.
"""

from __future__ import annotations

import json

import pytest
from _cli import Cli

from ctrexec.testing import wait_for

pytestmark = pytest.mark.integration


def _ok(out: object) -> None:
    assert getattr(out, "returncode", None) == 0, getattr(out, "stderr", out)


def test_rm_of_ps_quiet_removes_generated_names(cli: Cli, test_image: str) -> None:
    label = "nm-generated=1"
    made = cli("run", "-d", "-l", label, test_image, "sleep", "300")
    _ok(made)
    full = made.stdout.strip()
    try:
        assert len(full) > 12  # ctrexec-XXXXXXXX: longer than docker's cut
        quiet = cli("ps", "-aq", "-f", f"label={label}").stdout.split()
        assert quiet == [full]  # whole: a name's first 12 characters may be another's
        untrimmed = cli("ps", "-aq", "--no-trunc", "-f", f"label={label}").stdout.split()
        assert untrimmed == [full]
        out = cli("rm", "-f", *quiet)
        assert (out.returncode, out.stdout, out.stderr) == (0, f"{full}\n", "")
        assert cli("inspect", full).returncode == 1
    finally:
        cli("rm", "-f", full)


def test_every_verb_takes_a_unique_prefix(cli: Cli, test_image: str, made: list[str]) -> None:
    made += ["nm-uniq-sleeper", "nm-uniq-renamed"]
    _ok(cli("run", "-d", "--name", "nm-uniq-sleeper", test_image, "sleep", "300"))
    prefix = "nm-uniq-s"
    assert cli("exec", prefix, "echo", "hi").stdout == "hi\n"
    data = json.loads(cli("inspect", prefix).stdout)
    assert [d["Id"] for d in data] == ["nm-uniq-sleeper"]
    assert cli("inspect", "-f", "{{.Id}}", prefix).stdout == "nm-uniq-sleeper\n"
    for argv in (
        ("logs", prefix), ("top", prefix), ("port", prefix), ("stats", "--no-stream", prefix),
        ("pause", prefix), ("unpause", prefix), ("kill", "-s", "SIGCONT", prefix),
        ("restart", "-t", "0", prefix),
    ):  # fmt: skip
        _ok(cli(*argv))
    assert "nm-uniq-sleeper" in cli("stats", "--no-stream", prefix).stdout
    stop = cli("stop", "-t", "0", prefix)
    assert (stop.returncode, stop.stdout) == (0, f"{prefix}\n")  # the word given, as docker
    assert cli("wait", prefix).stdout.strip().isdigit()
    _ok(cli("start", prefix))
    _ok(cli("stop", "-t", "0", prefix))
    _ok(cli("rename", prefix, "nm-uniq-renamed"))
    assert cli("inspect", "nm-uniq-sleeper").returncode == 1
    _ok(cli("start", "nm-uniq-r"))
    wait_for(
        lambda: '"running"' in cli("inspect", "-f", "{{json .State.Status}}", "nm-uniq-r").stdout,
        timeout=30,
        what="nm-uniq-renamed to run",
    )
    _ok(cli("rm", "-f", "nm-uniq-r"))
    assert cli("inspect", "nm-uniq-renamed").returncode == 1


def test_exact_name_wins_and_ambiguous_prefix_is_refused(
    cli: Cli, test_image: str, made: list[str]
) -> None:
    made += ["nm-amb", "nm-amb-1", "nm-amb-2"]
    for name in made:
        _ok(cli("create", "--name", name, test_image, "true"))
    exact = cli("inspect", "-f", "{{.Id}}", "nm-amb")  # also the start of the two others
    assert (exact.returncode, exact.stdout) == (0, "nm-amb\n")
    refusal = "ctrexec: multiple IDs found with provided prefix: nm-amb-\n"
    for argv in (
        ("inspect", "nm-amb-"), ("logs", "nm-amb-"), ("exec", "nm-amb-", "true"),
        ("top", "nm-amb-"), ("port", "nm-amb-"), ("rename", "nm-amb-", "nm-amb-3"),
        ("stats", "--no-stream", "nm-amb-"), ("start", "nm-amb-"), ("rm", "nm-amb-"),
        ("wait", "nm-amb-"), ("attach", "nm-amb-"),
    ):  # fmt: skip
        out = cli(*argv)
        printed = "[]\n" if argv[0] == "inspect" else ""  # docker prints those it found
        assert (out.returncode, out.stdout, out.stderr) == (1, printed, refusal), argv
    both = cli("rm", "nm-amb-", "nm-amb-1")  # the other names are still acted on
    assert (both.returncode, both.stdout, both.stderr) == (1, "nm-amb-1\n", refusal)
    gone = cli("rm", "nm-amb-9")
    assert (gone.returncode, gone.stderr) == (1, "ctrexec: No such container: nm-amb-9\n")
    ids = json.loads(cli("ps", "-a", "--json", "-f", "name=nm-amb").stdout)
    assert sorted(i["id"] for i in ids) == ["nm-amb", "nm-amb-2"]
