"""Where ctrexec's verbs answer as docker's do, through the real binary: ``wait`` of a
container never started, the exit code of a missing container, ``stats``' CPU %."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator

import pytest
from _cli import Cli

pytestmark = pytest.mark.integration


@pytest.fixture
def made(cli: Cli) -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    if names:
        with contextlib.suppress(Exception):
            cli("rm", "-f", *names)


def test_wait_of_a_created_container_waits_for_its_start_and_exit(
    cli: Cli, test_image: str, made: list[str]
) -> None:
    made.append("dp-later")
    out = cli("create", "--name", "dp-later", test_image, "sh", "-c", "exit 7")
    assert out.returncode == 0, out.stderr
    argv = cli.argv("wait", "dp-later")
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.poll() is None  # nothing to report before a start
            start = cli("start", "dp-later")
            assert start.returncode == 0, start.stderr
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert (proc.returncode, stdout, stderr) == (0, "7\n", "")
