"""docker's ``run``/``create --platform``, through the real binary, with the test image's
two-platform index (scripts/build-test-image --platform-index): the host's manifest,
and a data-only one for another architecture whose layer holds only
``/etc/ctrexec-platform``. Running a foreign binary needs binfmt, which a test machine
may lack, so the foreign variant is created and read through ``cp``, never started."""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import Cli

from ctrexec.containerd.content import Platform

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def index_image(cli: Cli, tmp_path: Path) -> Iterator[str]:
    """A two-platform image of its own name, both platforms' content imported; removed
    after the test (its containers first)."""
    name = f"docker.io/library/cx-platform-{secrets.token_hex(4)}:v1"
    archive = tmp_path / "index.tar"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build-test-image"), "--out", str(archive),
         "--name", name, "--platform-index"],
        check=True, capture_output=True,
    )  # fmt: skip
    out = cli("import", "-q", "--all-platforms", str(archive))
    assert out.returncode == 0, out.stderr
    yield name
    gone = cli("rmi", name)
    assert gone.returncode == 0, gone.stderr


def _other() -> Platform:
    """The index's data-only platform (build-test-image's other_platform)."""
    return Platform.parse("linux/arm64" if Platform.host().architecture == "amd64" else "amd64")


def test_create_picks_the_platform_asked_for(cli: Cli, index_image: str, tmp_path: Path) -> None:
    try:
        other = _other()
        out = cli("create", "--pull", "never", "--name", "pf-other", "--platform", str(other),
                  index_image)  # fmt: skip
        assert out.returncode == 0, out.stderr
        # The rootfs is the foreign manifest's layer: its marker names its architecture.
        dest = tmp_path / "marker"
        copied = cli("cp", "pf-other:/etc/ctrexec-platform", str(dest))
        assert copied.returncode == 0, copied.stderr
        assert dest.read_text() == f"{other.architecture}\n"
    finally:
        cli("rm", "-f", "pf-other")


def test_run_with_the_host_platform_runs_the_host_variant(cli: Cli, index_image: str) -> None:
    host = Platform.host()
    out = cli("run", "--rm", "--pull", "never", "--platform", str(host), index_image,
              "cat", "/etc/ctrexec-platform")  # fmt: skip
    assert (out.returncode, out.stdout) == (0, f"{host.architecture}\n"), out.stderr


def test_a_platform_the_image_lacks_creates_nothing(cli: Cli, index_image: str) -> None:
    out = cli("create", "--pull", "never", "--name", "pf-missing", "--platform", "linux/s390x",
              index_image)  # fmt: skip
    assert out.returncode == 125, out.stderr
    assert "has no manifest for platform linux/s390x" in out.stderr
    assert cli("inspect", "pf-missing").returncode == 1


def test_an_invalid_platform_is_refused_before_anything(cli: Cli, test_image: str) -> None:
    out = cli("run", "--rm", "--name", "pf-invalid", "--platform", "linux/arm64/v8/x",
              test_image, "true")  # fmt: skip
    assert (out.returncode, out.stderr) == (
        125,
        "ctrexec: invalid value 'linux/arm64/v8/x' for --platform: invalid platform "
        "'linux/arm64/v8/x': use os/arch[/variant]\n",
    ), out.stderr
    assert cli("inspect", "pf-invalid").returncode == 1
