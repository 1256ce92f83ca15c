"""Images from containerd's store: records, platforms, configs, adoption, unpack.

An image is a record (name -> target descriptor) plus content: an optional index
(or docker manifest list), one manifest per platform, a config and layers. Names are
the ones containerd stores (:class:`ImageName`); a user's reference is normalised
above this layer, in :mod:`ctrexec.images.reference` and :mod:`ctrexec.images.lookup`.
:func:`get_image` reads them for one platform; :func:`ensure_image` also finds an
image that another containerd namespace holds, adopts its content without copying
data, and unpacks its layers into snapshots. The namespaces searched are
``$CTREXEC_IMAGE_NAMESPACES`` (comma-separated, in order; empty: none), else
``default``, ``k8s.io`` and then every other but docker's ``moby``, which is searched
only when listed: dockerd's images are dockerd's to manage.

GC: adopted content carries ``containerd.io/gc.ref.content.*`` labels from index to
manifest to config and layers, and unpacking labels the config with
``containerd.io/gc.ref.snapshot.<snapshotter>`` = top chain ID, the way containerd's
own unpacker does, so the image record alone keeps everything alive.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import attrs
from google.protobuf import empty_pb2, field_mask_pb2

from ctrexec import _linux, _rpc, errors
from ctrexec._api.containerd.services.images.v1 import images_pb2
from ctrexec._api.containerd.types import descriptor_pb2
from ctrexec.containerd import content, snapshots
from ctrexec.containerd._proto import from_timestamp
from ctrexec.containerd.client import Client
from ctrexec.containerd.content import (
    Descriptor,
    Platform,
    as_platform,
    compatible_platforms,
    select_manifests,
)
from ctrexec.containerd.memo import Memo
from ctrexec.ids import validate_digest, validate_id

DEFAULT_SNAPSHOTTER = snapshots.DEFAULT_SNAPSHOTTER
#: Namespaces searched first for an image this namespace lacks; then every other one
#: but those of :data:`OPT_IN_NAMESPACES`.
DEFAULT_SOURCE_NAMESPACES = ("default", "k8s.io")
#: dockerd's namespace: searched only when named (in the variable or the argument).
OPT_IN_NAMESPACES = ("moby",)
#: The namespaces to search instead, comma-separated, in order; set but empty: none.
IMAGE_NAMESPACES_ENV = "CTREXEC_IMAGE_NAMESPACES"
_MAX_DEPTH = 4

# -- which record ------------------------------------------------------------------------


@attrs.frozen
class ImageName:
    """Which image record a caller means, in containerd's terms: this layer never
    parses a reference (:mod:`ctrexec.images.reference` normalises the user's words).

    ``name``: the record's name as containerd stores it. With ``digest``, a record of
    ``repository`` whose target is that digest matches too, as in docker's lookup
    (``busybox@sha256:...`` finds ``busybox:1.36``). ``given``: the caller's own word
    for it, for messages (the stored name when empty).
    """

    name: str
    repository: str = ""
    digest: str = ""
    given: str = ""

    @property
    def shown(self) -> str:
        return self.given or self.name


def _named(name: str | ImageName) -> ImageName:
    return name if isinstance(name, ImageName) else ImageName(name)


# -- image configs -------------------------------------------------------------------------


def _strs(value: Any, field: str) -> tuple[str, ...]:
    return content.json_strings(value, f"image config {field}")


def _str_map(value: Any, field: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise errors.InvalidArgument(f"image config {field} must map strings to strings")
    return dict(value)


def _keys(value: Any, field: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise errors.InvalidArgument(f"image config {field} must be an object")
    return tuple(sorted(str(k) for k in value))


def _str(value: Any, field: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise errors.InvalidArgument(f"image config {field} must be a string")
    return value


@attrs.frozen
class ImageConfig:
    """The runtime defaults an image carries (the ``config`` section of its config)."""

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    working_dir: str = ""
    user: str = ""
    stop_signal: str = ""
    exposed_ports: tuple[str, ...] = ()
    labels: Mapping[str, str] = attrs.field(factory=dict)
    volumes: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, obj: Any) -> ImageConfig:
        if obj is None:
            return cls()
        if not isinstance(obj, dict):
            raise errors.InvalidArgument("image config section is not an object")
        return cls(
            entrypoint=_strs(obj.get("Entrypoint"), "Entrypoint"),
            cmd=_strs(obj.get("Cmd"), "Cmd"),
            env=_strs(obj.get("Env"), "Env"),
            working_dir=_str(obj.get("WorkingDir"), "WorkingDir"),
            user=_str(obj.get("User"), "User"),
            stop_signal=_str(obj.get("StopSignal"), "StopSignal"),
            exposed_ports=_keys(obj.get("ExposedPorts"), "ExposedPorts"),
            labels=_str_map(obj.get("Labels"), "Labels"),
            volumes=_keys(obj.get("Volumes"), "Volumes"),
        )


@attrs.frozen
class ConfigBlob:
    """What ctrexec uses from an image config blob."""

    config: ImageConfig
    platform: Platform | None
    diff_ids: tuple[str, ...]
    created: datetime | None


def parse_config_blob(data: bytes) -> ConfigBlob:
    obj = content.load_json(data, "image config")
    rootfs = obj.get("rootfs") or {}
    diff_ids = _strs(rootfs.get("diff_ids") if isinstance(rootfs, dict) else None, "diff_ids")
    for d in diff_ids:
        validate_digest(d)
    plat = Platform.from_json(obj) if obj.get("architecture") and obj.get("os") else None
    created = None
    if isinstance(obj.get("created"), str):
        with contextlib.suppress(ValueError):
            created = datetime.fromisoformat(obj["created"])
    return ConfigBlob(ImageConfig.from_json(obj.get("config")), plat, diff_ids, created)


# -- images ----------------------------------------------------------------------------------


@attrs.frozen
class Image:
    """One image resolved for one platform."""

    name: str
    target: Descriptor
    manifest: Descriptor
    config_descriptor: Descriptor
    config: ImageConfig
    layers: tuple[Descriptor, ...]
    diff_ids: tuple[str, ...]
    chain_ids: tuple[str, ...]
    platform: Platform
    created: datetime | None = None
    labels: Mapping[str, str] = attrs.field(factory=dict)
    #: Index blobs from the target down to the manifest (empty for a plain manifest).
    indexes: tuple[Descriptor, ...] = ()

    @property
    def digest(self) -> str:
        return self.target.digest

    @property
    def config_digest(self) -> str:
        return self.config_descriptor.digest

    @property
    def top_chain_id(self) -> str:
        return self.chain_ids[-1] if self.chain_ids else ""

    @property
    def size(self) -> int:
        """Bytes of content this platform uses (indexes, manifest, config, layers)."""
        blobs = (*self.indexes, self.manifest, self.config_descriptor, *self.layers)
        return sum(d.size for d in blobs)


@attrs.frozen
class ImageSummary:
    """``created``: when the record was made here; ``config_digest`` (docker's image ID)
    and ``built`` (docker's CREATED) come from the platform's config, when readable."""

    name: str
    digest: str
    size: int
    created: datetime | None
    config_digest: str = ""
    built: datetime | None = None


@attrs.frozen
class _Walk:
    """Blobs and parsed JSON on the way from an image's target to its platform."""

    indexes: tuple[tuple[Descriptor, dict[str, Any]], ...]
    manifest: Descriptor
    manifest_json: dict[str, Any]
    config: Descriptor
    blob: ConfigBlob
    layers: tuple[Descriptor, ...]


def _walk(
    client: Client,
    desc: Descriptor,
    want: Platform,
    *,
    check_config: bool,
    parents: tuple[tuple[Descriptor, dict[str, Any]], ...] = (),
) -> _Walk | None:
    if len(parents) > _MAX_DEPTH:
        raise errors.InvalidArgument(f"image indexes nest deeper than {_MAX_DEPTH}")
    obj = content.load_json(content.read_blob(client, desc), f"content {desc.digest}")
    if content.content_kind(desc.media_type, obj) == "index":
        for child, unchecked in select_manifests(obj, want):
            found = _walk(
                client, child, want, check_config=unchecked, parents=(*parents, (desc, obj))
            )
            if found is not None:
                return found
        return None
    config, layers = content.parse_manifest(obj)
    blob = parse_config_blob(content.read_blob(client, config))
    if (
        check_config
        and blob.platform is not None
        and blob.platform not in compatible_platforms(want)
    ):
        return None
    if len(blob.diff_ids) != len(layers):
        raise errors.InvalidArgument(
            f"image config lists {len(blob.diff_ids)} diff_ids for {len(layers)} layers"
        )
    return _Walk(parents, desc, obj, config, blob, layers)


class ImageCache:
    """What one start needs to know about an image that its digests fix.

    ``walks``: the blobs from a target digest down to one platform's config (two
    Content.Read round trips and the JSON parsing, per start, without it). ``ready``:
    the image's top snapshot was seen committed with the config's GC label (a
    Snapshots.Stat and a Content.Info); a caller whose Prepare finds the parent gone
    calls :meth:`forget`. Both are keyed by namespace, as content is per namespace.
    """

    def __init__(self) -> None:
        self.walks: Memo[tuple[str, str, Platform], _Walk] = Memo()
        self.ready: Memo[tuple[str, str, str, str], bool] = Memo()

    @staticmethod
    def ready_key(client: Client, image: Image, snapshotter: str) -> tuple[str, str, str, str]:
        return (client.namespace, snapshotter, image.config_digest, image.top_chain_id)

    def forget(self, client: Client, image: Image, snapshotter: str) -> None:
        self.ready.forget(self.ready_key(client, image, snapshotter))
        self.walks.forget((client.namespace, image.target.digest, image.platform))


def _find(
    client: Client, record: images_pb2.Image, want: Platform, cache: ImageCache | None = None
) -> tuple[Image, _Walk]:
    target = Descriptor.from_proto(record.target)
    key = (client.namespace, target.digest, want)
    found = cache.walks.get(key) if cache is not None else None
    if found is None:
        found = _walk(client, target, want, check_config=True)
        if found is not None and cache is not None:
            cache.walks.put(key, found)
    if found is None:
        raise errors.NotFound(f"image {record.name} has no manifest for platform {want}")
    blob = found.blob
    image = Image(
        name=record.name,
        target=target,
        manifest=found.manifest,
        config_descriptor=found.config,
        config=blob.config,
        layers=found.layers,
        diff_ids=blob.diff_ids,
        chain_ids=snapshots.chain_ids(blob.diff_ids),
        platform=blob.platform or want,
        created=blob.created,
        labels=dict(record.labels),
        indexes=tuple(d for d, _ in found.indexes),
    )
    return image, found


def _not_found(wanted: ImageName, where: str = "") -> errors.NotFound:
    """``image 'busybox' not found (docker.io/library/busybox:latest)``: one line."""
    ref, name = wanted.shown, wanted.name
    shown = ref.encode("unicode_escape").decode("ascii")
    return errors.NotFound(
        f"image {shown!r} not found{where}" + (f" ({name})" if name != ref else "")
    )


def _get_record(client: Client, wanted: ImageName) -> images_pb2.Image:
    """The record ``wanted`` names; with a digest, also one of its repository by target."""
    found = client._call_or_none(
        _rpc.IMAGES,
        "Get",
        images_pb2.GetImageRequest(name=wanted.name),
        images_pb2.GetImageResponse,
    )
    if found is not None:
        return found.image
    if not wanted.digest:
        raise _not_found(wanted)
    resp = client._call(
        _rpc.IMAGES,
        "List",
        images_pb2.ListImagesRequest(filters=[f"target.digest=={wanted.digest}"]),
        images_pb2.ListImagesResponse,
    )
    for rec in sorted(resp.images, key=lambda r: r.name):
        if rec.name.startswith((wanted.repository + ":", wanted.repository + "@")):
            return rec
    raise _not_found(wanted)


def get_image(
    client: Client, name: str | ImageName, *, platform: Platform | str | None = None
) -> Image:
    """The image record ``name`` of the client's namespace, resolved for ``platform``
    (the host's). A user's reference goes through :func:`ctrexec.images.lookup.get_image`."""
    return _find(client, _get_record(client, _named(name)), as_platform(platform))[0]


def list_images(client: Client, *, platform: Platform | str | None = None) -> list[ImageSummary]:
    """Every image of the namespace; size is the platform's content (or the target's)."""
    want = as_platform(platform)
    resp = client._call(
        _rpc.IMAGES, "List", images_pb2.ListImagesRequest(), images_pb2.ListImagesResponse
    )
    out = []
    for rec in resp.images:
        made = from_timestamp(rec.created_at)
        try:
            i = _find(client, rec, want)[0]
        except (errors.NotFound, errors.InvalidArgument, errors.ResourceExhausted, errors.Internal):
            # content missing or for other platforms only
            out.append(ImageSummary(rec.name, rec.target.digest, rec.target.size, made))
            continue
        out.append(ImageSummary(rec.name, i.digest, i.size, made, i.config_digest, i.created))
    return sorted(out, key=lambda s: s.name)


def remove_image(
    client: Client, name: str | ImageName, *, sync: bool = False, target: str = ""
) -> None:
    """Delete the image record; containerd's GC then frees unreferenced content and
    snapshots (before returning when ``sync``).

    ``target``: the digest the caller resolved the record to. containerd 2.x then
    deletes it only while it still points there, and answers NotFound when it moved
    (a pull or an import re-tagged it meanwhile), which becomes a Conflict here.
    Older servers ignore the field (seen on 1.6.20 and 1.7.24): the record goes."""
    wanted = _named(name)
    req = images_pb2.DeleteImageRequest(name=wanted.name, sync=sync)
    if target:
        req.target.CopyFrom(descriptor_pb2.Descriptor(digest=validate_digest(target)))
    try:
        client._call(_rpc.IMAGES, "Delete", req, empty_pb2.Empty)
    except errors.NotFound:
        now = recorded_target(client, wanted.name) if target else None
        if now is not None and now != target:
            raise errors.Conflict(
                f"image {wanted.shown} changed while being removed (now {now}, "
                f"was {target}): not removed"
            ) from None
        raise _not_found(wanted) from None


def _create_record(client: Client, image: images_pb2.Image, lease: str) -> None:
    client._call(
        _rpc.IMAGES,
        "Create",
        images_pb2.CreateImageRequest(image=image),
        images_pb2.CreateImageResponse,
        lease=lease,
    )


def record_image(
    client: Client,
    name: str,
    target: Descriptor,
    *,
    lease: str,
    labels: Mapping[str, str] | None = None,
) -> None:
    """Create the image record ``name`` -> ``target``, or move an existing one to it.
    Call it last: a record only ever points at content that is fully stored."""
    image = images_pb2.Image(name=name, labels=dict(labels or {}), target=target.to_proto())
    try:
        _create_record(client, image, lease)
    except errors.AlreadyExists:
        paths = ["target"] + [f"labels.{k}" for k in (labels or {})]
        client._call(
            _rpc.IMAGES,
            "Update",
            images_pb2.UpdateImageRequest(
                image=image, update_mask=field_mask_pb2.FieldMask(paths=paths)
            ),
            images_pb2.UpdateImageResponse,
            lease=lease,
        )


def record_target(client: Client, name: str | ImageName) -> Descriptor:
    """The whole target descriptor of the record ``name`` names (NotFound if none):
    what a second name for the same image (``tag``) points to."""
    return Descriptor.from_proto(_get_record(client, _named(name)).target)


def recorded_target(client: Client, name: str) -> str | None:
    """The target digest the record ``name`` has now; None when there is none."""
    resp = client._call_or_none(
        _rpc.IMAGES, "Get", images_pb2.GetImageRequest(name=name), images_pb2.GetImageResponse
    )
    return None if resp is None else str(resp.image.target.digest)


# -- adoption from other namespaces ---------------------------------------------------------


def missing_image_hint(ref: str) -> str:
    """What a missing image's error ends with, wherever it is reported."""
    return f"get it with: ctrexec pull {ref}"


def configured_namespaces() -> list[str] | None:
    """The namespaces ``$CTREXEC_IMAGE_NAMESPACES`` lists; None when it is not set."""
    value = os.environ.get(IMAGE_NAMESPACES_ENV)
    if value is None:
        return None
    names = [ns.strip() for ns in value.split(",") if ns.strip()]
    return [validate_id(ns, kind=f"namespace in ${IMAGE_NAMESPACES_ENV}") for ns in names]


def _source_order(client: Client, source_namespaces: Iterable[str] | None) -> list[str]:
    if source_namespaces is None:
        source_namespaces = configured_namespaces()
    if source_namespaces is None:
        existing = client.namespaces()
        first = [ns for ns in DEFAULT_SOURCE_NAMESPACES if ns in existing]
        rest = [ns for ns in existing if ns not in first and ns not in OPT_IN_NAMESPACES]
        order = first + rest
    else:
        order = [validate_id(ns, kind="namespace") for ns in source_namespaces]
        existing = client.namespaces() if order else []
        order = [ns for ns in dict.fromkeys(order) if ns in existing]
    return [ns for ns in order if ns != client.namespace]


def _adopt(
    client: Client, source: Client, record: images_pb2.Image, found: _Walk, lease: str
) -> None:
    """Commit every blob of the walk into the client's namespace, leaves first, then
    create the image record."""
    blobs: list[tuple[Descriptor, dict[str, str]]] = [(d, {}) for d in found.layers]
    blobs.append((found.config, {}))
    blobs.append((found.manifest, content.child_labels("manifest", found.manifest_json)))
    blobs += [(d, content.child_labels("index", obj)) for d, obj in reversed(found.indexes)]
    for desc, own in blobs:
        labels = {**content.portable_labels(content.info(source, desc.digest).labels), **own}
        content.adopt_blob(source, client, desc, lease=lease, labels=labels)
    image = images_pb2.Image(name=record.name, labels=dict(record.labels), target=record.target)
    with contextlib.suppress(errors.AlreadyExists):
        _create_record(client, image, lease)


def _find_elsewhere(
    client: Client, wanted: ImageName, want: Platform, namespaces: Iterable[str] | None
) -> tuple[Client, images_pb2.Image, _Walk]:
    order = _source_order(client, namespaces)
    for ns in order:
        source = client.with_namespace(ns)
        try:
            record = _get_record(source, wanted)
            return source, record, _find(source, record, want)[1]
        except errors.NotFound:
            continue
    where = ", ".join([client.namespace, *order])
    found = _not_found(wanted, f" in namespace{'s' if order else ''} {where}")
    raise errors.NotFound(f"{found}; {missing_image_hint(wanted.shown)}")


# -- unpack --------------------------------------------------------------------------------


def _labelled(client: Client, image: Image, snapshotter: str) -> bool:
    labels = content.info(client, image.config_digest).labels
    return labels.get(content.gc_snapshot_label(snapshotter)) == image.top_chain_id


def is_unpacked(client: Client, image: Image, snapshotter: str = DEFAULT_SNAPSHOTTER) -> bool:
    """True when the image's top layer is a committed snapshot in ``snapshotter``."""
    if not image.chain_ids:
        return True
    found = snapshots.stat_snapshot(client, image.top_chain_id, snapshotter)
    return found is not None and found.kind == "committed"


def unpack(
    client: Client,
    image: Image,
    *,
    snapshotter: str = DEFAULT_SNAPSHOTTER,
    lease: str | None = None,
) -> str:
    """Unpack the image's layers (under ``lease``, or a lease of its own) and label its
    config so the snapshots outlive the lease. Returns the top chain ID."""
    validate_id(snapshotter, kind="snapshotter")
    if lease is None:
        with client.lease() as own:
            return unpack(client, image, snapshotter=snapshotter, lease=own.id)
    top = snapshots.unpack_layers(
        client, image.layers, image.diff_ids, snapshotter=snapshotter, lease=lease
    )
    mark_unpacked(client, image.config_digest, top, snapshotter=snapshotter)
    return top


def mark_unpacked(client: Client, config_digest: str, top: str, *, snapshotter: str) -> None:
    """Label the config with its top snapshot, as containerd's unpacker does: the image
    record then keeps the snapshots alive once the unpack's lease is gone."""
    if top:
        content.ensure_labels(client, config_digest, {content.gc_snapshot_label(snapshotter): top})


def ensure_image(
    client: Client,
    name: str | ImageName,
    *,
    platform: Platform | str | None = None,
    snapshotter: str = DEFAULT_SNAPSHOTTER,
    source_namespaces: Sequence[str] | None = None,
    cache: ImageCache | None = None,
) -> Image:
    """The image record ``name``, ready to run: found here or adopted from another
    namespace (no data copied when the blobs are on disk), then unpacked. A no-op when
    it is. A user's reference goes through :func:`ctrexec.images.lookup.ensure_image`.

    The image record is always read (a tag can move); with ``cache``, what its
    digests fix is not read again (see :class:`ImageCache`)."""
    wanted = _named(name)
    want = as_platform(platform)
    validate_id(snapshotter, kind="snapshotter")
    try:
        record = _get_record(client, wanted)
    except errors.NotFound:
        source, record, found = _find_elsewhere(client, wanted, want, source_namespaces)
        with client.lease() as lease:
            _adopt(client, source, record, found, lease.id)
            image = _find(client, record, want)[0]
            unpack(client, image, snapshotter=snapshotter, lease=lease.id)
        return image
    image = _find(client, record, want, cache)[0]
    key = ImageCache.ready_key(client, image, snapshotter)
    if cache is not None and key in cache.ready:
        return image
    if not (is_unpacked(client, image, snapshotter) and _labelled(client, image, snapshotter)):
        unpack(client, image, snapshotter=snapshotter)
    if cache is not None:
        cache.ready.put(key, True)
    return image


# -- files of an image's root filesystem ------------------------------------------------------


def read_rootfs_files(
    client: Client,
    image: Image,
    paths: Iterable[str],
    *,
    snapshotter: str = DEFAULT_SNAPSHOTTER,
    max_bytes: int = _linux.MAX_FILE_BYTES,
) -> dict[str, bytes | None]:
    """Read files from the unpacked image without running it (None: no such file).

    Paths resolve as inside the image (``/`` is its root; symlinks cannot escape).
    """
    try:
        return snapshots.read_snapshot_files(
            client, image.top_chain_id, paths, snapshotter=snapshotter, max_bytes=max_bytes
        )
    except errors.NotFound:
        raise errors.FailedPrecondition(
            f"image {image.name} is not unpacked in {snapshotter}"
        ) from None
