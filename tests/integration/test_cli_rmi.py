"""``rmi`` refuses an image a container uses, unless ``-f``, through the real binary."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator

import pytest
from _cli import TEST_NAMESPACE, Cli

pytestmark = pytest.mark.integration

IN_USE = "docker.io/library/ctrexec-rmi-used:v1"
SPARE = "docker.io/library/ctrexec-rmi-spare:v1"


@pytest.fixture
def tags(cli: Cli, test_image: str) -> Iterator[None]:
    """Two more names for the test image (the session's own name is left alone)."""
    ctr = ["ctr", "--address", cli.address, "--namespace", TEST_NAMESPACE, "images"]
    for tag in (IN_USE, SPARE):
        subprocess.run([*ctr, "tag", "--force", test_image, tag], check=True, capture_output=True)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            cli("rm", "-f", "rmi-user")
        subprocess.run([*ctr, "rm", IN_USE, SPARE], check=False, capture_output=True)


def _names(cli: Cli) -> set[str]:
    return {i["name"] for i in json.loads(cli("images", "--json").stdout)}


def test_rmi_refuses_an_image_in_use(cli: Cli, tags: None) -> None:
    run = cli("run", "-d", "--name", "rmi-user", IN_USE, "sleep", "300")
    assert run.returncode == 0, run.stderr
    out = cli("rmi", IN_USE, SPARE)
    assert (out.returncode, out.stdout) == (1, f"{SPARE}\n")
    assert out.stderr == (
        f"ctrexec: image {IN_USE} is in use by container rmi-user "
        "(remove the container first, or force with rmi -f)\n"
    )
    assert IN_USE in _names(cli) and SPARE not in _names(cli)
    forced = cli("rmi", "-f", IN_USE)
    assert (forced.returncode, forced.stdout) == (0, f"{IN_USE}\n"), forced.stderr
    assert IN_USE not in _names(cli)
    assert cli("exec", "rmi-user", "true").returncode == 0  # the container runs on
