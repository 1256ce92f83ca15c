"""``push`` through the real CLI to a real registry (Debian's docker-registry on
127.0.0.1): push, remove, pull back, and the same digests; docker's lines and errors.

Each test works in a namespace of its own (test_archives' ``ns``), emptied and removed;
each registry is the module's own, on a port it picked, and is stopped at the end.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import test_archives
from _cli import Cli
from _registry import PASSWORD, USER, Registry

from ctrexec.containerd import content
from ctrexec.containerd.client import Client
from ctrexec.containerd.content import Descriptor
from ctrexec.images import lookup

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "docker.io/library/ctrexec-test:latest"  # build-test-image's name

ns = test_archives.ns  # the fixture, under its name here


@pytest.fixture(scope="module")
def index_archive(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Path, dict[str, str]]]:
    """The test image as a two-platform index (the other platform a data-only one)."""
    base = tmp_path_factory.mktemp("push-images")
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build-test-image"), "--out", str(base / "i.tar"),
         "--platform-index"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    yield base / "i.tar", dict(json.loads(out.stdout))
    shutil.rmtree(base)


def _registry(base: Path, *, auth: bool = False) -> Iterator[Registry]:
    reg = Registry(base, auth=auth)
    reg.start()
    try:
        yield reg
    finally:
        reg.stop()
        shutil.rmtree(reg.base)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    yield from _registry(tmp_path_factory.mktemp("push-registry"))


@pytest.fixture(scope="module")
def auth_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    yield from _registry(tmp_path_factory.mktemp("push-registry-auth"), auth=True)


@pytest.fixture
def docker_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty DOCKER_CONFIG for the CLI: no credentials of the machine leak in."""
    d = tmp_path / "docker"
    d.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(d))
    return d


def _run(cli: Cli, ns: Client, *args: str) -> subprocess.CompletedProcess[str]:
    return cli(*args, namespace=ns.namespace, timeout=300)


def _registry_manifest(reg: Registry, repo: str, reference: str) -> bytes:
    accept = "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json"
    req = urllib.request.Request(
        f"http://{reg.host}/v2/{repo}/manifests/{reference}", headers={"Accept": accept}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return bytes(resp.read())


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_push_every_platform_then_pull_back_the_same_digest(
    cli: Cli,
    ns: Client,
    registry: Registry,
    index_archive: tuple[Path, dict[str, str]],
    docker_config: Path,
) -> None:
    archive, summary = index_archive
    assert _run(cli, ns, "import", "-q", "--all-platforms", str(archive)).returncode == 0
    dest = f"{registry.host}/cx/all:v1"
    assert _run(cli, ns, "tag", IMAGE, dest).returncode == 0
    size = lookup.get_image(ns, dest).target.size

    pushed = _run(cli, ns, "push", dest)
    assert pushed.returncode == 0, pushed.stderr
    assert pushed.stdout == f"v1: digest: {summary['target']} size: {size}\n"
    lines = pushed.stderr.splitlines()
    assert lines[0] == f"The push refers to repository [{registry.host}/cx/all]"
    assert f"{summary['layer'][7:19]}: Pushed" in lines
    assert "only the" not in pushed.stderr
    index = _registry_manifest(registry, "cx/all", "v1")
    assert _sha(index) == summary["target"]
    other = _registry_manifest(registry, "cx/all", summary["other_manifest"])
    assert _sha(other) == summary["other_manifest"]  # every platform went

    again = _run(cli, ns, "push", dest)
    assert again.returncode == 0, again.stderr
    assert f"{summary['layer'][7:19]}: Layer already exists" in again.stderr.splitlines()
    assert ": Pushed" not in again.stderr

    assert _run(cli, ns, "rmi", dest, IMAGE).returncode == 0
    back = _run(cli, ns, "pull", dest)
    assert back.returncode == 0, back.stderr
    assert back.stdout == f"{dest} {summary['target']}\n"
    assert lookup.get_image(ns, dest).manifest.digest == summary["manifest"]


def _store_unheld(ns: Client, archive: Path, manifest: str, lease: str) -> None:
    """Write ``manifest`` and its blobs from the archive into the namespace, held only by
    ``lease``, with no GC label of the image's naming them."""
    with tarfile.open(archive) as tar:

        def blob(digest: str) -> bytes:
            member = tar.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}")
            assert member is not None
            return member.read()

        body = blob(manifest)
        obj = json.loads(body)
        wanted = [(manifest, body)]
        wanted += [
            (d, blob(d)) for d in [obj["config"]["digest"]] + [x["digest"] for x in obj["layers"]]
        ]
    for digest, data in wanted:
        desc = Descriptor("", digest, len(data))
        session = content.WriteSession(ns, f"ctrexec-test-unheld-{digest[7:19]}", lease)
        offset = content.begin_write(session, desc, {})
        if offset is None:
            continue  # the namespace has it already (the session is dropped)
        offset = session.write(offset, [data[offset:]], desc)
        session.commit(desc, offset, {})
        session.finish()
    assert all(content.exists(ns, d) for d, _ in wanted)


def test_push_of_an_index_missing_platforms_sends_the_hosts_manifest(
    cli: Cli,
    ns: Client,
    registry: Registry,
    index_archive: tuple[Path, dict[str, str]],
    docker_config: Path,
) -> None:
    archive, summary = index_archive
    assert _run(cli, ns, "import", "-q", str(archive)).returncode == 0  # host's platform only
    dest = f"{registry.host}/cx/host-only:v1"
    assert _run(cli, ns, "tag", IMAGE, dest).returncode == 0
    with ns.lease() as lease:
        # The other platform's blobs in the store but not the image's, as a host-only
        # import leaves them until the next GC: the push must not take them for its own
        # (it did, and failed when the GC took one mid-push; CI, 1.7).
        _store_unheld(ns, archive, summary["other_manifest"], lease.id)
        pushed = _run(cli, ns, "push", dest)
    assert pushed.returncode == 0, pushed.stderr
    manifest = lookup.get_image(ns, dest).manifest
    assert manifest.digest == summary["manifest"]
    assert pushed.stdout == f"v1: digest: {manifest.digest} size: {manifest.size}\n"
    assert "manifest is pushed: not every platform of its index" in pushed.stderr
    assert _sha(_registry_manifest(registry, "cx/host-only", "v1")) == manifest.digest

    assert _run(cli, ns, "rmi", dest, IMAGE).returncode == 0
    back = _run(cli, ns, "pull", dest)
    assert back.returncode == 0, back.stderr
    assert back.stdout == f"{dest} {manifest.digest}\n"


def test_push_of_a_missing_image_is_dockers_one_line(
    cli: Cli, ns: Client, registry: Registry, docker_config: Path
) -> None:
    ref = f"{registry.host}/cx/nothing:v1"
    out = _run(cli, ns, "push", ref)
    assert out.returncode == 1
    assert out.stderr == f"ctrexec: An image does not exist locally with the tag: {ref}\n"
    assert out.stdout == ""


def test_push_needs_credentials_and_takes_dockers_config(
    cli: Cli,
    ns: Client,
    auth_registry: Registry,
    index_archive: tuple[Path, dict[str, str]],
    docker_config: Path,
) -> None:
    archive, summary = index_archive
    assert _run(cli, ns, "import", "-q", str(archive)).returncode == 0
    dest = f"{auth_registry.host}/private/cx:v1"
    assert _run(cli, ns, "tag", IMAGE, dest).returncode == 0
    refused = _run(cli, ns, "push", "-q", dest)
    assert refused.returncode == 125
    assert refused.stderr.startswith(f"ctrexec: registry http://{auth_registry.host}"), refused
    assert "authentication required" in refused.stderr
    assert f"ctrexec login {auth_registry.host}" in refused.stderr
    assert len(refused.stderr.splitlines()) == 1

    login = subprocess.run(
        [sys.executable, "-m", "ctrexec.cli.main", "login", "-u", USER, "--password-stdin",
         auth_registry.host],
        input=PASSWORD + "\n", capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert login.returncode == 0, login.stderr
    pushed = _run(cli, ns, "push", "-q", dest)
    assert pushed.returncode == 0, pushed.stderr
    assert (pushed.stdout, pushed.stderr) == (
        f"v1: digest: {summary['manifest']} size: {lookup.get_image(ns, dest).manifest.size}\n",
        "",
    )
