"""docker's meaning of a flag inside a subcommand, through the real binary and containerd."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from _cli import CLI_PROG, TEST_NAMESPACE, Cli

from ctrexec.containerd import containers
from ctrexec.containerd.client import Client

pytestmark = pytest.mark.integration


@pytest.fixture
def printer(cli: Cli, test_image: str) -> Iterator[str]:
    """An exited task that printed the lines 1 to 5."""
    out = cli("run", "--name", "fl-five", test_image, "seq", "1", "5")
    assert out.returncode == 0, out.stderr
    yield "fl-five"
    with contextlib.suppress(Exception):
        cli("rm", "-f", "fl-five")


def test_logs_n_is_tail(cli: Cli, printer: str) -> None:
    out = cli("logs", "-n", "2", printer)
    assert (out.returncode, out.stdout) == (0, "4\n5\n"), out.stderr
    assert cli("logs", "--tail", "all", printer).stdout == "1\n2\n3\n4\n5\n"
    assert cli("logs", "--tail", "0", printer).stdout == ""
    bad = cli("logs", "--tail", "some", printer)
    assert bad.returncode == 125
    assert bad.stderr == (
        "ctrexec: logs: argument -n/--tail: expected a number of lines or all, got 'some'\n"
    )


def test_logs_namespace_is_long_or_capital_n(cli: Cli, printer: str) -> None:
    argv = [*CLI_PROG, "logs", "--address", cli.address, "-N", TEST_NAMESPACE, printer]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert (out.returncode, out.stdout) == (0, "1\n2\n3\n4\n5\n"), out.stderr


def test_cpus_zero_means_no_limit(cli: Cli, client: Client, test_image: str) -> None:
    def cpu_of(name: str, cpus: str) -> dict[str, Any]:
        out = cli("create", "--name", name, "--cpus", cpus, test_image, "true")
        assert out.returncode == 0, out.stderr
        try:
            cpu: dict[str, Any] = containers.get(client, name).spec["linux"]["resources"]
            return cpu.get("cpu", {})
        finally:
            cli("rm", name)

    assert "quota" not in cpu_of("fl-cpus0", "0")
    assert cpu_of("fl-cpus-half", "0.5") == {"quota": 50000, "period": 100000}
    bad = cli("run", "--rm", "--cpus", "-1", test_image, "true")
    assert bad.returncode == 125
    assert "CPU count must be between 0.01 and " in bad.stderr, bad.stderr


def test_help_shows_the_defaults_in_force(cli: Cli) -> None:
    env = {**os.environ, "CONTAINERD_ADDRESS": cli.address, "CTREXEC_NAMESPACE": "fl-ns"}
    out = subprocess.run(
        [*CLI_PROG, "ps", "--help"], capture_output=True, text=True, env=env, check=True
    )
    text = "".join(out.stdout.split())  # argparse wraps lines, even inside a path
    assert f"(default:{cli.address},from$CONTAINERD_ADDRESS)" in text
    assert "(default:fl-ns,from$CTREXEC_NAMESPACE)" in text
    run_help = subprocess.run(
        [*CLI_PROG, "run", "--help"], capture_output=True, text=True, check=True
    )
    assert "--stop-timeoutSTOP_TIMEOUT(default:10.0)" in "".join(run_help.stdout.split())
