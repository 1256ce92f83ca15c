"""Hostile image archives through the real CLI: each refused with one line, exit 125,
and nothing left in containerd (no image, blob, ingest, lease or snapshot).

docs/security.md ("Archive import") lists the rules; the pure ones have unit tests in
tests/unit/test_archive_safety.py. One namespace serves every case: after each
refusal it must still be empty.
"""

from __future__ import annotations

import hashlib
import io
import json
import secrets
import subprocess
import tarfile
import zlib
from collections.abc import Callable
from pathlib import Path

import test_archives
from _cli import Cli
from test_archives import (  # the archive builders and checks of the import tests
    _empty,
    _import,
    _members,
    _refused,
    _snapshots,
    build_docker_save,
    build_oci_variant,
)

from ctrexec.containerd.client import Client

#: The import tests' fixture: a namespace of the test's own, emptied and removed after.
ns = test_archives.ns
TEN_GIB = 10 << 30
Extra = Callable[[tarfile.TarFile, io.BytesIO], None]


def _info(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, 0o644
    return info


def _archive(files: dict[str, bytes], extra: Extra | None = None) -> bytes:
    """A tar of ``files``, then whatever ``extra`` adds (a member, or a raw header)."""
    buf = io.BytesIO()
    tar = tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT)  # noqa: SIM115 - left open after a raw header
    for name, data in files.items():
        info = _info(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    if extra is not None:
        extra(tar, buf)
        if buf.tell() == tar.offset:
            tar.close()
    else:
        tar.close()
    return buf.getvalue()


def _member(info: tarfile.TarInfo) -> Extra:
    return lambda tar, buf: tar.addfile(info)


def _declared_ten_gib(tar: tarfile.TarFile, buf: io.BytesIO) -> None:
    """A blob member whose header declares 10 GiB, followed by 64 KiB and the end."""
    info = _info("blobs/sha256/" + "ab" * 32)
    info.size = TEN_GIB
    buf.write(info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape") + b"\0" * 65536)


def _gzip_bomb(mib: int) -> bytes:
    """A gzip'd tar of one ``mib`` MiB blob of zeros: about a thousandth of its size."""
    zeros = b"\0" * (1 << 20)
    whole = hashlib.sha256()
    for _ in range(mib):
        whole.update(zeros)
    info = _info("blobs/sha256/" + whole.hexdigest())
    info.size = mib << 20
    gz = zlib.compressobj(6, zlib.DEFLATED, 31)
    out = [gz.compress(info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape"))]
    out += [gz.compress(zeros) for _ in range(mib)]
    out.append(gz.compress(b"\0" * 1024) + gz.flush())
    return b"".join(out)


def _with_sparse(files: dict[str, bytes], tmp: Path) -> bytes:
    """The layout plus a sparse 1 MiB member, as GNU tar writes one (tarfile cannot)."""
    root = tmp / "sparse"
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    with (root / "hole").open("wb") as f:
        f.truncate(1 << 20)
    out = tmp / "sparse.tar"
    argv = ["tar", "--sparse", "--format=gnu", "-cf", str(out), "-C", str(root), "."]
    subprocess.run(argv, check=True)
    return out.read_bytes()


def _big_layer_manifest(files: dict[str, bytes], name: str) -> dict[str, bytes]:
    """The OCI variant with its marker layer declared as 10 GiB in the manifest."""
    index = json.loads(files["index.json"])
    old = index["manifests"][0]["digest"]
    manifest = json.loads(files.pop("blobs/" + old.replace(":", "/")))
    manifest["layers"][-1]["size"] = TEN_GIB
    data = json.dumps(manifest).encode()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    index["manifests"][0].update(digest=digest, size=len(data))
    files["blobs/" + digest.replace(":", "/")] = data
    files["index.json"] = json.dumps(index).encode()
    return files


def _cases(archive: Path, tmp: Path) -> list[tuple[str, bytes, str]]:
    marker = secrets.token_hex(6)
    name = f"docker.io/library/cx-hostile-{marker}:v1"
    build_oci_variant(archive, tmp / "oci.tar", name, marker)
    oci = _members(tmp / "oci.tar")
    build_docker_save(archive, tmp / "save.tar", name, marker)
    save = _members(tmp / "save.tar")
    manifest = json.loads(save["manifest.json"])
    manifest[0]["Layers"].append("f00d/layer.tar")
    missing = {**save, "manifest.json": json.dumps(manifest).encode()}
    dev = _info("dev/sda", tarfile.BLKTYPE)
    return [
        ("dot-dot", _archive({**oci, "../escape": b"x"}), "points outside the archive"),
        ("absolute", _archive({**oci, "/etc/escape": b"x"}), "points outside the archive"),
        (
            "symlink out",
            _archive(oci, _member(_info("a/l", tarfile.SYMTYPE, "../../etc/shadow"))),
            "links outside the archive",
        ),
        (
            "hard link out",
            _archive(oci, _member(_info("a/h", tarfile.LNKTYPE, "/etc/shadow"))),
            "links outside the archive",
        ),
        ("device node", _archive(oci, _member(dev)), "is a device node"),
        ("fifo", _archive(oci, _member(_info("p", tarfile.FIFOTYPE))), "is a fifo"),
        ("sparse", _with_sparse(oci, tmp), "is a sparse file"),
        ("missing layer", _archive(missing), "which the archive lacks"),
        ("10 GiB member", _archive(oci, _declared_ten_gib), "declares 10737418240 bytes"),
        (
            "10 GiB layer",
            _archive(_big_layer_manifest(dict(oci), name)),
            "as 10737418240 bytes; the archive's is",
        ),
        ("gzip bomb", _gzip_bomb(96), "refused as a decompression bomb"),
    ]


def test_hostile_archives_are_refused_and_leave_nothing(
    cli: Cli, ns: Client, test_image_archive: Path, tmp_path: Path
) -> None:
    for what, data, words in _cases(test_image_archive, tmp_path):
        path = tmp_path / "hostile.tar"
        path.write_bytes(data)
        _refused(_import(cli, ns, "-q", str(path)), words)
        assert _empty(ns) == [], what
        assert _snapshots(ns) == set(), what
