"""``import``: an OCI image layout tar or a ``docker save`` tar into containerd's store.

The archive is read once, as a stream (a file or a pipe), member by member, and never
held in memory: members come in any order (``ctr`` writes ``index.json`` after the
blobs, ``docker save`` its ``manifest.json`` last), so every blob is streamed into the
content store as it passes, under one lease, and what the archive means is worked out
when the stream has ended:

- ``blobs/<alg>/<hex>`` is committed with that digest as the expected one, so
  containerd refuses bytes that do not match (DigestMismatch);
- any other file (docker's ``<id>/layer.tar``, ``<config>.json``) is stored under the
  digest of its bytes, computed on the way; a docker image then gets a docker schema 2
  manifest built from ``manifest.json``, as containerd's importer builds it;
- indexes and manifests get containerd's GC labels for the children kept (the
  platforms asked for), image records are created last, and the images are unpacked.

A failure at any step deletes the records made here and the lease with a synchronous
GC: nothing the archive brought stays behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import tarfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import attrs

from ctrexec import errors
from ctrexec.containerd import content, images
from ctrexec.containerd.client import Client
from ctrexec.containerd.content import Descriptor, Platform
from ctrexec.images import archives
from ctrexec.images import store as imagestore
from ctrexec.images.archives import ArchiveImage
from ctrexec.images.reference import parse_reference

if TYPE_CHECKING:
    from ctrexec.paths import StrPath

_CHUNK = 1024 * 1024
_HEAD = 16
_MAX_DEPTH = 4
_TAR_ERRORS = (tarfile.TarError, EOFError, zlib.error, OSError)


#: One step of an import: the same event as a pull's, so one renderer draws both.
ImportEvent = imagestore.ImageEvent

#: Called for each step, in the importing thread.
ImportProgress = Callable[[ImportEvent], None]


@attrs.frozen
class ImportedImage:
    """An image an import created or moved: its name and target digest; ``replaced``:
    the image ID (config digest, or target digest if unreadable) the name had until
    the import moved it to another image, else empty."""

    name: str
    digest: str
    unpacked: bool
    replaced: str = ""


@attrs.define
class _Scan:
    """What one pass over the tar left: small documents, stored blobs by path, links,
    and the bytes in and out so far (the decompression bound)."""

    meta: dict[str, bytes] = attrs.field(factory=dict)
    stored: dict[str, Descriptor] = attrs.field(factory=dict)
    symlinks: dict[str, str] = attrs.field(factory=dict)
    inflation: archives.Inflation = attrs.field(factory=archives.Inflation)


class _Counted:
    """A reader that adds what it hands out to one count (``raw`` or ``out``) and
    checks the bound: the archive itself (what tarfile decompresses) and each member
    (what it gave) go through one each."""

    def __init__(
        self, reader: IO[bytes], inflation: archives.Inflation, *, raw: bool, what: str = ""
    ) -> None:
        self._reader = reader
        self._inflation = inflation
        self._raw = raw
        self.what = what  # a member's path and declared size, for a short read's message
        self.count = 0

    def read(self, size: int = -1) -> bytes:
        data = self._reader.read(size)
        self.count += len(data)
        if self._raw:
            self._inflation.raw += len(data)
        else:
            self._inflation.out += len(data)
            self._inflation.check()
        return data


def _corrupt(exc: BaseException) -> errors.InvalidArgument:
    return errors.InvalidArgument(f"archive is truncated or corrupt ({exc})")


def _member_chunks(reader: IO[bytes] | _Counted, skip: int = 0) -> Iterator[bytes]:
    """A member's bytes from ``skip`` on; tar damage becomes InvalidArgument here, so
    that the content write it feeds is aborted, not kept for a resume."""
    try:
        while skip > 0 and (data := reader.read(min(skip, _CHUNK))):
            skip -= len(data)
        while data := reader.read(_CHUNK):
            yield data
    except tarfile.ReadError as exc:
        if "unexpected end" not in str(exc) or not isinstance(reader, _Counted):
            raise _corrupt(exc) from exc
        raise errors.InvalidArgument(
            f"archive is truncated or corrupt: member {reader.what}, but the archive ends inside it"
        ) from exc
    except _TAR_ERRORS as exc:
        raise _corrupt(exc) from exc


def _store_named(
    client: Client,
    path: str,
    digest: str,
    *,
    size: int,
    reader: _Counted,
    lease: str,
    progress: ImportProgress | None,
) -> bool:
    """Store a ``blobs/`` member under the digest its path names; False when the store
    had it already (its bytes are then skipped, not read)."""
    desc = Descriptor("", digest, size)
    started = False

    def told(offset: int) -> None:
        nonlocal started
        whole = not started and offset >= size  # on disk for another namespace: no bytes
        if progress is not None and not whole:
            action = "progress" if started else "start"
            progress(ImportEvent(action, digest=digest, done=offset, total=size))
        started = True

    try:
        return imagestore.store_blob(
            client, desc, lambda off: _member_chunks(reader, off), lease=lease, progress=told
        )
    except errors.DigestMismatch as exc:
        raise errors.DigestMismatch(
            f"archive member {path}: its bytes do not match the digest its name gives"
        ) from exc


def _store_unnamed(
    client: Client, path: str, *, size: int, reader: _Counted, lease: str, progress: ImportProgress
) -> Descriptor:
    """Stream a member whose digest nobody names yet; commit it under the digest of
    its bytes. (imagestore.store_blob needs the digest before the first byte.)"""
    session = content.WriteSession(client, f"ctrexec-import-{secrets.token_hex(8)}", lease)
    hasher = hashlib.sha256()

    def hashed() -> Iterator[bytes]:
        done = 0
        progress(ImportEvent("start", digest=path, total=size))
        for data in _member_chunks(reader):
            hasher.update(data)
            yield data
            done += len(data)
            progress(ImportEvent("progress", digest=path, done=done, total=size))

    provisional = Descriptor("", "sha256:" + "0" * 64, size)
    try:
        session.stat(size)
        offset = session.write(0, hashed(), provisional)
        desc = Descriptor("", f"sha256:{hasher.hexdigest()}", offset)
        try:
            session.commit(attrs.evolve(desc, size=size), offset, {})
        except errors.AlreadyExists:
            session.abort()
            return desc
        session.finish()
    except BaseException:
        session.abort()
        raise
    return desc


def _open(source: IO[bytes]) -> tarfile.TarFile:
    try:
        return tarfile.open(fileobj=source, mode="r|*")
    except _TAR_ERRORS as exc:
        raise errors.InvalidArgument(f"not a tar archive ({exc})") from None


def _scan(client: Client, source: IO[bytes], lease: str, progress: ImportProgress | None) -> _Scan:
    scan = _Scan()
    tar = _open(_Counted(source, scan.inflation, raw=True))  # type: ignore[arg-type]
    with tar:
        members = iter(tar)
        while True:
            try:
                member = next(members)
            except StopIteration:
                break
            except _TAR_ERRORS as exc:
                raise _corrupt(exc) from exc
            scan.inflation.check()  # after tarfile skipped the last member's unread bytes
            _take(client, tar, member, scan, lease=lease, progress=progress)
    return scan


def _refuse_kind(member: tarfile.TarInfo, path: str) -> None:
    """Device nodes, fifos and sparse files are no image content: an archive that has
    them was not written by an image tool, and an extracting one would make them."""
    if member.ischr() or member.isblk():
        raise errors.InvalidArgument(f"archive member {path!r} is a device node")
    if member.isfifo():
        raise errors.InvalidArgument(f"archive member {path!r} is a fifo")
    if member.issparse():
        raise errors.InvalidArgument(f"archive member {path!r} is a sparse file")


def _take(
    client: Client,
    tar: tarfile.TarFile,
    member: tarfile.TarInfo,
    scan: _Scan,
    *,
    lease: str,
    progress: ImportProgress | None,
) -> None:
    path = archives.member_path(member.name)
    _refuse_kind(member, path)
    if member.issym():
        scan.symlinks[path] = archives.symlink_target(member.name, member.linkname)
        return
    if member.islnk():
        scan.symlinks[path] = archives.hardlink_target(member.name, member.linkname)
        return
    kind = archives.member_kind(path)
    if not member.isreg() or kind == "skip":
        if member.size > content.MAX_METADATA_BYTES:  # tarfile would inflate it to skip it
            raise errors.InvalidArgument(f"archive member {path} is too large")
        scan.inflation.out += member.size
        return
    opened = tar.extractfile(member)
    if opened is None:
        return
    what = f"{path} declares {member.size} bytes"
    reader = _Counted(opened, scan.inflation, raw=False, what=what)
    try:
        _store_member(client, member, reader, scan, lease=lease, progress=progress)
    finally:
        scan.inflation.out += max(0, member.size - reader.count)  # skipped by tarfile


def _store_member(
    client: Client,
    member: tarfile.TarInfo,
    reader: _Counted,
    scan: _Scan,
    *,
    lease: str,
    progress: ImportProgress | None,
) -> None:
    path = archives.member_path(member.name)
    kind = archives.member_kind(path)
    if kind == "metadata":
        if member.size > content.MAX_METADATA_BYTES:
            raise errors.InvalidArgument(f"archive member {path} is too large")
        scan.meta[path] = b"".join(_member_chunks(reader))
        return
    tell = progress or (lambda ev: None)
    digest = archives.blob_digest(path)
    if digest is not None:
        sent = _store_named(
            client, path, digest, size=member.size, reader=reader, lease=lease, progress=progress
        )
        desc = Descriptor("", digest, member.size)
    else:
        desc, sent = (
            _store_unnamed(
                client, path, size=member.size, reader=reader, lease=lease, progress=tell
            ),
            True,
        )
    scan.stored[path] = desc
    key = desc.digest if digest is not None else path
    tell(ImportEvent("done" if sent else "exists", digest=key, done=desc.size, total=desc.size))


# -- what the archive holds --------------------------------------------------------------


def _head(client: Client, digest: str) -> bytes:
    return b"".join(content.read_stream(client, digest, size=_HEAD))[:_HEAD]


def _docker_images(client: Client, scan: _Scan, lease: str) -> list[ArchiveImage]:
    """Build and store a docker schema 2 manifest for each manifest.json entry."""
    out = []
    for entry in archives.docker_entries(scan.meta[archives.DOCKER_MANIFEST_FILE]):
        config = archives.resolve_member(entry.config, scan.stored, scan.symlinks)
        layers = []
        for path in entry.layers:
            layer = archives.resolve_member(path, scan.stored, scan.symlinks)
            media_type = archives.layer_media_type(_head(client, layer.digest))
            layers.append(attrs.evolve(layer, media_type=media_type))
        data = archives.docker_manifest(config, layers)
        desc = Descriptor(content.MT_DOCKER_MANIFEST, content.digest_of(data), len(data))
        labels = content.child_labels("manifest", content.load_json(data, "manifest"))
        imagestore.store_bytes(client, desc, data, lease=lease, labels=labels)
        names = archives.docker_names(entry)
        if names:
            out.append(ArchiveImage(desc, names))
    return out


def _read_json(client: Client, desc: Descriptor, what: str) -> dict[str, Any]:
    try:
        data = content.read_blob(client, desc)
    except errors.NotFound:
        raise errors.InvalidArgument(f"archive lacks {what} {desc.digest}") from None
    return content.load_json(data, f"{what} {desc.digest}")


def _check_stored(client: Client, blob: Descriptor, manifest: Descriptor) -> None:
    """The blob is in the archive with the size the manifest declares (a declared size
    that differs would have unpack and every reader trust the wrong one)."""
    try:
        size = content.info(client, blob.digest).size
    except errors.NotFound:
        raise errors.InvalidArgument(
            f"archive lacks blob {blob.digest} of manifest {manifest.digest}"
        ) from None
    if size != blob.size:
        raise errors.InvalidArgument(
            f"manifest {manifest.digest} declares blob {blob.digest} as {blob.size} bytes;"
            f" the archive's is {size}"
        )


def _label_tree(
    client: Client, desc: Descriptor, want: Sequence[Platform] | None, depth: int = 0
) -> Descriptor:
    """Check that the platforms' content is all there and label it for the GC, as
    containerd's import does; returns ``desc`` with its media type known."""
    if depth > _MAX_DEPTH:
        raise errors.InvalidArgument(f"image indexes nest deeper than {_MAX_DEPTH}")
    obj = _read_json(client, desc, "image document")
    kind = content.content_kind(desc.media_type, obj)
    if kind == "manifest":
        config, layers = content.parse_manifest(obj)
        for blob in (config, *layers):
            _check_stored(client, blob, desc)
        content.ensure_labels(client, desc.digest, content.child_labels("manifest", obj))
        return desc if desc.media_type else attrs.evolve(desc, media_type=content.MT_OCI_MANIFEST)
    kept = []
    for entry in content.index_entries(obj, f"index {desc.digest}"):
        child = Descriptor.from_json(entry, "index entry")
        mt = child.media_type
        if mt and not (content.is_manifest(mt) or content.is_index(mt)):
            continue
        plat = entry.get("platform") if isinstance(entry, dict) else None
        if want is not None and plat is not None and Platform.from_json(plat) not in want:
            continue
        if want is None and not content.exists(client, child.digest):
            continue  # all platforms: those the archive has
        kept.append(_label_tree(client, child, want, depth + 1))
    if not kept:
        shown = str(want[0]) if want else "any platform"
        raise errors.NotFound(f"archive has no manifest for {shown} in index {desc.digest}")
    labels = {f"{content.GC_REF_CONTENT}m.{i}": c.digest for i, c in enumerate(kept)}
    content.ensure_labels(client, desc.digest, labels)
    return desc if desc.media_type else attrs.evolve(desc, media_type=content.MT_OCI_INDEX)


def _image_id(client: Client, name: str, target: str) -> str:
    """What ``images`` shows as the ID of the image ``name`` names (before it moves)."""
    try:
        return images.get_image(client, name).config_digest
    except errors.CtrexecError:
        return target  # content missing or for other platforms only


@attrs.frozen
class _Options:
    platform: Platform
    all_platforms: bool
    base_name: str | None
    unpack: bool
    snapshotter: str


def _finish(
    client: Client,
    scan: _Scan,
    opts: _Options,
    *,
    lease: str,
    created: dict[str, str],
    progress: ImportProgress | None,
) -> list[ImportedImage]:
    layout = archives.check_layout(scan.meta)
    if layout == "oci":
        found = archives.oci_images(scan.meta[archives.INDEX_FILE], opts.base_name)
    else:
        found = _docker_images(client, scan, lease)
    if not found:
        raise errors.InvalidArgument("archive names no image (no image name, ref name or RepoTag)")
    want = None if opts.all_platforms else content.compatible_platforms(opts.platform)
    targets = [(_label_tree(client, img.target, want), img.names) for img in found]
    out = []
    for target, names in targets:
        replaced: dict[str, str] = {}
        for name in names:
            before = images.recorded_target(client, name)
            if before is None:
                created[name] = target.digest
            elif before != target.digest:
                replaced[name] = _image_id(client, name, before)
            images.record_image(client, name, target, lease=lease)
        if opts.unpack:
            if progress is not None:
                progress(ImportEvent("unpacking", ref=names[0], digest=target.digest))
            imagestore.unpack_image(
                client, names[0], lease=lease, platform=opts.platform, snapshotter=opts.snapshotter
            )
        for name in names:
            out.append(ImportedImage(name, target.digest, opts.unpack, replaced.get(name, "")))
            if progress is not None:
                progress(ImportEvent("imported", ref=name, digest=target.digest))
    return out


def import_archive(
    client: Client,
    source: IO[bytes] | StrPath,
    *,
    platform: Platform | str | None = None,
    all_platforms: bool = False,
    base_name: str | None = None,
    unpack: bool = True,
    snapshotter: str = images.DEFAULT_SNAPSHOTTER,
    progress: ImportProgress | None = None,
) -> list[ImportedImage]:
    """Import an OCI layout or ``docker save`` tar (a path, or a binary stream such as
    stdin; gzip-compressed is fine) and unpack it for ``platform`` (the host's).

    Names come from ``io.containerd.image.name``, else a whole
    ``org.opencontainers.image.ref.name`` (a bare tag needs ``base_name``), else
    ``RepoTags``. Content is kept for ``platform`` only, or for every platform the
    archive holds with ``all_platforms``. Bad input (not a tar, no index.json, a digest
    that does not match) raises InvalidArgument or DigestMismatch and leaves nothing."""
    opts = _Options(content.as_platform(platform), all_platforms, base_name, unpack, snapshotter)
    if base_name:
        parse_reference(base_name)
    if not isinstance(source, str | os.PathLike):
        return _import(client, source, opts, progress)
    try:
        f = Path(source).open("rb")  # noqa: SIM115 - closed below, after the import
    except OSError as exc:
        raise errors.InvalidArgument(f"cannot read {source}: {exc.strerror}") from None
    with f:
        return _import(client, f, opts, progress)


def _import(
    client: Client, source: IO[bytes], opts: _Options, progress: ImportProgress | None
) -> list[ImportedImage]:
    held = client.create_lease()
    created: dict[str, str] = {}  # name -> the target this import gave it
    try:
        scan = _scan(client, source, held.id, progress)
        result = _finish(client, scan, opts, lease=held.id, created=created, progress=progress)
    except BaseException:
        for name, digest in created.items():
            # only while it is still this import's (a pull may have re-tagged it)
            with contextlib.suppress(errors.CtrexecError):
                images.remove_image(client, name, target=digest)
        with contextlib.suppress(errors.CtrexecError):
            client.delete_lease(held.id, sync=True)
        raise
    client.delete_lease(held.id)
    return result
