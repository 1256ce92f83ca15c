"""docker's smaller behaviours through the real binary: read-only host files with
``--read-only``, the primary group in ``id``, ``top`` with ps options, ``ps --format
json``, ``stats --format`` and its I/O columns, ``attach`` to a task without -i/-t."""

from __future__ import annotations

import pytest
from _cli import Cli

pytestmark = pytest.mark.integration


def _run(cli: Cli, made: list[str], name: str, *argv: str) -> None:
    made.append(name)
    out = cli("run", "-d", "--name", name, *argv)
    assert out.returncode == 0, out.stderr


def test_read_only_makes_the_host_files_read_only(
    cli: Cli, test_image: str, made: list[str]
) -> None:
    _run(cli, made, "ps-ro", "--read-only", test_image, "sleep", "300")
    _run(cli, made, "ps-rw", test_image, "sleep", "300")
    for path in ("/etc/hosts", "/etc/hostname", "/etc/resolv.conf"):
        out = cli("exec", "ps-ro", "sh", "-c", f"echo x >> {path}")
        assert out.returncode != 0, path
        assert "Read-only file system" in out.stderr, out.stderr
    # without --read-only, /etc/hosts stays writable, as docker's
    out = cli("exec", "ps-rw", "sh", "-c", "echo '10.9.9.9 added' >> /etc/hosts; cat /etc/hosts")
    assert out.returncode == 0, out.stderr
    assert "10.9.9.9 added" in out.stdout
