"""docker's image verbs over ctrexec's archives and records: ``save``/``load`` (export and
import under docker's names and flags) and ``tag``, through the real CLI.

Each test works in a namespace of its own (test_archives' ``ns``), emptied and removed.
"""

from __future__ import annotations

import io
import json
import os
import secrets
import subprocess
import tarfile
from pathlib import Path

import test_archives
from _cli import Cli

from ctrexec.containerd import images
from ctrexec.containerd.client import Client
from ctrexec.images import lookup

ns = test_archives.ns  # the fixture, under its name here


def _run(
    cli: Cli, ns: Client, *args: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        cli.argv(*args, namespace=ns.namespace),
        input=stdin,
        capture_output=True,
        timeout=120,
        check=False,
    )


def _variant(cli: Cli, ns: Client, archive: Path, tmp: Path, word: str) -> tuple[str, str]:
    """A fresh image of the test image plus a marker layer: (short name, marker)."""
    marker = secrets.token_hex(6)
    short = f"cx-{word}-{marker}:v1"
    test_archives.build_oci_variant(archive, tmp / "v.tar", f"docker.io/library/{short}", marker)
    out = _run(cli, ns, "import", "-q", str(tmp / "v.tar"))
    assert out.returncode == 0, out.stderr
    return short, marker


def _marker(ns: Client, name: str) -> bytes:
    image = lookup.get_image(ns, name)
    return images.read_rootfs_files(ns, image, ["/etc/marker"])["/etc/marker"]


def test_save_then_load_from_file_and_stdin(
    cli: Cli, ns: Client, test_image_archive: Path, tmp_path: Path
) -> None:
    name, marker = _variant(cli, ns, test_image_archive, tmp_path, "save")
    digest = lookup.get_image(ns, name).digest
    saved = _run(cli, ns, "save", "-o", str(tmp_path / "s.tar"), name)
    assert (saved.returncode, saved.stdout, saved.stderr) == (0, b"", b"")
    piped = _run(cli, ns, "save", name)  # stdout is a pipe here: allowed
    assert piped.returncode == 0, piped.stderr
    with tarfile.open(fileobj=io.BytesIO(piped.stdout)) as tar:
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
    assert index["manifests"][0]["digest"] == digest

    for how in (("load", "-i", str(tmp_path / "s.tar")), ("load", "-q")):
        assert _run(cli, ns, "rmi", name).returncode == 0
        stdin = None if "-i" in how else piped.stdout
        loaded = _run(cli, ns, *how, stdin=stdin)
        assert loaded.returncode == 0, loaded.stderr
        assert loaded.stdout.decode() == f"Loaded image: {name}\n"  # docker's short form
        assert lookup.get_image(ns, name).digest == digest
        assert _marker(ns, name) == marker.encode()


def test_save_refuses_a_terminal_as_docker_does(cli: Cli, ns: Client, test_image: str) -> None:
    leader, follower = os.openpty()
    try:
        out = subprocess.run(
            cli.argv("save", test_image, namespace=ns.namespace),
            stdout=follower,
            stderr=subprocess.PIPE,
            timeout=120,
            check=False,
        )
    finally:
        os.close(follower)
        os.close(leader)
    assert out.returncode == 125
    assert out.stderr.decode() == (
        "ctrexec: cowardly refusing to save to a terminal. Use the -o flag or redirect\n"
    )


def test_tag_adds_a_name_and_rmi_of_one_keeps_the_other(
    cli: Cli, ns: Client, test_image_archive: Path, tmp_path: Path
) -> None:
    name, marker = _variant(cli, ns, test_image_archive, tmp_path, "tag")
    image = lookup.get_image(ns, name)
    other = f"127.0.0.1:5000/cx/other-{marker}:v2"
    tagged = _run(cli, ns, "tag", name, other)
    assert (tagged.returncode, tagged.stdout, tagged.stderr) == (0, b"", b"")
    by_id = f"cx-by-id-{marker}"
    assert _run(cli, ns, "tag", image.config_digest[7:19], by_id).returncode == 0
    listed = json.loads(_run(cli, ns, "images", "--json").stdout)
    digests = {i["name"]: i["digest"] for i in listed}
    assert digests == {
        f"docker.io/library/{name}": image.digest,
        other: image.digest,
        f"docker.io/library/{by_id}:latest": image.digest,
    }

    assert _run(cli, ns, "rmi", name, by_id).returncode == 0
    assert _marker(ns, other) == marker.encode()  # the content stayed with the other name
    ran = _run(cli, ns, "run", "--rm", other, "cat", "/etc/marker")
    assert (ran.returncode, ran.stdout) == (0, marker.encode()), ran.stderr


def test_tag_errors_are_dockers(cli: Cli, ns: Client, test_image: str) -> None:
    missing = _run(cli, ns, "tag", "cx-nothing:here", "cx-new:v1")
    assert missing.returncode == 1
    assert missing.stderr.decode() == "ctrexec: No such image: cx-nothing:here\n"
    bad = _run(cli, ns, "tag", test_image, "Bad:Name")
    assert bad.returncode == 1  # docker's
    assert "invalid reference format" in bad.stderr.decode()
    assert len(bad.stderr.decode().splitlines()) == 1
    assert images.list_images(ns) == []  # nothing was made
