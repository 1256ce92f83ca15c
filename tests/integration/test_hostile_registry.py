"""Pulls from a hostile registry through the real CLI (docs/security.md, "Registry
pulls"): each bad answer is refused with one line and exit 1 (docker's for a failed
pull), and the namespace is left empty (no image, blob, ingest or lease); credentials
go only where the rules say.

The registry is tests/integration/_hostile_registry.py's server on 127.0.0.1; a second
one on 127.0.0.2 (another host: another origin) plays the CDN a blob redirect goes to
and the token server. Images are the import tests' OCI variant, each with a marker
layer of its own, so every pull downloads that layer (a blob already on disk in any
namespace would be committed without its bytes).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import test_archives
from _cli import Cli
from _hostile_registry import Server, blob_route, guarded, serve_image
from test_archives import _empty, _members, _refused, build_oci_variant

from ctrexec.containerd import content, images
from ctrexec.containerd.client import Client

#: docker's exit code for any failed pull (README, "Exit codes"), ctrexec's too.
PULL_FAILED = 1
#: The import tests' fixture: a namespace of the test's own, emptied and removed after.
ns = test_archives.ns
USER, PASSWORD = "sin-user", "sin-s3cret"
BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
TOKEN = "sin-token-" + secrets.token_hex(8)


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Server, Server]]:
    """The registry (127.0.0.1) and the other host (127.0.0.2)."""
    with Server("127.0.0.1") as reg, Server("127.0.0.2") as other:
        yield reg, other


@pytest.fixture
def docker_config(tmp_path: Path, servers: tuple[Server, Server]) -> dict[str, str]:
    """The CLI's environment: a DOCKER_CONFIG with the test user for the registry."""
    d = tmp_path / "docker"
    d.mkdir()
    auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    cfg = {"auths": {servers[0].host: {"auth": auth}}}
    (d / "config.json").write_text(json.dumps(cfg))
    return {**os.environ, "DOCKER_CONFIG": str(d)}


def _image(archive: Path, tmp: Path, name: str) -> tuple[tuple[str, str, bytes], dict[str, bytes]]:
    """An OCI variant of the test image: its manifest and its blobs by digest."""
    marker = secrets.token_hex(6)
    out = tmp / f"{marker}.tar"
    build_oci_variant(archive, out, f"docker.io/library/{name}:v1", marker)
    files = _members(out)
    top = json.loads(files["index.json"])["manifests"][0]
    blobs = {
        "sha256:" + p.rsplit("/", 1)[1]: data for p, data in files.items() if p.startswith("blobs/")
    }
    manifest = blobs.pop(top["digest"])
    return (top["mediaType"], top["digest"], manifest), blobs


def _marker_layer(manifest: bytes) -> tuple[str, int]:
    layer = json.loads(manifest)["layers"][-1]
    return layer["digest"], layer["size"]


def _pull(
    cli: Cli, ns: Client, ref: str, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        cli.argv("pull", "-q", *args, ref, namespace=ns.namespace),
        capture_output=True,
        timeout=120,
        check=False,
        env=env,
    )


def _wide_index() -> bytes:
    entry = {
        "mediaType": content.MT_OCI_MANIFEST,
        "size": 500,
        "platform": {"os": "linux", "architecture": "amd64"},
    }
    many = [
        {**entry, "digest": f"sha256:{hashlib.sha256(b'%d' % i).hexdigest()}"} for i in range(10000)
    ]
    return json.dumps(
        {"schemaVersion": 2, "mediaType": content.MT_OCI_INDEX, "manifests": many}
    ).encode()


def _refusals(reg: Server, archive: Path, tmp: Path) -> list[tuple[str, str]]:
    """Set up each bad answer on the registry; (repository, words of the refusal)."""
    mt = {"Content-Type": content.MT_OCI_MANIFEST}
    huge = b" " * (content.MAX_METADATA_BYTES + 1)
    reg.routes["/v2/big/manifests/v1"] = lambda h: h.send(200, huge, mt)
    reg.routes["/v2/stream/manifests/v1"] = lambda h: h.send(200, huge, mt, length=-1)
    reg.routes["/v2/loop/manifests/v1"] = lambda h: h.send(
        302, headers={"Location": "/v2/loop/manifests/v1"}
    )
    wide = _wide_index()
    reg.routes["/v2/wide/manifests/v1"] = lambda h: h.send(
        200, wide, {"Content-Type": content.MT_OCI_INDEX}
    )
    for repo, lie in (("short", "size"), ("flipped", "digest")):
        manifest, blobs = _image(archive, tmp, repo)
        digest, _ = _marker_layer(manifest[2])
        data = blobs[digest]
        if lie == "size":
            reg.routes[f"/v2/{repo}/blobs/{digest}"] = blob_route(data[:-1])
        else:
            mid = len(data) // 2
            reg.routes[f"/v2/{repo}/blobs/{digest}"] = blob_route(
                data[:mid] + bytes([data[mid] ^ 1]) + data[mid + 1 :]
            )
        serve_image(reg, repo, manifest, blobs)
    manifest, blobs = _image(archive, tmp, "blobloop")
    digest, _ = _marker_layer(manifest[2])
    here = f"/v2/blobloop/blobs/{digest}"
    reg.routes[here] = lambda h: h.send(307, headers={"Location": here})
    serve_image(reg, "blobloop", manifest, blobs)
    return [
        ("blobloop", "more than 10 redirects"),
        ("big", "larger than 32 MiB: refused"),
        ("stream", "larger than 32 MiB: refused"),
        ("loop", "more than 10 redirects"),
        ("wide", "lists 10000 manifests, more than 1000"),
        ("short", "bytes there, the manifest says"),
        ("flipped", "unexpected commit digest"),
    ]


def test_hostile_registry_answers_are_refused_and_leave_nothing(
    cli: Cli,
    ns: Client,
    servers: tuple[Server, Server],
    docker_config: dict[str, str],
    test_image_archive: Path,
    tmp_path: Path,
) -> None:
    reg, _ = servers
    for repo, words in _refusals(reg, test_image_archive, tmp_path):
        _refused(_pull(cli, ns, f"{reg.host}/{repo}:v1", docker_config), words, PULL_FAILED)
        assert _empty(ns) == [], repo
    # the loop was cut after 10 redirects (11 requests)
    assert len(reg.headers_of("/v2/loop/")) == 11


def _authorized(value: str) -> bool:
    return value == BASIC


def test_credentials_stay_with_their_host(
    cli: Cli,
    ns: Client,
    servers: tuple[Server, Server],
    docker_config: dict[str, str],
    test_image_archive: Path,
    tmp_path: Path,
) -> None:
    reg, other = servers
    # a blob redirected to another host (as registries send blobs to a CDN)
    manifest, blobs = _image(test_image_archive, tmp_path, "cross")
    digest, _ = _marker_layer(manifest[2])
    other.routes[f"/cdn/{digest}"] = blob_route(blobs[digest])
    to_cdn = lambda h: h.send(307, headers={"Location": f"{other.url}/cdn/{digest}"})  # noqa: E731
    reg.routes[f"/v2/cross/blobs/{digest}"] = guarded(to_cdn, _authorized, 'Basic realm="sin"')
    serve_image(reg, "cross", manifest, blobs)
    for path in [p for p in reg.routes if p.startswith("/v2/cross/") and "/cdn/" not in p]:
        if path != f"/v2/cross/blobs/{digest}":
            reg.routes[path] = guarded(reg.routes[path], _authorized, 'Basic realm="sin"')
    out = _pull(cli, ns, f"{reg.host}/cross:v1", docker_config)
    assert out.returncode == 0, out.stderr.decode()
    assert any(h.get("Authorization") == BASIC for h in reg.headers_of("/v2/cross/"))
    sent = other.headers_of("/cdn/")
    assert sent and all("Authorization" not in h for h in sent), sent
    assert images.recorded_target(ns, f"{reg.host}/cross:v1") == manifest[1]

    # a token server on another host: it gets the credentials, the registry a token only
    manifest, blobs = _image(test_image_archive, tmp_path, "tok")
    serve_image(reg, "tok", manifest, blobs)
    challenge = f'Bearer realm="{other.url}/token",service="sin-registry"'
    for path in [p for p in reg.routes if p.startswith("/v2/tok/")]:
        reg.routes[path] = guarded(reg.routes[path], lambda v: v == f"Bearer {TOKEN}", challenge)
    answer = json.dumps({"token": TOKEN}).encode()
    other.routes["/token"] = guarded(
        lambda h: h.send(200, answer), _authorized, 'Basic realm="sin-token"'
    )
    out = _pull(cli, ns, f"{reg.host}/tok:v1", docker_config)
    assert out.returncode == 0, out.stderr.decode()
    assert [h.get("Authorization") for h in other.headers_of("/token")] == [BASIC]
    assert all(h.get("Authorization") != BASIC for h in reg.headers_of("/v2/tok/"))
    assert images.recorded_target(ns, f"{reg.host}/tok:v1") == manifest[1]


def _tls_context(tmp: Path) -> ssl.SSLContext:
    key, cert = tmp / "key.pem", tmp / "cert.pem"
    argv = ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]
    argv += ["-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=sin"]
    argv += ["-addext", "subjectAltName=IP:127.0.0.1"]
    subprocess.run(
        argv,
        check=True,
        capture_output=True,
    )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    return ctx


def test_an_https_registry_credentials_never_go_to_a_plain_http_realm(
    cli: Cli, ns: Client, servers: tuple[Server, Server], tmp_path: Path
) -> None:
    _, other = servers
    with Server("127.0.0.1", tls=_tls_context(tmp_path)) as reg:
        hosts = tmp_path / "certs.d" / reg.host
        hosts.mkdir(parents=True)
        (hosts / "hosts.toml").write_text(f'server = "{reg.url}"\nskip_verify = true\n')
        challenge = f'Bearer realm="{other.url}/token-clear",service="sin"'
        reg.routes["/v2/clear/manifests/v1"] = guarded(
            lambda h: h.send(500), lambda v: False, challenge
        )
        d = tmp_path / "docker"
        d.mkdir()
        auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        (d / "config.json").write_text(json.dumps({"auths": {reg.host: {"auth": auth}}}))
        env = {**os.environ, "DOCKER_CONFIG": str(d)}
        ref = f"{reg.host}/clear:v1"
        out = _pull(cli, ns, ref, env, "--hosts-dir", str(tmp_path / "certs.d"))
        _refused(
            out,
            "is plain HTTP; credentials for an HTTPS registry are not sent in clear",
            PULL_FAILED,
        )
        assert other.headers_of("/token-clear") == []
        assert _empty(ns) == []
