"""docker's run/create flags of the second parity round, through the real binary:
--env-file, --init."""

from __future__ import annotations

from pathlib import Path

import pytest
from _cli import Cli

from ctrexec.testing import wait_for

pytestmark = pytest.mark.integration


def test_env_file_under_e(cli: Cli, test_image: str, tmp_path: Path) -> None:
    env_file = tmp_path / "app.env"
    env_file.write_text('# settings\nA=from file\nB="quoted"\nC=file\n')
    out = cli(
        "run", "--rm", "--env-file", str(env_file), "-e", "C=flag", test_image,
        "sh", "-c", 'printf "%s|%s|%s\\n" "$A" "$B" "$C"',
    )  # fmt: skip
    assert (out.returncode, out.stdout) == (0, 'from file|"quoted"|flag\n'), out.stderr


def test_env_file_errors_create_nothing(cli: Cli, test_image: str, tmp_path: Path) -> None:
    missing = cli("run", "--rm", "--name", "fl-envfile", "--env-file", "/nonexistent/env",
                  test_image, "true")  # fmt: skip
    assert (missing.returncode, missing.stderr) == (
        125,
        "ctrexec: open /nonexistent/env: no such file or directory\n",
    )
    bad = tmp_path / "bad.env"
    bad.write_text("MY VAR=1\n")
    out = cli("create", "--name", "fl-envfile", "--env-file", str(bad), test_image, "true")
    assert (out.returncode, out.stderr) == (
        125,
        "ctrexec: poorly formatted environment: variable 'MY VAR' contains whitespaces\n",
    )
    assert cli("inspect", "fl-envfile").returncode == 1


#: A subshell that leaves an orphan and exits, so the orphan goes to pid 1; the task's own
#: process then sleeps, never reaping. The orphan ends (and marks that it ran) only once
#: pid 1 is the sleep or the init: before its exec, pid 1 is a shell, which would reap it.
ORPHAN = (
    "(sh -c 'until grep -q -e sleep -e init /proc/1/comm; do sleep 0.1; done;"
    " touch /tmp/orphan-ran' &); exec sleep 1000"
)
#: Each process's state letter (field 3 of /proc/PID/stat), one a line.
STATES = "for f in /proc/[0-9]*/stat; do cut -d' ' -f3 \"$f\"; done 2>/dev/null"


def _zombies(cli: Cli, name: str) -> int | None:
    """How many zombies the task has, once its orphan ran (None before)."""
    if cli("exec", name, "test", "-e", "/tmp/orphan-ran").returncode != 0:
        return None
    out = cli("exec", name, "sh", "-c", STATES)
    assert out.returncode == 0, out.stderr
    return out.stdout.split().count("Z")


def _exit_code(cli: Cli, name: str) -> str:
    out = cli("inspect", "-f", "{{.State.ExitCode}}", name)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_init_reaps_orphans(cli: Cli, made: list[str], test_image: str) -> None:
    made += ["fl-init-reaps", "fl-noinit-keeps"]
    for name, init in (("fl-init-reaps", ["--init"]), ("fl-noinit-keeps", [])):
        out = cli("run", "-d", "--name", name, *init, test_image, "sh", "-c", ORPHAN)
        assert out.returncode == 0, out.stderr
    # Without an init the orphan stays a zombie: the test can see one.
    wait_for(lambda: _zombies(cli, "fl-noinit-keeps") == 1, timeout=60, what="a zombie")
    wait_for(lambda: _zombies(cli, "fl-init-reaps") == 0, timeout=60, what="the orphan reaped")
    top = cli("inspect", "-f", "{{json .Config.Cmd}} {{.Path}}", "fl-init-reaps")
    assert top.stdout.startswith('["sh","-c",'), top.stdout


def test_init_forwards_stop_signal(cli: Cli, made: list[str], test_image: str) -> None:
    """sleep as pid 1 ignores SIGTERM (137 after the timeout); under tini it gets it (143).

    The stop timeout of the --init task is long, so a lost signal would show as 137.
    """
    made += ["fl-init-stop", "fl-noinit-stop"]
    for name, init in (("fl-init-stop", ["--init"]), ("fl-noinit-stop", [])):
        out = cli("run", "-d", "--name", name, *init, test_image, "sleep", "1000")
        assert out.returncode == 0, out.stderr
    assert cli("stop", "-t", "60", "fl-init-stop").returncode == 0
    assert _exit_code(cli, "fl-init-stop") == "143"
    assert cli("stop", "-t", "1", "fl-noinit-stop").returncode == 0
    assert _exit_code(cli, "fl-noinit-stop") == "137"
