"""``build`` is not ctrexec's job: README says to build with buildah (Debian's) and hand
the result to ``ctrexec load``. This is that path, once, through the real binaries:
``buildah build`` of a Containerfile, ``buildah push`` to an OCI archive, ``ctrexec
load -i``, ``ctrexec run --rm``.

buildah keeps its storage under the test's tmp_path (``--root``, ``--runroot``, the vfs
driver: no mount to leave behind); ``FROM scratch`` plus the host's static busybox, so
nothing is pulled.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import test_archives
from _cli import Cli

from ctrexec.containerd.client import Client

pytestmark = pytest.mark.integration

ns = test_archives.ns  # the fixture, under its name here

BUSYBOX = "/bin/busybox"  # busybox-static, which scripts/setup installs


def _buildah(tmp: Path, *args: str) -> str:
    out = subprocess.run(
        ["buildah", "--root", str(tmp / "root"), "--runroot", str(tmp / "runroot"),
         "--storage-driver", "vfs", *args],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_an_image_built_by_buildah_runs_after_load(cli: Cli, ns: Client, tmp_path: Path) -> None:
    assert shutil.which("buildah"), "buildah is missing: run scripts/setup"
    context = tmp_path / "context"
    context.mkdir()
    shutil.copy(BUSYBOX, context / "busybox")
    (context / "Containerfile").write_text(
        "FROM scratch\nCOPY busybox /bin/busybox\n"
        'CMD ["/bin/busybox", "echo", "built by buildah"]\n'
    )
    ref = "localhost/ctrexec-buildah-test:1"
    _buildah(tmp_path, "build", "-q", "-t", ref, str(context))
    archive = tmp_path / "image.tar"
    _buildah(tmp_path, "push", "-q", ref, f"oci-archive:{archive}:{ref}")

    load = cli("load", "-i", str(archive), namespace=ns.namespace)
    assert load.returncode == 0, load.stderr
    assert load.stdout.strip() == f"Loaded image: {ref}"
    run = cli("run", "--rm", ref, namespace=ns.namespace)
    assert (run.returncode, run.stdout) == (0, "built by buildah\n"), run.stderr
