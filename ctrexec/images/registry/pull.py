"""``pull``: an image from a registry into containerd's store, verified and unpacked.

The manifest is resolved by tag or digest; an index (or docker manifest list) is
narrowed to the platform as :func:`content.select_manifests` ranks it. Config and
layers then come in parallel (``parallel`` at most), each streamed into the content
store by :func:`imagestore.store_blob`, which skips blobs the store already has (in
any namespace) and resumes partial ones; containerd checks each digest as it commits.
Each layer is unpacked (Prepare, Diff.Apply, Commit) as soon as its blob is committed
and the layers below it are unpacked, while the later ones still download, as
containerd's own pull does. Manifests and indexes are stored after their children,
with containerd's GC labels, and the image record last, so a failure at any point
leaves no record; a digest mismatch also drops the lease, and GC takes the rest
(content and snapshots alike). Everything runs under a lease keyed by the reference:
an interrupted pull leaves its partial downloads and the layers it unpacked there, and
the next pull of the reference resumes them.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ctrexec import errors
from ctrexec.containerd import content, images, snapshots
from ctrexec.containerd.client import Client
from ctrexec.containerd.content import Descriptor, Platform
from ctrexec.ids import validate_id
from ctrexec.images import lookup
from ctrexec.images import store as imagestore
from ctrexec.images.reference import normalize_reference, parse_reference

if TYPE_CHECKING:
    from ctrexec.images.registry.auth import Credentials
    from ctrexec.images.registry.client import Repository

DEFAULT_PARALLEL = 3
#: Attempts per blob within one pull; each resumes where the last stopped.
_ATTEMPTS = 3
_MAX_DEPTH = 4
PULL_POLICIES = ("missing", "always", "never")


#: One step of a pull (the public name of what an import reports too).
PullEvent = imagestore.ImageEvent
Progress = Callable[[PullEvent], None]


@attrs.frozen
class _Doc:
    """A manifest or index fetched on the way down, stored after its children."""

    desc: Descriptor
    data: bytes
    kind: str
    obj: dict[str, Any]


def _resolve(
    repo: Repository, top: Descriptor, data: bytes, want: Platform, depth: int = 0
) -> list[_Doc] | None:
    """The documents from the target down to ``want``'s manifest, top first."""
    if depth > _MAX_DEPTH:
        raise errors.InvalidArgument(f"image indexes nest deeper than {_MAX_DEPTH}")
    obj = content.load_json(data, f"manifest {top.digest}")
    kind = content.content_kind(top.media_type, obj)
    doc = _Doc(top, data, kind, obj)
    if kind == "manifest":
        return [doc]
    for child, unchecked in content.select_manifests(obj, want):
        desc, body = repo.manifest(child.digest, resolve=False)
        desc = Descriptor(child.media_type or desc.media_type, desc.digest, desc.size)
        below = _resolve(repo, desc, body, want, depth + 1)
        if below is None:
            continue
        if unchecked and not _config_fits(repo, below[-1], want):
            continue
        return [doc, *below]
    return None


def _config_fits(repo: Repository, manifest: _Doc, want: Platform) -> bool:
    config, _ = content.parse_manifest(manifest.obj)
    blob = images.parse_config_blob(repo.blob_bytes(config))
    return blob.platform is None or blob.platform in content.compatible_platforms(want)


def _until_stopped(chunks: Iterable[bytes], stop: threading.Event) -> Iterator[bytes]:
    for chunk in chunks:
        if stop.is_set():
            raise errors.Canceled("pull interrupted")
        yield chunk


def _store_one(
    client: Client,
    repo: Repository,
    desc: Descriptor,
    *,
    lease: str,
    labels: Mapping[str, str],
    emit: Callable[..., None],
    stop: threading.Event,
) -> None:
    if stop.is_set():
        raise errors.Canceled("pull interrupted")
    # Not a bare Info first: a blob the namespace has already (an image just removed
    # holds it no longer) is taken into the pull's lease by the write's stat, so a GC
    # between here and the unpack can't remove it (2.x collects at once after an rmi).
    started = False

    def on_bytes(offset: int) -> None:
        nonlocal started
        emit("progress" if started else "start", desc, offset)
        started = True

    for attempt in range(_ATTEMPTS):
        try:
            imagestore.store_blob(
                client,
                desc,
                lambda off: _until_stopped(repo.blob(desc, off), stop),
                lease=lease,
                labels=labels,
                progress=on_bytes,
            )
            break
        except errors.Unavailable:
            if attempt == _ATTEMPTS - 1:
                raise
            started = False
    if started:
        emit("done", desc, desc.size)
    else:
        emit("exists", desc)


def _raise_first_failure(futures: Sequence[Future[None]]) -> None:
    for f in futures:
        if f.done() and not f.cancelled() and f.exception() is not None:
            f.result()


def _wait_for(futures: Sequence[Future[None]], fut: Future[None]) -> None:
    """Until ``fut`` is done; a failure of any download raises at once, not when the
    unpack reaches that layer."""
    while True:
        _raise_first_failure(futures)
        if fut.done():
            return
        pending = [f for f in futures if not f.done()]
        concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)


@attrs.frozen
class _Unpack:
    """Where a pull unpacks to, and what it tells the progress display."""

    client: Client
    lease: str
    snapshotter: str
    emit: Callable[..., None]


def _unpack_in_order(
    u: _Unpack,
    layers: Sequence[Descriptor],
    diff_ids: Sequence[str],
    ready: Callable[[Descriptor], None],
) -> str:
    """Each layer once ``ready`` says its blob is stored, on the one below it; a layer
    already committed is skipped. Returns the top chain ID."""
    parent = ""
    for layer, diff_id, chain_id in zip(
        layers, diff_ids, snapshots.chain_ids(diff_ids), strict=True
    ):
        ready(layer)
        if not snapshots.is_committed(u.client, chain_id, u.snapshotter):
            u.emit("extracting", layer)
            snapshots.apply_layer(
                u.client,
                layer,
                diff_id=diff_id,
                chain_id=chain_id,
                parent=parent,
                snapshotter=u.snapshotter,
                lease=u.lease,
            )
            u.emit("extracted", layer, layer.size)
        parent = chain_id
    return parent


def _fetch_and_unpack(
    repo: Repository, top: Descriptor, manifest: _Doc, u: _Unpack, *, parallel: int
) -> str:
    """Config and layers download in parallel (``parallel`` at most; config first, then
    the layers bottom up), and each layer is unpacked as soon as it is stored and the
    ones below it are unpacked, while the rest download, as containerd's own pull
    does. The first failure, of a download or an unpack, cancels the downloads that
    have not begun and is raised once the running ones have ended. Returns the top
    chain ID."""
    config, layers = content.parse_manifest(manifest.obj)
    for layer in layers:
        content.layer_compression(layer.media_type)  # refused before any download
    labels = imagestore.distribution_source_label(repo.domain, repo.path)
    stop = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        futures: dict[str, Future[None]] = {}
        for d in (config, *layers):  # a blob named twice is fetched once
            if d.digest not in futures:
                futures[d.digest] = pool.submit(
                    _store_one,
                    u.client,
                    repo,
                    d,
                    lease=u.lease,
                    labels=labels,
                    emit=u.emit,
                    stop=stop,
                )
        every = list(futures.values())
        try:
            _wait_for(every, futures[config.digest])
            diff_ids = images.parse_config_blob(content.read_blob(u.client, config)).diff_ids
            snapshots.check_layers(layers, diff_ids)
            u.emit("unpacking", top)
            return _unpack_in_order(
                u, layers, diff_ids, lambda layer: _wait_for(every, futures[layer.digest])
            )
        except BaseException:
            stop.set()  # the running downloads end at their next chunk
            for f in every:
                f.cancel()
            raise


def _store_documents(client: Client, repo: Repository, docs: list[_Doc], *, lease: str) -> None:
    """The manifest and indexes bottom up, once what their GC labels name is stored."""
    source = (repo.domain, repo.path)
    for doc in reversed(docs):
        labels = imagestore.manifest_labels(doc.kind, doc.obj, source=source)
        imagestore.store_bytes(client, doc.desc, doc.data, lease=lease, labels=labels)


def pull(
    client: Client,
    ref: str,
    *,
    platform: Platform | str | None = None,
    snapshotter: str = images.DEFAULT_SNAPSHOTTER,
    plain_http: bool = False,
    hosts_dir: Path | None = None,
    credentials: Credentials | None = None,
    docker_config: Path | None = None,
    parallel: int = DEFAULT_PARALLEL,
    progress: Progress | None = None,
) -> images.Image:
    """Pull ``ref`` into the client's namespace for ``platform`` (the host's) and unpack
    it. Credentials: ``credentials``, else docker's config (``docker_config`` or
    ``$DOCKER_CONFIG``), else anonymous. Endpoints: ``hosts_dir``'s hosts.toml."""
    # start-up: the HTTP client (urllib3), credentials and hosts.toml load for a pull
    # only, not for a ``run`` whose image is there already (ensure_pulled)
    from ctrexec.images.registry import auth, hosts
    from ctrexec.images.registry.client import Repository

    parsed = parse_reference(ref)
    want = content.as_platform(platform)
    validate_id(snapshotter, kind="snapshotter")
    name = str(parsed)
    if credentials is None:
        credentials = auth.lookup(parsed.domain, docker_config)
    endpoints = hosts.registry_hosts(parsed.domain, plain_http=plain_http, directory=hosts_dir)
    repo = Repository(
        parsed.domain, parsed.path, endpoints, credentials=credentials, parallel=parallel
    )

    def emit(action: str, desc: Descriptor | None = None, done: int = 0) -> None:
        if progress is not None:
            d = desc or Descriptor("", "", 0)
            progress(PullEvent(action, name, d.digest, d.media_type, done, d.size))

    try:
        # resolved before the lease: a registry that cannot be reached or has no such
        # image leaves nothing behind, not even a lease to resume
        try:
            top, data = repo.manifest(parsed.digest or parsed.tag, resolve=not parsed.digest)
        except errors.Unavailable as exc:  # the client's words name the registry, not the image
            raise errors.Unavailable(f"cannot pull {name}: {exc}") from exc
        emit("resolved", top)
        docs = _resolve(repo, top, data, want)
        if docs is None:
            raise errors.NotFound(f"image {ref!r} has no manifest for platform {want}")
        with imagestore.lease(client, key=f"{name} {want}") as le:
            u = _Unpack(client, le.id, snapshotter, emit)
            top_chain = _fetch_and_unpack(repo, top, docs[-1], u, parallel=parallel)
            _store_documents(client, repo, docs, lease=le.id)
            images.record_image(client, name, top, lease=le.id)
            image = images.get_image(client, name, platform=want)
            images.mark_unpacked(client, image.config_digest, top_chain, snapshotter=snapshotter)
            emit("pulled", top)
            return image
    finally:
        repo.close()


def ensure_pulled(
    client: Client,
    ref: str,
    *,
    policy: str = "missing",
    platform: Platform | str | None = None,
    snapshotter: str = images.DEFAULT_SNAPSHOTTER,
    cache: images.ImageCache | None = None,
    **pull_options: Any,
) -> images.Image:
    """The image ``ref`` ready to run, by docker's ``--pull`` policy: ``missing`` pulls
    only when neither this namespace nor another has it, ``always`` pulls first,
    ``never`` does not pull (NotFound names ``ctrexec pull``)."""
    if policy not in PULL_POLICIES:
        raise errors.InvalidArgument(f"--pull {policy!r}: use one of {', '.join(PULL_POLICIES)}")
    if policy == "always":
        pull(client, ref, platform=platform, snapshotter=snapshotter, **pull_options)
    try:
        return lookup.ensure_image(
            client, ref, platform=platform, snapshotter=snapshotter, cache=cache
        )
    except errors.NotFound:
        if policy == "never":
            raise  # its message says how to get it (images.missing_image_hint)
    progress = pull_options.get("progress")
    if progress is not None:  # docker's "Unable to find image ... locally", before the pull
        progress(PullEvent("missing", normalize_reference(ref)))
    return pull(client, ref, platform=platform, snapshotter=snapshotter, **pull_options)
