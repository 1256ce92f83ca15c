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


COMMITTED = "docker.io/library/ctrexec-rmi-id"


def test_rmi_of_an_id_checks_every_name_before_removing_any(cli: Cli, test_image: str) -> None:
    """An ID named three times in one repository, its middle name in use: refused whole,
    every name kept (each name used to be checked as it went, after the earlier ones
    were already removed)."""
    ctr = ["ctr", "--address", cli.address, "--namespace", TEST_NAMESPACE, "images"]
    names = [f"{COMMITTED}:{t}" for t in ("a", "b", "c")]
    try:
        assert cli("create", "--name", "rmi-id-src", test_image, "true").returncode == 0
        commit = cli("commit", "rmi-id-src", names[0])
        assert commit.returncode == 0, commit.stderr
        image_id = commit.stdout.strip()
        for name in names[1:]:
            subprocess.run([*ctr, "tag", "--force", names[0], name], check=True)
        run = cli("run", "-d", "--name", "rmi-id-user", names[1], "sleep", "300")
        assert run.returncode == 0, run.stderr
        out = cli("rmi", image_id)
        assert out.returncode == 1, out.stdout
        assert "is in use by container rmi-id-user" in out.stderr, out.stderr
        assert set(names) <= _names(cli)
    finally:
        for box in ("rmi-id-user", "rmi-id-src"):
            with contextlib.suppress(Exception):
                cli("rm", "-f", box)
        subprocess.run([*ctr, "rm", *names], check=False, capture_output=True)
