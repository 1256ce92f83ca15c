"""``export``: images of containerd's store as an OCI image layout tar.

What ``ctr images export`` writes, and ``ctr images import`` (and ctrexec's own
import) reads: ``blobs/<alg>/<hex>`` for the content of the platform asked for (every
platform the store holds, with ``all_platforms``), ``index.json`` with one entry per
name (``io.containerd.image.name`` and ``org.opencontainers.image.ref.name``),
``oci-layout``, and a docker-compatible ``manifest.json`` so ``docker load`` reads it
too. Members are written in containerd's order (sorted by name), blob bytes streamed
from the content store and checked against their digests on the way.

Every reference is resolved before the first byte is written; a file is written
under a temporary name and renamed at the end, so a failed export leaves no file.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import tarfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import attrs

from ctrexec import errors
from ctrexec.containerd import content
from ctrexec.containerd.client import Client
from ctrexec.containerd.content import Descriptor, Platform
from ctrexec.images import archives, lookup

if TYPE_CHECKING:
    from ctrexec.paths import StrPath

_MAX_DEPTH = 4


@attrs.frozen
class _Export:
    """One image to write: its names, the blobs it needs, and the docker view."""

    name: str
    target: Descriptor
    blobs: tuple[Descriptor, ...]
    config: Descriptor
    layers: tuple[Descriptor, ...]


def _tree(client: Client, desc: Descriptor, depth: int = 0) -> Iterator[Descriptor]:
    """Every blob under ``desc`` that the store holds (indexes: the children it has)."""
    if depth > _MAX_DEPTH:
        raise errors.InvalidArgument(f"image indexes nest deeper than {_MAX_DEPTH}")
    yield desc
    obj = content.load_json(content.read_blob(client, desc), f"content {desc.digest}")
    if content.content_kind(desc.media_type, obj) == "manifest":
        config, layers = content.parse_manifest(obj)
        yield config
        yield from layers
        return
    for entry in obj.get("manifests") or []:
        child = Descriptor.from_json(entry, "index entry")
        if content.exists(client, child.digest):
            yield from _tree(client, child, depth + 1)


def _resolve(client: Client, ref: str, platform: Platform, all_platforms: bool) -> _Export:
    image = lookup.get_image(client, ref, platform=platform)
    if all_platforms:
        blobs = tuple(_tree(client, image.target))
    else:
        blobs = (*image.indexes, image.manifest, image.config_descriptor, *image.layers)
    for blob in blobs:
        if not content.exists(client, blob.digest):
            raise errors.FailedPrecondition(
                f"image {image.name}: blob {blob.digest} is not in the store"
            )
    return _Export(image.name, image.target, blobs, image.config_descriptor, image.layers)


class _BlobReader(io.RawIOBase):
    """A blob of the content store as a file tarfile can copy, checked at its end."""

    def __init__(self, client: Client, desc: Descriptor) -> None:
        self._desc = desc
        self._chunks = content.read_stream(client, desc.digest)
        self._buffer = b""
        self._hash = hashlib.new(desc.digest.split(":", 1)[0])
        self._seen = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        while not self._buffer:
            data = next(self._chunks, None)
            if data is None:
                self._check()
                return 0
            self._hash.update(data)
            self._seen += len(data)
            self._buffer = data
        n = min(len(buf), len(self._buffer))
        buf[:n] = self._buffer[:n]
        self._buffer = self._buffer[n:]
        if not self._buffer and self._seen >= self._desc.size:
            self._check()
        return n

    def _check(self) -> None:
        got = f"{self._desc.digest.split(':', 1)[0]}:{self._hash.hexdigest()}"
        if self._seen != self._desc.size or got != self._desc.digest:
            raise errors.DigestMismatch(
                f"content {self._desc.digest} in the store reads as {got} ({self._seen} bytes)"
            )

    def close(self) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()
        super().close()


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


def _add_dir(tar: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, 0o755
    tar.addfile(info)


def _write(client: Client, out: IO[bytes], exports: Sequence[_Export], docker: bool) -> None:
    blobs = {b.digest: b for e in exports for b in e.blobs}
    index = archives.index_json([(e.target, e.name) for e in exports])
    records: dict[str, bytes | Descriptor] = {archives.blob_path(d): b for d, b in blobs.items()}
    records[archives.INDEX_FILE] = index
    records[archives.OCI_LAYOUT_FILE] = archives.layout_json()
    if docker:
        by_config: dict[str, tuple[Descriptor, tuple[Descriptor, ...], list[str]]] = {}
        for e in exports:
            by_config.setdefault(e.config.digest, (e.config, e.layers, []))[2].append(e.name)
        records[archives.DOCKER_MANIFEST_FILE] = archives.docker_manifest_json(
            list(by_config.values())
        )
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        _add_dir(tar, "blobs/")
        for algorithm in sorted({d.split(":", 1)[0] for d in blobs}):
            _add_dir(tar, f"blobs/{algorithm}/")
        for name in sorted(records):
            value = records[name]
            if isinstance(value, bytes):
                _add_bytes(tar, name, value)
                continue
            info = tarfile.TarInfo(name)
            info.size, info.mode = value.size, 0o444
            with _BlobReader(client, value) as reader:
                tar.addfile(info, io.BufferedReader(reader, 1024 * 1024))


def export_archive(
    client: Client,
    refs: Sequence[str],
    dest: IO[bytes] | StrPath,
    *,
    platform: Platform | str | None = None,
    all_platforms: bool = False,
    docker_manifest: bool = True,
) -> list[str]:
    """Write the images ``refs`` as one OCI layout tar to ``dest`` (a path, or a binary
    stream such as stdout); returns their full names. Content is the one platform's
    (the host's) unless ``all_platforms``; every ref is resolved first, so an unknown
    one raises NotFound before anything is written."""
    if not refs:
        raise errors.InvalidArgument("export needs at least one image")
    want = content.as_platform(platform)
    exports = [_resolve(client, ref, want, all_platforms) for ref in refs]
    exports = list({e.name: e for e in exports}.values())
    if not isinstance(dest, str | os.PathLike):
        _write(client, dest, exports, docker_manifest)
        return [e.name for e in exports]
    path = Path(dest)
    tmp = path.with_name(f".{path.name}.ctrexec-{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as f:
            _write(client, f, exports, docker_manifest)
        tmp.replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise errors.InvalidArgument(f"cannot write {path}: {exc.strerror or exc}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return [e.name for e in exports]
