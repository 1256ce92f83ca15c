"""scripts/build-test-image: reproducible, and a well-formed OCI image layout.

Tests elsewhere rely on exact digests (containerd deduplicates by digest, and
content adoption across namespaces is checked by digest), so two builds must be
byte-identical, and every descriptor must match the bytes it points at.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(not Path("/bin/busybox").is_file(), reason="needs /bin/busybox"),
]

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "build-test-image"
NAME = "docker.io/library/ctrexec-test:latest"
INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def build(out: Path, *args: str) -> dict[str, Any]:
    res = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), *args],
        check=True,
        capture_output=True,
        text=True,
    )
    summary: dict[str, Any] = json.loads(res.stdout)
    return summary


class Layout:
    """An OCI archive opened for checks: every blob verified against its name."""

    def __init__(self, archive: Path) -> None:
        with tarfile.open(archive) as tar:
            self.members = tar.getmembers()
            self.files = {
                m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
                for m in self.members
                if m.isfile()
            }
        self.blobs = {
            "sha256:" + name.rsplit("/", 1)[1]: data
            for name, data in self.files.items()
            if name.startswith("blobs/sha256/")
        }
        for digest, data in self.blobs.items():
            assert digest == "sha256:" + hashlib.sha256(data).hexdigest()
        self.index = json.loads(self.files["index.json"])

    def blob(self, desc: dict[str, Any]) -> bytes:
        data = self.blobs[desc["digest"]]
        assert len(data) == desc["size"]
        return data

    def json_blob(self, desc: dict[str, Any]) -> dict[str, Any]:
        obj: dict[str, Any] = json.loads(self.blob(desc))
        if "mediaType" in obj:
            assert obj["mediaType"] == desc["mediaType"]
        return obj


def layer_members(layout: Layout, desc: dict[str, Any]) -> tuple[bytes, list[tarfile.TarInfo]]:
    raw = gzip.decompress(layout.blob(desc))
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        return raw, tar.getmembers()


def test_two_builds_are_byte_identical(tmp_path: Path) -> None:
    a = build(tmp_path / "a.tar")
    b = build(tmp_path / "b.tar")
    assert a == b
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
    c = build(tmp_path / "c.tar", "--platform-index")
    d = build(tmp_path / "d.tar", "--platform-index")
    assert c == d
    assert c["layer"] == a["layer"]  # same layer bytes either way


def test_layout_descriptors_and_diff_id(tmp_path: Path) -> None:
    summary = build(tmp_path / "img.tar", "--stop-signal", "SIGTERM")
    layout = Layout(tmp_path / "img.tar")
    assert json.loads(layout.files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    assert layout.index["schemaVersion"] == 2
    (top,) = layout.index["manifests"]
    assert top["mediaType"] == MANIFEST
    assert top["annotations"] == {
        "io.containerd.image.name": NAME,
        "org.opencontainers.image.ref.name": "latest",
    }
    manifest = layout.json_blob(top)
    assert manifest["schemaVersion"] == 2
    config = layout.json_blob(manifest["config"])
    (layer_desc,) = manifest["layers"]
    assert layer_desc["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
    raw, _ = layer_members(layout, layer_desc)
    diff_id = "sha256:" + hashlib.sha256(raw).hexdigest()
    assert config["rootfs"] == {"type": "layers", "diff_ids": [diff_id]}
    assert summary["diff_id"] == diff_id and summary["manifest"] == top["digest"]
    assert config["os"] == "linux"
    assert config["architecture"] in {"amd64", "arm64", "arm", "386", "ppc64le", "s390x", "riscv64"}
    cfg = config["config"]
    assert cfg["Env"] == ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    assert cfg["Cmd"] == ["sh"] and cfg["WorkingDir"] == "/"
    assert cfg["StopSignal"] == "SIGTERM"
    assert cfg["Labels"]["org.opencontainers.image.title"] == "ctrexec-test"
    assert len(config["history"]) == 1
    # gzip header: no file name, mtime 0
    gz = layout.blob(layer_desc)
    assert gz[3] & 0x08 == 0 and gz[4:8] == b"\0\0\0\0"
    # the archive itself is normalised too
    assert all(m.mtime == 0 and m.uid == 0 and m.gid == 0 for m in layout.members)


def test_no_stop_signal_unless_asked(tmp_path: Path) -> None:
    build(tmp_path / "img.tar", "--name", "example.com/x/y:v1")
    layout = Layout(tmp_path / "img.tar")
    (top,) = layout.index["manifests"]
    assert top["annotations"]["io.containerd.image.name"] == "example.com/x/y:v1"
    assert top["annotations"]["org.opencontainers.image.ref.name"] == "v1"
    config = layout.json_blob(layout.json_blob(top)["config"])
    assert "StopSignal" not in config["config"]


def test_layer_contents(tmp_path: Path) -> None:
    build(tmp_path / "img.tar")
    layout = Layout(tmp_path / "img.tar")
    manifest = layout.json_blob(layout.index["manifests"][0])
    raw, members = layer_members(layout, manifest["layers"][0])
    by_name = {m.name: m for m in members}
    names = [m.name for m in members]
    assert names == sorted(names, key=lambda n: Path(n).parts)  # parents first, sorted
    assert all(m.mtime == 0 for m in members)
    assert all((m.uid, m.gid) == (0, 0) for m in members if m.name != "home/app")
    busybox = by_name["bin/busybox"]
    assert busybox.isfile() and busybox.mode == 0o755
    assert busybox.size == Path("/bin/busybox").stat().st_size
    applets = subprocess.run(
        ["/bin/busybox", "--list"], check=True, capture_output=True, text=True
    ).stdout.split()
    for applet in applets:
        if applet != "busybox":
            assert by_name[f"bin/{applet}"].issym()
            assert by_name[f"bin/{applet}"].linkname == "busybox"
    assert by_name["bin/sh"].issym()
    assert by_name["tmp"].isdir() and by_name["tmp"].mode == 0o1777
    assert by_name["root"].isdir()
    home = by_name["home/app"]
    assert home.isdir() and (home.uid, home.gid) == (1000, 1000)
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:

        def text(name: str) -> str:
            f = tar.extractfile(name)
            assert f is not None
            return f.read().decode()

        passwd = {line.split(":")[0]: line.split(":") for line in text("etc/passwd").splitlines()}
        assert passwd["root"][2:4] == ["0", "0"]
        assert passwd["app"][2:4] == ["1000", "1000"]
        assert passwd["nobody"][2:4] == ["65534", "65534"]
        group = {line.split(":")[0]: line.split(":") for line in text("etc/group").splitlines()}
        assert group["staff"][2:] == ["50", "app"]
        assert group["app"][2] == "1000" and group["nogroup"][2] == "65534"
        assert "root" in group
        assert text("var/www/index.html") == "hello from ctrexec\n"
        for placeholder in ("etc/hosts", "etc/resolv.conf", "etc/hostname"):
            assert text(placeholder) == ""


def test_platform_index(tmp_path: Path) -> None:
    summary = build(tmp_path / "img.tar", "--platform-index")
    layout = Layout(tmp_path / "img.tar")
    (top,) = layout.index["manifests"]
    assert top["mediaType"] == INDEX
    assert top["annotations"]["io.containerd.image.name"] == NAME
    nested = layout.json_blob(top)
    host, other = nested["manifests"]
    assert host["platform"] == summary["platform"]
    assert other["platform"]["architecture"] != host["platform"]["architecture"]
    for desc in (host, other):
        manifest = layout.json_blob(desc)
        config = layout.json_blob(manifest["config"])
        assert config["architecture"] == desc["platform"]["architecture"]
        raw, _ = layer_members(layout, manifest["layers"][0])
        assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(raw).hexdigest()]
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            f = tar.extractfile("etc/ctrexec-platform")
            assert f is not None
            assert f.read().decode().strip() == desc["platform"]["architecture"]
    # the other platform's manifest is data only: nothing it could wrongly execute
    _, other_members = layer_members(layout, layout.json_blob(other)["layers"][0])
    assert [m.name for m in other_members] == ["etc", "etc/ctrexec-platform"]
