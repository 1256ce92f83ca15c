"""Bringing an image into containerd's store: the steps a pull and an import share.

A pull (from a registry) and an import (from an archive) both end the same way:
blobs are written into the content store with the digest and size their descriptor
names, leaves first; each index and manifest carries the GC labels containerd's own
pull sets for its children; the image record is created (or moved) only once all of
its content is stored; then the layers are unpacked. All of it happens under one
lease, so that nothing is collected half-way.

API (stable; the registry and archive code build on it)::

    with lease(client, key="docker.io/library/busybox:latest") as le:
        store_blob(client, layer_desc, source, lease=le.id)            # streamed, resumable
        store_bytes(client, manifest_desc, data, lease=le.id,
                    labels=manifest_labels(obj, source=("docker.io", "library/busybox")))
        images.record_image(client, name, target_desc, lease=le.id)  # containerd/images
        image = unpack_image(client, name, lease=le.id, platform=None)

Resumption: a blob's ingest is named after its digest (:func:`ingest_ref`), and a lease
with a ``key`` is named after the key and kept (until its TTL) when the block ends with
an error a retry may fix, so a second attempt finds the partial ingest and continues
from its offset. Blobs already on disk in any namespace are committed without their
bytes (containerd's shared content policy); blobs already in this namespace only get
missing labels.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import timedelta
from typing import Any

import attrs

from ctrexec import errors, ids
from ctrexec.containerd import content, images
from ctrexec.containerd.client import Client, Lease
from ctrexec.containerd.content import Descriptor, Platform

#: A resumable byte source: called with an offset, yields the blob's bytes from there.
BlobSource = Callable[[int], Iterable[bytes]]
#: Told the blob's offset after every chunk (the first call gives the resume point).
ByteProgress = Callable[[int], None]

#: How long a kept lease (an interrupted pull) holds its partial downloads.
RESUME_TTL = timedelta(hours=24)
#: Errors a retry will not fix: the lease and its partial content go at once.
_FINAL_ERRORS = (
    errors.DigestMismatch,
    errors.InvalidArgument,
    errors.NotFound,
    errors.PermissionDenied,
    errors.RegistryRefused,
)
#: How long to wait for another writer that holds a blob's ingest ref.
_LOCKED_WAIT = 600.0


@attrs.frozen
class ImageEvent:
    """One step of a pull or an import, for a progress display (one renderer draws
    both). Called from the thread doing the step (a pull's are workers).

    ``action``: ``missing`` (``ref`` is not in the store: a pull by the ``missing``
    policy begins), ``resolved`` (a pull's target: ``digest``), ``exists`` (the store had
    the blob: nothing sent), ``start`` (a blob begins: ``total``; ``done`` is a resume
    offset), ``progress`` (``done``), ``done`` (stored, its digest checked),
    ``unpacking`` (the image's: ``digest`` is the target), ``extracting`` and
    ``extracted`` (a pull's layer, unpacked once the layers below it are: docker's
    "Extracting" and "Pull complete"; none for a layer that was unpacked already), then
    ``pulled`` or ``imported`` (``ref``, ``digest``). A pull reports ``unpacking`` and
    its layers' unpacking while later blobs still download. An imported blob that no
    name gives a digest (a docker ``layer.tar``) goes by its member path until stored."""

    action: str
    ref: str = ""
    digest: str = ""
    media_type: str = ""
    done: int = 0
    total: int = 0

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


def ingest_ref(digest: str) -> str:
    """The content-store ingest ref of a blob: the same in every attempt, so a retry
    resumes where the last one stopped (and two writers of one blob serialize)."""
    return f"ctrexec-ingest-{ids.validate_digest(digest)}"


def _lease_id(key: str) -> str:
    return f"ctrexec-pull-{hashlib.sha256(key.encode()).hexdigest()[:24]}"


@contextlib.contextmanager
def lease(
    client: Client, key: str | None = None, *, ttl: timedelta = RESUME_TTL
) -> Iterator[Lease]:
    """A lease for one pull or import. With ``key`` (the reference), the lease id is
    derived from it and an existing one is reused: the lease that an interrupted
    attempt left holds its partial ingests. Deleted on success and on a final error
    (a digest mismatch, bad input, not found, denied), kept otherwise (until ``ttl``)."""
    if key is None:
        with client.lease(ttl=ttl) as own:
            yield own
        return
    lid = _lease_id(key)
    try:
        held = client.create_lease(lease_id=lid, ttl=ttl, labels={"ctrexec/lease-key": key[:4000]})
    except errors.AlreadyExists:
        held = Lease(id=lid, labels={})
    try:
        yield held
    except _FINAL_ERRORS:
        _drop_lease(client, lid)
        raise
    except BaseException:
        raise  # an interruption: keep the lease, a retry resumes
    else:
        _drop_lease(client, lid)


def _drop_lease(client: Client, lease_id: str) -> None:
    with contextlib.suppress(errors.NotFound):
        client.delete_lease(lease_id)


# -- labels ----------------------------------------------------------------------------


def distribution_source_label(host: str, repository: str) -> dict[str, str]:
    """``containerd.io/distribution.source.<host>=<repo>``: where a blob came from, as
    containerd's pull records it (a later push can then mount instead of upload)."""
    return {f"{content.LABEL_DISTRIBUTION_SOURCE}{host}": repository}


def manifest_labels(
    kind: str, obj: Mapping[str, Any], *, source: tuple[str, str] | None = None
) -> dict[str, str]:
    """The labels of an index (``kind="index"``) or manifest blob: GC refs to its
    children, plus the distribution source when it came from a registry."""
    labels = content.child_labels(kind, obj)
    if source is not None:
        labels.update(distribution_source_label(*source))
    return labels


# -- blobs -----------------------------------------------------------------------------


def store_bytes(
    client: Client,
    desc: Descriptor,
    data: bytes,
    *,
    lease: str,
    labels: Mapping[str, str] | None = None,
) -> None:
    """Store a small blob held in memory (a manifest, an index, a config), after
    checking it against ``desc``: DigestMismatch and nothing written if it differs."""
    algorithm = desc.digest.split(":", 1)[0]
    if len(data) != desc.size or content.digest_of(data, algorithm) != desc.digest:
        raise errors.DigestMismatch(
            f"content {desc.digest}: got {len(data)} bytes with digest "
            f"{content.digest_of(data, algorithm)}, expected {desc.size} bytes"
        )
    store_blob(client, desc, lambda offset: [data[offset:]], lease=lease, labels=labels)


def store_blob(
    client: Client,
    desc: Descriptor,
    source: BlobSource,
    *,
    lease: str,
    labels: Mapping[str, str] | None = None,
    progress: ByteProgress | None = None,
) -> bool:
    """Stream one blob into the content store under ``lease``, verified by containerd
    against ``desc``'s digest and size at commit. Returns True when bytes were sent.

    Already in this namespace: only missing ``labels`` are set. On disk in another
    namespace: committed with no data. A partial ingest of an earlier attempt: resumed
    from its offset (``source`` is called with it). A digest or size mismatch raises
    DigestMismatch and drops the ingest; any other failure keeps it for a retry."""
    ids.validate_digest(desc.digest)
    deadline = time.monotonic() + _LOCKED_WAIT
    while True:
        try:
            return _store_once(
                client, desc, source, lease=lease, labels=labels or {}, progress=progress
            )
        except errors.Unavailable as exc:
            # containerd's "ref ... locked": another writer has this blob's ingest
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _store_once(
    client: Client,
    desc: Descriptor,
    source: BlobSource,
    *,
    lease: str,
    labels: Mapping[str, str],
    progress: ByteProgress | None,
) -> bool:
    session = content.WriteSession(client, ingest_ref(desc.digest), lease)
    try:
        offset = content.begin_write(session, desc, labels)
        if offset is None:
            return False
        if progress is not None:
            progress(offset)
        sent = offset < desc.size
        if sent:
            offset = _write(session, desc, offset, source(offset), progress)
        try:
            session.commit(desc, offset, labels)
        except errors.FailedPrecondition as exc:
            raise errors.DigestMismatch(f"content {desc.digest}: {exc}") from exc
        session.finish()
    except (errors.DigestMismatch, errors.InvalidArgument, errors.RegistryRefused):
        session.abort()
        raise
    except BaseException:
        session.close()  # keep the ingest: a retry resumes from its offset
        raise
    return sent


def _write(
    session: content.WriteSession,
    desc: Descriptor,
    offset: int,
    chunks: Iterable[bytes],
    progress: ByteProgress | None,
) -> int:
    def counted() -> Iterator[bytes]:
        pos = offset
        for data in chunks:
            if pos + len(data) > desc.size:
                raise errors.DigestMismatch(
                    f"content {desc.digest}: source sent more than {desc.size} bytes"
                )
            yield data
            pos += len(data)

    end = session.write(offset, counted(), desc, progress)
    if end != desc.size:
        raise errors.Unavailable(f"content {desc.digest}: source ended at {end} of {desc.size}")
    return end


# -- unpacking ---------------------------------------------------------------------------


def unpack_image(
    client: Client,
    name: str,
    *,
    lease: str,
    platform: Platform | str | None = None,
    snapshotter: str = images.DEFAULT_SNAPSHOTTER,
) -> images.Image:
    """Resolve the recorded image for ``platform`` and unpack its layers under
    ``lease``; the config's snapshot GC label then keeps the snapshots alive."""
    image = images.get_image(client, name, platform=platform)
    images.unpack(client, image, snapshotter=snapshotter, lease=lease)
    return image
