"""The exit codes where docker gives 1 (issue 37), through the real binary: a template
that fails, an exec on a stopped or paused container, ``run`` with no arguments, a tag
to a bad reference, a pull from an unreachable registry."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from _cli import Cli
from _nethelpers import free_port

pytestmark = pytest.mark.integration

UP, DONE = "exitc-up", "exitc-done"


@pytest.fixture
def two(cli: Cli, test_image: str) -> Iterator[None]:
    try:
        assert cli("run", "-d", "--name", UP, test_image, "sleep", "300").returncode == 0
        assert cli("run", "--name", DONE, test_image, "true").returncode == 0
        yield
    finally:
        with contextlib.suppress(Exception):
            cli("rm", "-f", UP, DONE)


def test_template_errors_exit_as_docker_s(cli: Cli, two: None) -> None:
    parse = cli("inspect", "-f", "{{.State.Pid", UP)
    assert (parse.returncode, parse.stdout) == (64, "")  # docker inspect's own code
    assert parse.stderr.startswith("ctrexec: template parsing error: ")
    run = cli("inspect", "-f", "{{.Nope}}", UP)
    assert (run.returncode, run.stdout) == (1, "")
    assert 'map has no entry for key "Nope"' in run.stderr
    for bad in ("{{.Nope}}", "{{.ID"):
        ps = cli("ps", "--format", bad)
        assert (ps.returncode, ps.stdout) == (1, ""), ps.stderr
        assert ps.stderr.startswith("ctrexec: "), ps.stderr


def test_exec_on_a_stopped_or_paused_container_exits_1(cli: Cli, two: None) -> None:
    stopped = cli("exec", DONE, "true")
    assert (stopped.returncode, stopped.stderr) == (
        1, f"ctrexec: container {DONE} is not running\n",
    )  # fmt: skip
    assert cli("pause", UP).returncode == 0
    try:
        paused = cli("exec", UP, "true")
        assert (paused.returncode, paused.stderr) == (
            1, f"ctrexec: container {UP} is paused, unpause the container before exec\n",
        )  # fmt: skip
        detached = cli("exec", "-d", UP, "true")
        assert detached.returncode == 1 and "is paused" in detached.stderr
    finally:
        cli("unpause", UP)


def test_run_with_no_arguments_exits_1(cli: Cli) -> None:
    for verb in ("run", "create"):
        out = cli(verb)
        assert (out.returncode, out.stdout) == (1, ""), out.stderr
        assert out.stderr.startswith(f"ctrexec: 'ctrexec {verb}' requires at least 1 argument")
    flag = cli("run", "--no-such-flag", "x")  # a bad flag stays docker's 125
    assert flag.returncode == 125


def test_tag_to_a_bad_reference_exits_1(cli: Cli, test_image: str) -> None:
    out = cli("tag", test_image, "Bad:Ref:x")
    assert (out.returncode, out.stdout) == (1, ""), out.stderr
    assert out.stderr.startswith("ctrexec: ") and len(out.stderr.splitlines()) == 1


def test_pull_from_an_unreachable_registry_exits_1(cli: Cli) -> None:
    ref = f"127.0.0.1:{free_port()}/ctrexec-test/nothing:latest"
    out = cli("pull", ref)
    assert out.returncode == 1, out.stderr
    assert "connection refused" in out.stderr and len(out.stderr.splitlines()) == 1
