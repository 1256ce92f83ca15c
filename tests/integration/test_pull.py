"""Pull from a real registry (Debian's docker-registry on 127.0.0.1) into containerd.

Each test pulls into a namespace of its own, which it empties and deletes, so the
session's test image (same blobs) never hides a download or a leak.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import Cli
from _registry import PASSWORD, USER, BlobProxy, CorruptingProxy, Registry, push
from _support import create_namespace, until
from google.protobuf import empty_pb2

from ctrexec import _rpc, errors
from ctrexec._api.containerd.services.content.v1 import content_pb2
from ctrexec._api.containerd.services.images.v1 import images_pb2
from ctrexec._api.containerd.services.namespaces.v1 import namespace_pb2
from ctrexec.containerd import content, images, snapshots
from ctrexec.containerd.client import Client
from ctrexec.containerd.content import Platform
from ctrexec.images import lookup
from ctrexec.images.registry.pull import PullEvent, pull
from ctrexec.testing import content_digests

ROOT = Path(__file__).resolve().parents[2]
BIG_LAYER = 64 << 20


def _build(out: Path, *args: str) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build-test-image"), "--out", str(out), *args],
        check=True,
        capture_output=True,
        text=True,
    )
    return dict(json.loads(proc.stdout))


@pytest.fixture(scope="module")
def archives(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, tuple[Path, dict[str, object]]]]:
    base = tmp_path_factory.mktemp("pull-images")
    index = _build(base / "index.tar", "--platform-index", "--stop-signal", "SIGTERM")
    big = _build(base / "big.tar", "--extra-layers", "1", "--extra-layer-size", str(BIG_LAYER))
    # A layer of its own (no other test image has it), so the pull must download it: a
    # blob already in the store, from any namespace, is not fetched again.
    odd = _build(base / "odd.tar", "--extra-layers", "1", "--extra-layer-size", "65536")
    # Three layers no other image has, for the overlap tests: the top one is held back.
    layered = _build(base / "layered.tar", "--extra-layers", "2", "--extra-layer-size", "98304")
    yield {
        "index": (base / "index.tar", index),
        "big": (base / "big.tar", big),
        "odd": (base / "odd.tar", odd),
        "layered": (base / "layered.tar", layered),
    }
    shutil.rmtree(base)


@pytest.fixture(scope="module")
def registry(
    tmp_path_factory: pytest.TempPathFactory, archives: dict[str, tuple[Path, dict[str, object]]]
) -> Iterator[Registry]:
    reg = Registry(tmp_path_factory.mktemp("registry"))
    reg.start()
    try:
        push(archives["index"][0], f"{reg.host}/ctrexec-test:latest")
        push(archives["big"][0], f"{reg.host}/ctrexec-big:latest")
        push(archives["odd"][0], f"{reg.host}/ctrexec-odd:latest")
        push(archives["layered"][0], f"{reg.host}/ctrexec-layered:latest")
        yield reg
    finally:
        reg.stop()
        shutil.rmtree(reg.base)


@pytest.fixture(scope="module")
def auth_registry(
    tmp_path_factory: pytest.TempPathFactory, archives: dict[str, tuple[Path, dict[str, object]]]
) -> Iterator[Registry]:
    reg = Registry(tmp_path_factory.mktemp("registry-auth"), auth=True)
    reg.start()
    try:
        push(archives["index"][0], f"{reg.host}/private/ctrexec-test:v1", creds=True)
        yield reg
    finally:
        reg.stop()
        shutil.rmtree(reg.base)


def _gc(client: Client) -> None:
    """Run containerd's GC now (a lease deleted with sync collects before answering)."""
    client.delete_lease(client.create_lease().id, sync=True)


@pytest.fixture
def ns(client: Client, request: pytest.FixtureRequest) -> Iterator[Client]:
    """A namespace of the test's own, emptied and deleted afterwards."""
    name = f"ctrexec-test-pull-{secrets.token_hex(4)}"
    own = client.with_namespace(name)
    create_namespace(own)
    try:
        yield own
    finally:
        for le in own.leases():
            own.delete_lease(le.id)
        resp = own._call(
            _rpc.IMAGES, "List", images_pb2.ListImagesRequest(), images_pb2.ListImagesResponse
        )
        for rec in resp.images:
            images.remove_image(own, rec.name, sync=True)
        _gc(own)
        own._call(
            _rpc.NAMESPACES,
            "Delete",
            namespace_pb2.DeleteNamespaceRequest(name=name),
            empty_pb2.Empty,
        )


@pytest.fixture
def docker_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty DOCKER_CONFIG: no credentials of the machine's leak into a test."""
    d = tmp_path / "docker"
    d.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(d))
    return d


def _blob_bytes(containerd_address: str) -> int:
    blobs = Path(containerd_address).parent.parent / "root" / "io.containerd.content.v1.content"
    assert blobs.is_dir(), "the session's containerd root is not where the tests expect"
    return sum(p.stat().st_size for p in (blobs / "blobs").rglob("*") if p.is_file())


# -- pulls ------------------------------------------------------------------------------------


def test_pull_by_tag_then_by_digest(
    ns: Client,
    registry: Registry,
    archives: dict[str, tuple[Path, dict[str, object]]],
    docker_config: Path,
) -> None:
    summary = archives["index"][1]
    events: list[PullEvent] = []
    img = pull(ns, f"{registry.host}/ctrexec-test:latest", progress=events.append)
    assert img.name == f"{registry.host}/ctrexec-test:latest"
    assert img.digest == summary["target"]
    assert img.manifest.digest == summary["manifest"]
    assert img.platform == Platform.host()
    assert images.is_unpacked(ns, img)
    assert events[0].action == "resolved"
    assert events[-1].action == "pulled"
    assert {e.digest for e in events if e.action == "done"} == {
        summary["layer"],
        summary["config"],
    }
    # GC labels: index -> manifest -> config/layer, and where the blobs came from
    gc = content.GC_REF_CONTENT
    index_labels = content.info(ns, img.digest).labels
    assert index_labels[gc + "m.0"] == summary["manifest"]
    assert index_labels[f"{content.LABEL_DISTRIBUTION_SOURCE}{registry.host}"] == "ctrexec-test"
    manifest_labels = content.info(ns, img.manifest.digest).labels
    assert manifest_labels[gc + "config"] == summary["config"]
    assert manifest_labels[gc + "l.0"] == summary["layer"]
    assert ns.leases() == []

    by_digest = f"{registry.host}/ctrexec-test@{summary['target']}"
    again: list[PullEvent] = []
    img2 = pull(ns, by_digest, progress=again.append)
    assert img2.name == by_digest
    assert img2.manifest.digest == summary["manifest"]
    # nothing fetched twice: every blob was in the store already
    assert {e.action for e in again} == {"resolved", "exists", "unpacking", "pulled"}
    assert ns.leases() == []


def test_platform_selection(
    ns: Client,
    registry: Registry,
    archives: dict[str, tuple[Path, dict[str, object]]],
    docker_config: Path,
) -> None:
    summary = archives["index"][1]
    host = Platform.host()
    other = (
        Platform("linux", "arm64") if host.architecture != "arm64" else Platform("linux", "amd64")
    )
    img = pull(ns, f"{registry.host}/ctrexec-test:latest", platform=other)
    assert img.platform == other
    assert img.manifest.digest == summary["other_manifest"]
    assert img.digest == summary["target"]
    with pytest.raises(errors.NotFound):
        pull(ns, f"{registry.host}/ctrexec-test:latest", platform="linux/s390x")


def test_missing_tag(ns: Client, registry: Registry, docker_config: Path) -> None:
    with pytest.raises(errors.NotFound):
        pull(ns, f"{registry.host}/ctrexec-test:no-such-tag")
    with pytest.raises(errors.NotFound):
        pull(ns, f"{registry.host}/no-such-repo:latest")
    with pytest.raises(errors.NotFound):
        lookup.get_image(ns, f"{registry.host}/ctrexec-test:no-such-tag")
    assert ns.leases() == []


# -- credentials --------------------------------------------------------------------------------


def test_auth_401_then_docker_config(
    ns: Client, auth_registry: Registry, docker_config: Path
) -> None:
    ref = f"{auth_registry.host}/private/ctrexec-test:v1"
    with pytest.raises(errors.PermissionDenied, match="ctrexec login"):
        pull(ns, ref)
    assert ns.leases() == []
    with pytest.raises(errors.NotFound):
        lookup.get_image(ns, ref)

    from ctrexec.cli.main import main

    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "ctrexec.cli.main",
            "login",
            "-u",
            USER,
            "--password-stdin",
            auth_registry.host,
        ],
        input="wrong\n",
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 125, bad.stderr
    assert not (docker_config / "config.json").exists()

    assert main(["login", "-u", USER, "-p", PASSWORD, auth_registry.host]) == 0
    saved = json.loads((docker_config / "config.json").read_text())
    assert auth_registry.host in saved["auths"]
    img = pull(ns, ref)
    assert img.name == ref

    assert main(["logout", auth_registry.host]) == 0
    assert (
        auth_registry.host not in json.loads((docker_config / "config.json").read_text())["auths"]
    )


def test_auth_with_credential_helper(
    ns: Client,
    auth_registry: Registry,
    docker_config: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "helper-calls"
    helper = bindir / "docker-credential-ctrexectest"
    helper.write_text(
        "#!/bin/sh\n"
        f'read server; echo "$1 $server" >> {calls}\n'
        f'[ "$1" = get ] && [ "$server" = "{auth_registry.host}" ] && '
        f'exec printf \'{{"ServerURL":"%s","Username":"{USER}","Secret":"{PASSWORD}"}}\' "$server"\n'
        'echo "credentials not found in native keychain"; exit 1\n'
    )
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    (docker_config / "config.json").write_text(
        json.dumps({"credHelpers": {auth_registry.host: "ctrexectest"}})
    )
    ref = f"{auth_registry.host}/private/ctrexec-test:v1"
    img = pull(ns, ref)
    assert img.name == ref
    assert f"get {auth_registry.host}" in calls.read_text()


# -- integrity and interruption -------------------------------------------------------------------


def test_corrupted_blob_leaves_nothing(
    ns: Client,
    registry: Registry,
    archives: dict[str, tuple[Path, dict[str, object]]],
    docker_config: Path,
) -> None:
    summary = archives["odd"][1]
    extra = summary["extra_layers"]
    assert isinstance(extra, list)
    with CorruptingProxy(registry.host, str(extra[0])) as proxy:
        ref = f"{proxy.host}/ctrexec-odd:latest"
        with pytest.raises(errors.DigestMismatch):
            pull(ns, ref)
        assert proxy.corrupted >= 1
    with pytest.raises(errors.NotFound):
        lookup.get_image(ns, ref)
    assert ns.leases() == []
    _gc(ns)
    assert content_digests(ns) == set()
    statuses = ns._call(
        _rpc.CONTENT,
        "ListStatuses",
        content_pb2.ListStatusesRequest(),
        content_pb2.ListStatusesResponse,
    )
    assert list(statuses.statuses) == []


def test_registry_killed_mid_pull_then_resumed(
    ns: Client,
    registry: Registry,
    archives: dict[str, tuple[Path, dict[str, object]]],
    docker_config: Path,
) -> None:
    summary = archives["big"][1]
    ref = f"{registry.host}/ctrexec-big:latest"
    started = threading.Event()
    killed = threading.Event()

    def progress(ev: PullEvent) -> None:
        if (
            ev.total >= BIG_LAYER
            and ev.action == "progress"
            and ev.done > 0
            and not started.is_set()
        ):
            started.set()
            killed.wait(60)  # hold the writer until the registry is gone

    failure: list[BaseException] = []

    def run() -> None:
        try:
            pull(ns, ref, progress=progress)
        except BaseException as exc:
            failure.append(exc)

    t = threading.Thread(target=run)
    t.start()
    try:
        assert started.wait(120), "the big layer never started"
        registry.kill()
    finally:
        killed.set()
        t.join(300)
    try:
        assert failure and isinstance(failure[0], errors.Unavailable), failure
        with pytest.raises(errors.NotFound):
            lookup.get_image(ns, ref)
        assert len(ns.leases()) == 1  # kept: it holds the partial download
        partial = ns._call(
            _rpc.CONTENT,
            "ListStatuses",
            content_pb2.ListStatusesRequest(),
            content_pb2.ListStatusesResponse,
        ).statuses
        assert any(0 < s.offset < s.total for s in partial)
        # the layers unpacked before the registry went away are kept by the lease too
        kept = {s.name for s in snapshots.list_snapshots(ns) if s.kind == "committed"}
        assert not [s for s in snapshots.list_snapshots(ns) if s.kind != "committed"]
    finally:
        registry.start()  # the tests after this one pull from it too
    events: list[PullEvent] = []
    img = pull(ns, ref, progress=events.append)
    assert img.digest == summary["target"]
    starts = [e for e in events if e.action == "start" and e.total >= BIG_LAYER]
    assert len(starts) == 1 and 0 < starts[0].done < starts[0].total, starts
    assert kept <= set(img.chain_ids)
    extracted = [e.digest for e in events if e.action == "extracted"]
    assert extracted == [
        layer.digest
        for layer, chain in zip(img.layers, img.chain_ids, strict=True)
        if chain not in kept
    ]
    assert ns.leases() == []


def _chain_ids(registry: Registry, repo: str, config: str) -> tuple[str, ...]:
    """The image's chain IDs, from its config as the registry serves it."""
    with urllib.request.urlopen(f"http://{registry.host}/v2/{repo}/blobs/{config}") as resp:
        return snapshots.chain_ids(json.load(resp)["rootfs"]["diff_ids"])


def _pull_in_thread(
    ns: Client, ref: str, events: list[PullEvent]
) -> tuple[threading.Thread, list[BaseException]]:
    failure: list[BaseException] = []

    def run() -> None:
        try:
            pull(ns, ref, progress=events.append)
        except BaseException as exc:
            failure.append(exc)

    t = threading.Thread(target=run)
    t.start()
    return t, failure


def _committed(ns: Client, chain_id: str) -> bool:
    found = snapshots.stat_snapshot(ns, chain_id, snapshots.DEFAULT_SNAPSHOTTER)
    return found is not None and found.kind == "committed"


def test_layers_unpack_while_the_top_one_downloads(
    ns: Client,
    registry: Registry,
    archives: dict[str, tuple[Path, dict[str, object]]],
    docker_config: Path,
) -> None:
    """The proxy holds the top layer's blob until the layers below it are committed
    snapshots: a pull that unpacked only after every download would never get there."""
    summary = archives["layered"][1]
    extra = summary["extra_layers"]
    assert isinstance(extra, list) and len(extra) == 2
    chains = _chain_ids(registry, "ctrexec-layered", str(summary["config"]))
    release = threading.Event()
    events: list[PullEvent] = []
    with BlobProxy(registry.host, str(extra[1]), release=release) as proxy:
        ref = f"{proxy.host}/ctrexec-layered:latest"
        t, failure = _pull_in_thread(ns, ref, events)
        try:
            until(
                lambda: proxy.asked.is_set() and _committed(ns, chains[1]),
                "the top layer asked for and the layer below it unpacked",
                120,
            )
            assert not content.exists(ns, str(extra[1]))  # still held back
            assert not _committed(ns, chains[2])
            assert t.is_alive()
        finally:
            release.set()
            t.join(300)
    assert not t.is_alive() and failure == [], failure
    img = lookup.get_image(ns, ref)
    assert img.chain_ids == chains and images.is_unpacked(ns, img)
    actions = [(e.action, e.digest) for e in events]
    layers = [str(summary["layer"]), *map(str, extra)]
    # docker's order per layer: stored, extracting, extracted ("Pull complete")
    assert [d for a, d in actions if a == "extracted"] == layers
    for d in layers:
        assert actions.index(("done", d)) < actions.index(("extracting", d))
        assert actions.index(("extracting", d)) < actions.index(("extracted", d))
    assert actions.index(("extracted", str(extra[0]))) < actions.index(("done", str(extra[1])))
    assert actions[-1][0] == "pulled"
    assert ns.leases() == []


def test_top_layer_failing_after_the_lower_ones_unpacked_leaves_nothing(
    ns: Client,
    registry: Registry,
    archives: dict[str, tuple[Path, dict[str, object]]],
    docker_config: Path,
) -> None:
    summary = archives["layered"][1]
    extra = summary["extra_layers"]
    assert isinstance(extra, list)
    chains = _chain_ids(registry, "ctrexec-layered", str(summary["config"]))
    release = threading.Event()
    with BlobProxy(registry.host, str(extra[1]), corrupt=True, release=release) as proxy:
        ref = f"{proxy.host}/ctrexec-layered:latest"
        t, failure = _pull_in_thread(ns, ref, [])
        try:
            until(lambda: _committed(ns, chains[1]), "the layer below the top one unpacked", 120)
        finally:
            release.set()
            t.join(300)
        assert proxy.corrupted >= 1
    assert not t.is_alive()
    assert len(failure) == 1 and isinstance(failure[0], errors.DigestMismatch), failure
    with pytest.raises(errors.NotFound):
        lookup.get_image(ns, ref)
    assert ns.leases() == []
    _gc(ns)
    assert snapshots.list_snapshots(ns) == []
    assert content_digests(ns) == set()
    statuses = ns._call(
        _rpc.CONTENT,
        "ListStatuses",
        content_pb2.ListStatusesRequest(),
        content_pb2.ListStatusesResponse,
    )
    assert list(statuses.statuses) == []


def test_ctr_pulled_image_adopted_without_writing(
    client: Client,
    ns: Client,
    registry: Registry,
    containerd_address: str,
    docker_config: Path,
) -> None:
    ref = f"{registry.host}/ctrexec-test:latest"
    other = client.with_namespace(f"{ns.namespace}-ctr")
    try:
        subprocess.run(
            [
                "ctr",
                "--address",
                containerd_address,
                "--namespace",
                other.namespace,
                "images",
                "pull",
                "--plain-http",
                ref,
            ],
            check=True,
            capture_output=True,
        )
        before = _blob_bytes(containerd_address)
        events: list[PullEvent] = []
        img = pull(ns, ref, progress=events.append)
        assert _blob_bytes(containerd_address) == before
        # every blob was committed from disk: each "start" is at its end already
        starts = [e for e in events if e.action == "start"]
        assert starts and all(e.done == e.total for e in starts), starts
        assert img.digest == lookup.get_image(other, ref).digest
    finally:
        for rec in other._call(
            _rpc.IMAGES, "List", images_pb2.ListImagesRequest(), images_pb2.ListImagesResponse
        ).images:
            images.remove_image(other, rec.name, sync=True)
        _gc(other)
        until(lambda: not content_digests(other), "ctr's content collected")
        other._call(
            _rpc.NAMESPACES,
            "Delete",
            namespace_pb2.DeleteNamespaceRequest(name=other.namespace),
            empty_pb2.Empty,
        )


# -- the CLI ----------------------------------------------------------------------------------


def test_cli_pull_and_run_pull_policies(
    ns: Client, registry: Registry, cli: Cli, docker_config: Path
) -> None:
    ref = f"{registry.host}/ctrexec-test:latest"
    never = cli("run", "--rm", "--pull", "never", ref, "true", namespace=ns.namespace)
    assert never.returncode == 125
    assert f"ctrexec pull {ref}" in never.stderr
    assert len(never.stderr.strip().splitlines()) == 1, never.stderr

    ran = cli("run", "--rm", ref, "cat", "/etc/ctrexec-platform", namespace=ns.namespace)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == Platform.host().architecture
    assert f"{ref}: pulled" in ran.stderr  # plain lines: stderr is no terminal
    assert ran.stderr.splitlines()[0] == f"Unable to find image '{ref}' locally"

    pulled = cli("pull", "--json", ref, namespace=ns.namespace)
    assert pulled.returncode == 0, pulled.stderr
    actions = [json.loads(line)["action"] for line in pulled.stdout.splitlines()]
    assert actions[0] == "resolved" and actions[-1] == "pulled"
    assert "exists" in actions

    quiet = cli("pull", "-q", ref, namespace=ns.namespace)
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, f"{ref}\n", "")
    missing = cli("pull", f"{registry.host}/ctrexec-test:nope", namespace=ns.namespace)
    assert missing.returncode == 1  # docker's
    assert len(missing.stderr.strip().splitlines()) == 1, missing.stderr


def test_hosts_toml_mirror_falls_through(
    ns: Client, registry: Registry, tmp_path: Path, docker_config: Path
) -> None:
    """A dead mirror first, then the real one as a mirror of an unreachable server."""
    from _registry import free_port

    upstream = "reg.invalid:5000"  # the name in the reference; never resolved
    d = tmp_path / "certs.d" / upstream
    d.mkdir(parents=True)
    (d / "hosts.toml").write_text(
        f'server = "http://127.0.0.1:{free_port()}"\n'
        f'[host."http://127.0.0.1:{free_port()}"]\n'
        '  capabilities = ["pull", "resolve"]\n'
        f'[host."http://{registry.host}"]\n'
        '  capabilities = ["pull", "resolve"]\n'
    )
    img = pull(ns, f"{upstream}/ctrexec-test:latest", hosts_dir=tmp_path / "certs.d")
    assert img.name == f"{upstream}/ctrexec-test:latest"
    assert images.is_unpacked(ns, img)


def test_group_up_pulls_a_missing_image(
    ns: Client, registry: Registry, cli: Cli, tmp_path: Path, docker_config: Path
) -> None:
    ref = f"{registry.host}/ctrexec-test:latest"
    name = f"cxpull{secrets.token_hex(3)}"
    group_file = tmp_path / "group.toml"
    group_file.write_text(
        f'name = "{name}"\nnetwork = "none"\n[[task]]\nname = "{name}-t"\n'
        f'image = "{ref}"\ncommand = ["sleep", "60"]\n'
    )
    never = cli("group up", "--pull", "never", str(group_file), namespace=ns.namespace)
    assert never.returncode == 125
    assert f"ctrexec pull {ref}" in never.stderr
    assert not Path(f"/run/netns/{name}").exists()
    try:
        up = cli("group up", "-q", str(group_file), namespace=ns.namespace)
        assert up.returncode == 0, up.stderr
        assert f"{name}-t" in up.stdout
        assert lookup.get_image(ns, ref).name == ref
    finally:
        down = cli("group down", "-t", "1", name, namespace=ns.namespace)
        assert down.returncode == 0, down.stderr
