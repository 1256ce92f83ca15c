"""``push``: an image of containerd's store to a registry, as docker's push does.

The local record is read first (no record: docker's "An image does not exist locally",
before any request). What goes is the record's target when all of its content is in
the store: a manifest, or an index with every manifest it lists (a multi-platform
image imported with ``--all-platforms``). An index that lacks some of its platforms
(a pull or an import keeps only the host's) cannot be pushed whole, so only this
platform's manifest goes, and the push says so. Blobs go first, in parallel: each
one the registry already has (``HEAD``) is skipped, the rest are uploaded in one
piece and retried from the start when the connection fails. Manifests follow, the
children by digest and the top by the reference's tag (or digest), with their own
media types, so the tag never names a manifest whose blobs are missing.

Auth, hosts.toml endpoints (those with the ``push`` capability) and redirects are
:class:`~ctrexec.images.registry.client.Repository`'s, the same as a pull's. Nothing is
written to containerd: a push only reads the store.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs

from ctrexec import errors
from ctrexec.containerd import content, images
from ctrexec.containerd.client import Client
from ctrexec.containerd.content import Descriptor
from ctrexec.images import lookup
from ctrexec.images import store as imagestore
from ctrexec.images.reference import parse_reference
from ctrexec.images.registry import auth, hosts
from ctrexec.images.registry.auth import Credentials
from ctrexec.images.registry.client import Repository

DEFAULT_PARALLEL = 3
#: Attempts per blob within one push; each uploads the blob again from its start.
_ATTEMPTS = 3

#: One step of a push: ``pushing`` (the image was found: ``ref`` is the repository it
#: goes to), ``exists`` (the registry has the layer), ``start``,
#: ``progress`` (``done`` bytes sent), ``done`` (a layer was uploaded), ``partial`` (only
#: this platform's manifest goes: ``media_type`` holds the platform), ``pushed`` (the
#: top document is stored under ``ref``: ``digest``, ``total`` its size).
PushEvent = imagestore.ImageEvent
Progress = Callable[[PushEvent], None]


@attrs.frozen
class PushResult:
    """What a push stored: the reference, the tag (empty for a push by digest), the
    digest and size of the document the tag now names, and ``partial``: the platform
    whose manifest alone was pushed (empty when the whole record target was)."""

    name: str
    tag: str
    digest: str
    size: int
    partial: str = ""


@attrs.frozen
class _Plan:
    """The documents to store, children first (the last is the top), and the blobs
    they need, each once; ``layers``: the digests a progress display shows."""

    docs: tuple[tuple[Descriptor, bytes], ...]
    blobs: tuple[Descriptor, ...]
    layers: frozenset[str]
    partial: str = ""


def _manifest_parts(client: Client, desc: Descriptor) -> tuple[bytes, list[Descriptor]] | None:
    """A manifest's bytes and the blobs it names; None when any of them is not stored."""
    if not content.exists(client, desc.digest):
        return None
    data = content.read_blob(client, desc)
    obj = content.load_json(data, f"manifest {desc.digest}")
    if content.content_kind(desc.media_type, obj) != "manifest":
        return None  # a nested index: pushed only as the host's manifest
    config, layers = content.parse_manifest(obj)
    blobs = [config, *layers]
    if not all(content.exists(client, b.digest) for b in blobs):
        return None
    return data, blobs


def _held(client: Client, top: Descriptor) -> frozenset[str] | None:
    """The children the index's GC labels hold; None when it has no such labels.

    A child the labels do not hold is not the image's, even while the store still has
    it: a host-only import writes every blob of the archive, labels only the host's
    manifest, and leaves the others to the next GC, which can take them mid-push (a
    push that saw them then failed with "content digest ... not found", CI, 1.7).
    """
    labels = content.info(client, top.digest).labels
    held = frozenset(v for k, v in labels.items() if k.startswith(content.GC_REF_CONTENT))
    return held or None


def _plan(client: Client, name: str, top: Descriptor) -> _Plan:
    """The whole target if the store has all of it (and the index holds it), else the
    host platform's manifest."""
    data = content.read_blob(client, top)
    obj = content.load_json(data, f"manifest {top.digest}")
    docs: list[tuple[Descriptor, bytes]] = []
    blobs: dict[str, Descriptor] = {}
    layers: set[str] = set()
    children = (
        [Descriptor.from_json(m, "index entry") for m in content.index_entries(obj, "index")]
        if content.content_kind(top.media_type, obj) == "index"
        else None
    )
    held = _held(client, top) if children is not None else None
    for child in children or []:
        ours = held is None or child.digest in held
        parts = _manifest_parts(client, child) if ours else None
        if parts is None:
            break
        docs.append((child, parts[0]))
        blobs.update((b.digest, b) for b in parts[1])
        layers.update(b.digest for b in parts[1][1:])
    else:
        if children is None:  # a manifest
            config, found = content.parse_manifest(obj)
            blobs = {b.digest: b for b in (config, *found)}
            layers = {b.digest for b in found}
        return _Plan((*docs, (top, data)), tuple(blobs.values()), frozenset(layers))
    image = images.get_image(client, name)  # the host's platform
    data = content.read_blob(client, image.manifest)
    return _Plan(
        ((image.manifest, data),),
        (image.config_descriptor, *image.layers),
        frozenset(layer.digest for layer in image.layers),
        partial=str(image.platform),
    )


def _chunks(
    client: Client, desc: Descriptor, sent: Callable[[int], None], stop: threading.Event
) -> Iterator[bytes]:
    done = 0
    for chunk in content.read_stream(client, desc.digest):
        if stop.is_set():
            raise errors.Canceled("push interrupted")
        yield chunk
        done += len(chunk)
        sent(done)


def _push_blob(
    client: Client,
    repo: Repository,
    desc: Descriptor,
    *,
    emit: Callable[..., None],
    stop: threading.Event,
) -> None:
    if stop.is_set():
        raise errors.Canceled("push interrupted")
    if repo.has_blob(desc.digest):
        emit("exists", desc, desc.size)
        return
    emit("start", desc)
    for attempt in range(_ATTEMPTS):
        try:
            repo.upload_blob(
                desc, lambda: _chunks(client, desc, lambda n: emit("progress", desc, n), stop)
            )
            break
        except errors.Unavailable:
            if attempt == _ATTEMPTS - 1:
                raise
    emit("done", desc, desc.size)


def _push_blobs(
    client: Client, repo: Repository, plan: _Plan, emit: Callable[..., None], parallel: int
) -> None:
    """The blobs in parallel; the first failure stops the rest and is raised."""

    def shown(action: str, desc: Descriptor, done: int = 0) -> None:
        if desc.digest in plan.layers:  # docker shows layers only, not the config
            emit(action, desc, done)

    stop = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        futures = [
            pool.submit(_push_blob, client, repo, d, emit=shown, stop=stop) for d in plan.blobs
        ]
        try:
            for fut in concurrent.futures.as_completed(futures):
                fut.result()
        except BaseException:
            stop.set()
            for f in futures:
                f.cancel()
            raise


def push(
    client: Client,
    ref: str,
    *,
    plain_http: bool = False,
    hosts_dir: Path | None = None,
    credentials: Credentials | None = None,
    docker_config: Path | None = None,
    parallel: int = DEFAULT_PARALLEL,
    progress: Progress | None = None,
) -> PushResult:
    """Push the image ``ref`` names here to the registry ``ref`` names. Credentials and
    endpoints as :func:`ctrexec.images.registry.pull.pull` finds them."""
    parsed = parse_reference(ref)
    name = str(parsed)
    try:
        top = images.record_target(client, lookup.image_name(ref))
    except errors.NotFound:
        raise errors.NotFound(f"An image does not exist locally with the tag: {ref}") from None
    plan = _plan(client, name, top)

    def emit(action: str, desc: Descriptor | None = None, done: int = 0) -> None:
        if progress is not None:
            d = desc or Descriptor("", "", 0)
            progress(PushEvent(action, name, d.digest, d.media_type, done, d.size))

    if progress is not None:  # docker's first line: the image is there, the push begins
        progress(PushEvent("pushing", parsed.name))
    if plan.partial:
        emit("partial", Descriptor(plan.partial, top.digest, top.size))
    if credentials is None:
        credentials = auth.lookup(parsed.domain, docker_config)
    endpoints = hosts.registry_hosts(parsed.domain, plain_http=plain_http, directory=hosts_dir)
    repo = Repository(
        parsed.domain, parsed.path, endpoints, credentials=credentials, parallel=parallel
    )
    *children, (last, data) = plan.docs
    try:
        _push_blobs(client, repo, plan, emit, parallel)
        for desc, body in children:
            repo.put_manifest(desc.digest, desc, body)
        repo.put_manifest(parsed.digest or parsed.tag, last, data)
    except errors.Unavailable as exc:  # the client's words name the registry, not the image
        raise errors.Unavailable(f"cannot push {name}: {exc}") from exc
    finally:
        repo.close()
    emit("pushed", last)
    return PushResult(name, parsed.tag, last.digest, last.size, plan.partial)
