"""containerd's content store and the image documents in it.

Descriptors, media types (OCI and docker), platforms and platform selection from an
index, the shape of indexes and manifests, GC labels, and the Content service:
reading (digest-checked), writing, label updates, and adoption across namespaces.

A blob is named by its digest. containerd keeps one copy of each blob on disk and a
per-namespace record of which namespaces may see it; with the default ``shared``
content policy, committing a blob that is already on disk into another namespace
moves no data (:func:`adopt_blob`). Everything read here is checked against its
digest before it is returned.

GC labels: a blob carrying ``containerd.io/gc.ref.content.<x>=<digest>`` keeps that
other blob alive, and ``containerd.io/gc.ref.snapshot.<snapshotter>=<key>`` keeps a
snapshot alive. An image record keeps its target blob alive, so a chain of labels
(index -> manifest -> config and layers -> snapshot) keeps a whole image.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import platform as _host
import queue
import re
import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

import attrs
from google.protobuf import empty_pb2, field_mask_pb2
from google.protobuf.message import Message

from ctrexec import _rpc, errors
from ctrexec._api.containerd.services.content.v1 import content_pb2
from ctrexec._api.containerd.types import descriptor_pb2
from ctrexec.containerd._proto import from_timestamp
from ctrexec.containerd.client import Client
from ctrexec.ids import validate_digest

# -- media types ---------------------------------------------------------------------

MT_OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MT_OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
MT_OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
MT_OCI_LAYER_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
MT_OCI_LAYER_ND = "application/vnd.oci.image.layer.nondistributable.v1.tar"
MT_OCI_LAYER_ND_GZIP = "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip"
MT_OCI_LAYER_ND_ZSTD = "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd"
MT_DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MT_DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MT_DOCKER_MANIFEST_V1 = "application/vnd.docker.distribution.manifest.v1+prettyjws"
MT_DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
MT_DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar"
MT_DOCKER_LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
MT_DOCKER_LAYER_FOREIGN = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"

INDEX_TYPES = frozenset({MT_OCI_INDEX, MT_DOCKER_MANIFEST_LIST})
MANIFEST_TYPES = frozenset({MT_OCI_MANIFEST, MT_DOCKER_MANIFEST})
CONFIG_TYPES = frozenset({MT_OCI_CONFIG, MT_DOCKER_CONFIG})
#: Layer media type -> compression, for every layer type containerd's differ applies.
LAYER_TYPES: Mapping[str, str] = {
    MT_OCI_LAYER: "",
    MT_OCI_LAYER_GZIP: "gzip",
    MT_OCI_LAYER_ZSTD: "zstd",
    MT_OCI_LAYER_ND: "",
    MT_OCI_LAYER_ND_GZIP: "gzip",
    MT_OCI_LAYER_ND_ZSTD: "zstd",
    MT_DOCKER_LAYER: "",
    MT_DOCKER_LAYER_GZIP: "gzip",
    MT_DOCKER_LAYER_FOREIGN: "gzip",
}


def is_index(media_type: str) -> bool:
    return media_type in INDEX_TYPES


def is_manifest(media_type: str) -> bool:
    return media_type in MANIFEST_TYPES


def is_config(media_type: str) -> bool:
    return media_type in CONFIG_TYPES


def layer_compression(media_type: str) -> str:
    """``""`` (plain tar), ``"gzip"`` or ``"zstd"``; InvalidArgument for anything else."""
    try:
        return LAYER_TYPES[media_type]
    except KeyError:
        raise errors.InvalidArgument(f"unsupported layer media type {media_type!r}") from None


# -- labels --------------------------------------------------------------------------

GC_REF_CONTENT = "containerd.io/gc.ref.content."
GC_REF_SNAPSHOT = "containerd.io/gc.ref.snapshot."
LABEL_UNCOMPRESSED = "containerd.io/uncompressed"
LABEL_DISTRIBUTION_SOURCE = "containerd.io/distribution.source."
#: Labels that describe the blob itself and are worth carrying to another namespace.
#: Snapshot references are not among them: snapshots are per namespace.
PORTABLE_LABEL_PREFIXES = (GC_REF_CONTENT, LABEL_UNCOMPRESSED, LABEL_DISTRIBUTION_SOURCE)


def gc_snapshot_label(snapshotter: str) -> str:
    return f"{GC_REF_SNAPSHOT}{snapshotter}"


def portable_labels(labels: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k.startswith(PORTABLE_LABEL_PREFIXES)}


# -- digests and descriptors -----------------------------------------------------------

#: Manifests, indexes and configs are small; a bigger one is refused, not buffered.
MAX_METADATA_BYTES = 32 * 1024 * 1024
#: An index lists one manifest per platform (and an attestation each): a few dozen.
#: One with more is refused, not walked (each entry may cost a fetch).
MAX_INDEX_ENTRIES = 1000
#: Deadline for calls that move or unpack layer data.
DATA_TIMEOUT = 3600.0
_CHUNK = 1024 * 1024
#: Writes of one blob sent ahead of containerd's answers (at most this many MiB held).
_WINDOW = 4


def digest_of(data: bytes, algorithm: str = "sha256") -> str:
    return f"{algorithm}:{hashlib.new(algorithm, data).hexdigest()}"


@attrs.frozen
class Descriptor:
    """An OCI descriptor: what a blob is, its digest and its size."""

    media_type: str
    digest: str
    size: int
    annotations: Mapping[str, str] = attrs.field(factory=dict)

    @classmethod
    def from_json(cls, obj: Any, what: str = "descriptor") -> Descriptor:
        """Parse the JSON form used in manifests and indexes; InvalidArgument if malformed."""
        if not isinstance(obj, dict):
            raise errors.InvalidArgument(f"{what} is not an object")
        media_type, digest, size = obj.get("mediaType", ""), obj.get("digest"), obj.get("size")
        annotations = obj.get("annotations") or {}
        if not isinstance(media_type, str) or not isinstance(digest, str):
            raise errors.InvalidArgument(f"{what} has no valid mediaType/digest")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise errors.InvalidArgument(f"{what} {digest} has an invalid size")
        if not isinstance(annotations, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in annotations.items()
        ):
            raise errors.InvalidArgument(f"{what} {digest} has invalid annotations")
        return cls(media_type, validate_digest(digest), size, dict(annotations))

    @classmethod
    def from_proto(cls, msg: descriptor_pb2.Descriptor) -> Descriptor:
        return cls(msg.media_type, msg.digest, msg.size, dict(msg.annotations))

    def to_proto(self) -> descriptor_pb2.Descriptor:
        return descriptor_pb2.Descriptor(
            media_type=self.media_type,
            digest=self.digest,
            size=self.size,
            annotations=dict(self.annotations),
        )


@attrs.frozen
class ContentInfo:
    """What the content store knows about one blob in one namespace."""

    digest: str
    size: int
    labels: Mapping[str, str]
    created: datetime | None
    updated: datetime | None

    @classmethod
    def from_proto(cls, msg: content_pb2.Info) -> ContentInfo:
        return cls(
            msg.digest,
            msg.size,
            dict(msg.labels),
            from_timestamp(msg.created_at),
            from_timestamp(msg.updated_at),
        )


# -- platforms ---------------------------------------------------------------------------


@attrs.frozen
class Platform:
    """An OCI platform, normalized the way containerd normalizes it."""

    os: str
    architecture: str
    variant: str = ""

    def __str__(self) -> str:
        return "/".join(p for p in (self.os, self.architecture, self.variant) if p)

    @classmethod
    def of(cls, os: str, architecture: str, variant: str = "") -> Platform:
        arch, var = architecture.lower(), variant.lower()
        if arch in ("x86_64", "x86-64", "amd64"):
            arch, var = "amd64", "" if var == "v1" else var
        elif arch in ("aarch64", "arm64"):
            arch, var = "arm64", "" if var in ("8", "v8", "v8.0") else var
        elif arch == "armhf":
            arch, var = "arm", "v7"
        elif arch == "armel":
            arch, var = "arm", "v6"
        elif arch == "arm":
            var = "v7" if var in ("", "7") else (f"v{var}" if var in ("5", "6", "8") else var)
        elif arch in ("i386", "i486", "i586", "i686", "x86"):
            arch = "386"
        return cls(os.lower(), arch, var)

    @classmethod
    def parse(cls, text: str) -> Platform:
        """``linux/amd64``, ``linux/arm/v7``, ``arm64`` (OS defaults to linux)."""
        parts = text.strip().split("/")
        if not 1 <= len(parts) <= 3 or not all(re.fullmatch(r"[A-Za-z0-9_.-]+", p) for p in parts):
            raise errors.InvalidArgument(f"invalid platform {text!r}: use os/arch[/variant]")
        if len(parts) == 1:
            if parts[0].lower() in ("linux", "windows", "darwin", "freebsd"):
                return cls.of(parts[0], cls.host().architecture, cls.host().variant)
            return cls.of("linux", parts[0])
        return cls.of(parts[0], parts[1], parts[2] if len(parts) == 3 else "")

    @classmethod
    def from_json(cls, obj: Any) -> Platform:
        if not isinstance(obj, dict):
            raise errors.InvalidArgument("platform is not an object")
        fields = [obj.get(k) or "" for k in ("os", "architecture", "variant")]
        if not all(isinstance(f, str) for f in fields):
            raise errors.InvalidArgument("platform fields must be strings")
        return cls.of(*fields)

    @classmethod
    def host(cls) -> Platform:
        machine = _host.machine().lower()
        if machine.startswith("armv") and machine[4:5].isdigit():
            return cls.of("linux", "arm", f"v{machine[4]}")
        return cls.of("linux", machine or "amd64")


def compatible_platforms(want: Platform) -> list[Platform]:
    """What a host of platform ``want`` runs, best first (arm v7 also runs v6, v5)."""
    out = [want]
    if want.architecture == "arm" and re.fullmatch(r"v[5-8]", want.variant):
        out += [Platform(want.os, "arm", f"v{n}") for n in range(int(want.variant[1]) - 1, 4, -1)]
    elif want.architecture == "amd64" and re.fullmatch(r"v[2-4]", want.variant):
        levels = range(int(want.variant[1]) - 1, 0, -1)
        out += [Platform(want.os, "amd64", f"v{n}" if n > 1 else "") for n in levels]
    return out


def as_platform(value: Platform | str | None) -> Platform:
    if value is None:
        return Platform.host()
    return value if isinstance(value, Platform) else Platform.parse(value)


def index_entries(index: Mapping[str, Any], what: str) -> list[Any]:
    """An index's ``manifests``, bounded by MAX_INDEX_ENTRIES."""
    entries = index.get("manifests")
    if not isinstance(entries, list):
        raise errors.InvalidArgument(f"{what} has no manifests list")
    if len(entries) > MAX_INDEX_ENTRIES:
        raise errors.ResourceExhausted(
            f"{what} lists {len(entries)} manifests, more than {MAX_INDEX_ENTRIES}: refused"
        )
    return entries


def select_manifests(index: Mapping[str, Any], want: Platform) -> list[tuple[Descriptor, bool]]:
    """Index entries that may serve ``want``, best first; the flag says the entry had
    no platform, so its config must be checked."""
    entries = index_entries(index, "image index")
    wanted = compatible_platforms(want)
    ranked: list[tuple[int, int, Descriptor, bool]] = []
    for pos, entry in enumerate(entries):
        desc = Descriptor.from_json(entry, "index entry")
        mt = desc.media_type
        if mt and not (is_manifest(mt) or is_index(mt)):
            continue  # attestations, signatures and other artifacts
        if entry.get("platform") is None:
            ranked.append((len(wanted), pos, desc, True))
            continue
        plat = Platform.from_json(entry["platform"])
        if plat in wanted:
            ranked.append((wanted.index(plat), pos, desc, False))
    return [(d, unchecked) for _, _, d, unchecked in sorted(ranked, key=lambda r: r[:2])]


# -- image documents (index, manifest) ----------------------------------------------------


def load_json(data: bytes, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(data)
    except ValueError as exc:
        raise errors.InvalidArgument(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise errors.InvalidArgument(f"{what} is not a JSON object")
    return obj


def json_strings(value: Any, what: str) -> tuple[str, ...]:
    """A JSON field that is a list of strings (absent: empty), in image configs and
    archive manifests alike; InvalidArgument naming ``what`` for anything else."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise errors.InvalidArgument(f"{what} must be a list of strings")
    return tuple(value)


def parse_manifest(obj: Mapping[str, Any]) -> tuple[Descriptor, tuple[Descriptor, ...]]:
    """A manifest's config descriptor and layer descriptors."""
    config = Descriptor.from_json(obj.get("config"), "manifest config")
    if not is_config(config.media_type):
        raise errors.InvalidArgument(
            f"not a container image: config media type {config.media_type!r}"
        )
    layers = obj.get("layers")
    if not isinstance(layers, list):
        raise errors.InvalidArgument("manifest has no layers list")
    return config, tuple(Descriptor.from_json(layer, "layer") for layer in layers)


def content_kind(media_type: str, obj: Mapping[str, Any]) -> str:
    """``"index"`` or ``"manifest"``, from the descriptor's media type or the JSON."""
    inner = obj.get("mediaType")
    if media_type == MT_DOCKER_MANIFEST_V1 or obj.get("schemaVersion") == 1:
        raise errors.InvalidArgument("docker schema 1 manifests are not supported")
    has_list = "manifests" in obj
    for mt in (media_type, inner if isinstance(inner, str) else ""):
        if is_index(mt):
            kind = "index"
            break
        if is_manifest(mt):
            kind = "manifest"
            break
    else:
        if has_list or ("config" in obj and "layers" in obj):
            kind = "index" if has_list else "manifest"
        else:
            raise errors.InvalidArgument(f"media type {media_type!r} is not an image or index")
    if has_list != (kind == "index"):
        raise errors.InvalidArgument(f"content of type {media_type!r} looks like the other kind")
    return kind


def child_labels(kind: str, obj: Mapping[str, Any]) -> dict[str, str]:
    """The GC labels containerd puts on an index or manifest blob for its children."""
    if kind == "index":
        return {
            f"{GC_REF_CONTENT}m.{i}": Descriptor.from_json(m, "index entry").digest
            for i, m in enumerate(obj.get("manifests") or [])
        }
    config, layers = parse_manifest(obj)
    labels = {f"{GC_REF_CONTENT}config": config.digest}
    labels.update({f"{GC_REF_CONTENT}l.{i}": layer.digest for i, layer in enumerate(layers)})
    return labels


# -- reading ---------------------------------------------------------------------------


def info(client: Client, digest: str) -> ContentInfo:
    resp = client._call(
        _rpc.CONTENT,
        "Info",
        content_pb2.InfoRequest(digest=validate_digest(digest)),
        content_pb2.InfoResponse,
    )
    return ContentInfo.from_proto(resp.info)


def exists(client: Client, digest: str) -> bool:
    try:
        info(client, digest)
    except errors.NotFound:
        return False
    return True


def read_stream(client: Client, digest: str, offset: int = 0, size: int = 0) -> Iterator[bytes]:
    """Yield the blob's bytes from ``offset`` on (``size`` of them; 0: to the end),
    checking the stream is contiguous."""
    stream = client._connection.server_stream(
        _rpc.CONTENT,
        "Read",
        content_pb2.ReadContentRequest(digest=digest, offset=offset, size=size),
        content_pb2.ReadContentResponse,
        namespace=client.namespace,
        timeout=DATA_TIMEOUT,
    )
    try:
        pos = offset
        for chunk in stream:
            if chunk.offset != pos:
                raise errors.Internal(f"content {digest}: read at {chunk.offset}, expected {pos}")
            pos += len(chunk.data)
            yield chunk.data
    finally:
        stream.cancel()


def read_blob(client: Client, desc: Descriptor, *, max_size: int = MAX_METADATA_BYTES) -> bytes:
    """Read a whole (small) blob and check its size and digest."""
    if desc.size > max_size:
        raise errors.ResourceExhausted(
            f"content {desc.digest} is {desc.size} bytes; at most {max_size} are read"
        )
    validate_digest(desc.digest)
    parts: list[bytes] = []
    total = 0
    for data in read_stream(client, desc.digest):
        total += len(data)
        if total > desc.size:
            break
        parts.append(data)
    blob = b"".join(parts)
    algorithm = desc.digest.split(":", 1)[0]
    if total != desc.size or digest_of(blob, algorithm) != desc.digest:
        raise errors.Internal(
            f"content {desc.digest} is corrupt: {total} bytes read, {desc.size} expected"
            " or digest mismatch"
        )
    return blob


# -- labels ------------------------------------------------------------------------------


def update_labels(client: Client, digest: str, labels: Mapping[str, str]) -> ContentInfo:
    """Set (or, with an empty value, remove) only the given label keys on a blob."""
    req = content_pb2.UpdateRequest(
        info=content_pb2.Info(digest=validate_digest(digest), labels=dict(labels)),
        update_mask=field_mask_pb2.FieldMask(paths=[f"labels.{k}" for k in labels]),
    )
    return ContentInfo.from_proto(
        client._call(_rpc.CONTENT, "Update", req, content_pb2.UpdateResponse).info
    )


def ensure_labels(client: Client, digest: str, labels: Mapping[str, str]) -> bool:
    """Set the labels that are missing or different; True when anything changed."""
    current = info(client, digest).labels
    todo = {k: v for k, v in labels.items() if current.get(k) != v}
    if todo:
        update_labels(client, digest, todo)
    return bool(todo)


# -- writing -------------------------------------------------------------------------------


class WriteSession:
    """One Content.Write bidi stream driven request by request: the one writer of
    content, for adoption here and for pulls and imports above."""

    def __init__(self, client: Client, ref: str, lease: str | None) -> None:
        self.ref = ref
        self.client = client
        self._queue: queue.SimpleQueue[Message | None] = queue.SimpleQueue()
        self._stream = client._connection.bidi_stream(
            _rpc.CONTENT,
            "Write",
            self._requests(),
            content_pb2.WriteContentResponse,
            namespace=client.namespace,
            lease=lease,
            timeout=DATA_TIMEOUT,
        )
        self._open = True

    def _requests(self) -> Iterator[Message]:
        while (item := self._queue.get()) is not None:
            yield item

    def _send(self, **fields: Any) -> content_pb2.WriteContentResponse:
        self._queue.put(content_pb2.WriteContentRequest(ref=self.ref, **fields))
        try:
            return next(self._stream)
        except StopIteration:
            raise errors.Internal(f"content write {self.ref}: stream ended early") from None

    def stat(self, total: int, expected: str = "") -> int:
        """Open the ingest; the offset an earlier attempt reached. AlreadyExists when
        the namespace has ``expected`` already."""
        return int(self._send(action=content_pb2.STAT, total=total, expected=expected).offset)

    def write(
        self,
        start: int,
        chunks: Iterable[bytes],
        desc: Descriptor,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Send ``chunks`` from ``start`` on; the offset reached. ``progress`` hears each
        offset containerd has written, never one merely sent.

        Up to :data:`_WINDOW` writes are in flight before the first answer is read
        (containerd answers each one, in order): waiting for each answer before the
        next send left containerd idle while this side read its next chunk, and this
        side idle while containerd wrote and hashed. When ``chunks`` fails (the
        source went away), the writes in flight are waited for before the failure
        goes up: the ingest then keeps every byte sent, for a retry to resume from."""
        offset = start
        pending: collections.deque[int] = collections.deque()
        source = iter(chunks)
        while True:
            try:
                data = next(source)
            except StopIteration:
                break
            except BaseException:
                with contextlib.suppress(errors.CtrexecError):
                    while pending:
                        self._written(pending.popleft(), desc, progress)
                raise
            for i in range(0, len(data), _CHUNK):
                piece = data[i : i + _CHUNK]
                offset += len(piece)
                if offset > desc.size:
                    raise errors.Internal(f"content {desc.digest}: more than {desc.size} bytes")
                self._queue.put(
                    content_pb2.WriteContentRequest(
                        ref=self.ref,
                        action=content_pb2.WRITE,
                        offset=offset - len(piece),
                        data=piece,
                    )
                )
                pending.append(offset)
                if len(pending) >= _WINDOW:
                    self._written(pending.popleft(), desc, progress)
        while pending:
            self._written(pending.popleft(), desc, progress)
        return offset

    def _written(self, want: int, desc: Descriptor, progress: Callable[[int], None] | None) -> None:
        try:
            resp = next(self._stream)
        except StopIteration:
            raise errors.Internal(f"content write {self.ref}: stream ended early") from None
        if resp.offset != want:
            raise errors.Internal(f"content {desc.digest}: write reached {resp.offset}")
        if progress is not None:
            progress(want)

    def commit(self, desc: Descriptor, offset: int, labels: Mapping[str, str]) -> None:
        """containerd checks the digest and size: FailedPrecondition when they differ."""
        if offset != desc.size:
            raise errors.Internal(f"content {desc.digest}: {offset} of {desc.size} bytes written")
        resp = self._send(
            action=content_pb2.COMMIT,
            offset=offset,  # offset 0 would ask containerd to truncate the ingest
            total=desc.size,
            expected=desc.digest,
            labels=dict(labels),
        )
        if resp.digest and resp.digest != desc.digest:
            raise errors.Internal(f"content {desc.digest}: committed as {resp.digest}")

    def finish(self) -> None:
        """Half-close and read what is left (containerd echoes the last status)."""
        self._queue.put(None)
        self._open = False
        for _ in self._stream:
            pass

    def close(self) -> None:
        """Stop the stream but keep the partial ingest, for a later write to resume."""
        if self._open:
            self._queue.put(None)
            self._open = False
            self._stream.cancel()

    def abort(self) -> None:
        """Stop the stream and drop the partial ingest; safe after finish()."""
        self.close()
        with contextlib.suppress(errors.CtrexecError):
            self.client._call(
                _rpc.CONTENT, "Abort", content_pb2.AbortRequest(ref=self.ref), empty_pb2.Empty
            )


def begin_write(session: WriteSession, desc: Descriptor, labels: Mapping[str, str]) -> int | None:
    """Where to write ``desc`` from (an earlier attempt's offset, else 0); None when the
    namespace has the blob already: the session is then dropped and only the missing
    ``labels`` set. Any other failure is the caller's: whether to keep the ingest."""
    try:
        offset = session.stat(desc.size, desc.digest)
    except errors.AlreadyExists:
        session.abort()  # nothing was ingested; Abort of an unknown ref is harmless
        if labels:
            ensure_labels(session.client, desc.digest, labels)
        return None
    return offset if 0 <= offset <= desc.size else 0


def _ref(kind: str, digest: str) -> str:
    return f"ctrexec-{kind}-{digest.split(':', 1)[-1][:16]}-{secrets.token_hex(4)}"


def adopt_blob(
    source: Client,
    dest: Client,
    desc: Descriptor,
    *,
    lease: str,
    labels: Mapping[str, str] | None = None,
) -> bool:
    """Make a blob of ``source``'s namespace visible in ``dest``'s, under ``lease``.

    A STAT answers with offset == total when the blob is already on disk (any
    namespace, shared policy); the COMMIT then only records it in ``dest``: no data
    moves. Otherwise the bytes are streamed from ``source``. A blob ``dest`` already
    has only gets the missing ``labels``. Returns True when data had to be copied.
    """
    validate_digest(desc.digest)
    session = WriteSession(dest, _ref("adopt", desc.digest), lease)
    copied = False
    try:
        offset = begin_write(session, desc, labels or {})
        if offset is None:
            return False
        if offset < desc.size:
            copied = True
            offset = session.write(offset, read_stream(source, desc.digest, offset), desc)
        session.commit(desc, offset, labels or {})
        session.finish()
    except BaseException:
        session.abort()
        raise
    return copied
