"""``rm -f $(ctrexec ps -aq)``, docker's idiom, with names that share their first 12
characters (ctrexec's ids are names): through the real binary, in a namespace of its
own, since the idiom removes everything it lists."""

from __future__ import annotations

import contextlib
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import TEST_NAMESPACE, Cli

from ctrexec.containerd import containers
from ctrexec.containerd.client import Client

pytestmark = pytest.mark.integration

#: Its own namespace: ``ps -aq`` lists all of it, and the rm removes all of that.
NAMESPACE = f"{TEST_NAMESPACE}-psq"
#: 30 names sharing their first 20 characters (docker's 12-character cut made them one).
SHARED = [f"psq-shared-prefix-20-{n:02d}" for n in range(30)]
#: Members of three groups, each sharing its group's name as a prefix.
GROUPED = [f"psq-shop-{g}-{m}" for g in ("frontend", "backend", "payments") for m in ("web", "api")]


@pytest.fixture
def namespace(containerd_address: str, test_image_archive: Path, cli: Cli) -> Iterator[str]:
    from ctrexec.testing import import_image

    import_image(containerd_address, NAMESPACE, test_image_archive)
    try:
        yield NAMESPACE
    finally:
        with contextlib.suppress(Exception):
            left = cli("ps", "-aq", namespace=NAMESPACE).stdout.split()
            if left:
                cli("rm", "-f", *left, namespace=NAMESPACE)


def test_rm_f_of_ps_aq_removes_names_sharing_12_characters(
    cli: Cli, test_image: str, namespace: str
) -> None:
    for name in SHARED:
        out = cli("create", "--name", name, test_image, "true", namespace=namespace)
        assert (out.returncode, out.stdout) == (0, f"{name}\n"), out.stderr  # whole, reusable
    for name in GROUPED:
        group = name.rsplit("-", 1)[0]
        out = cli("create", "--group", group, "--name", name, test_image, "true",
                  namespace=namespace)  # fmt: skip
        assert (out.returncode, out.stdout) == (0, f"{name}\n"), out.stderr
    listed = cli("ps", "-aq", namespace=namespace)
    assert listed.returncode == 0, listed.stderr
    assert sorted(listed.stdout.split()) == sorted(SHARED + GROUPED)  # each once, whole
    ids = cli("ps", "-a", "--format", "{{.ID}}", namespace=namespace).stdout.split()
    assert sorted(ids) == sorted(SHARED + GROUPED)
    base = cli.argv("rm", namespace=namespace)
    ps = cli.argv("ps", "-aq", namespace=namespace)
    line = f"{shlex.join(base)} -f $({shlex.join(ps)})"
    sh = ["sh", "-c", line]
    done = subprocess.run(sh, check=False, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split()) == sorted(SHARED + GROUPED)
    assert cli("ps", "-aq", namespace=namespace).stdout == ""
    with Client.connect(cli.address, namespace=namespace) as client:  # containerd's word
        assert containers.list_containers(client) == []
