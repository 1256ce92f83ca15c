"""A task's container record and its rootfs snapshot, made in the order that needs no lease.

containerd's GC treats every container record as a root that holds the snapshot its
``snapshot_key`` names, whether or not that snapshot exists yet (metadata/gc.go;
Containers.Create does not check it). So the record comes first and its snapshot is
prepared after it: held from its first instant, and the name's uniqueness checked by
Create itself, before anything else exists. A crash between the two leaves a complete
record whose rootfs the next start prepares (:func:`rootfs_mounts`).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Mapping
from typing import Any

from ctrexec import labels as lbl
from ctrexec.containerd import containers, images, snapshots
from ctrexec.containerd.client import Client
from ctrexec.errors import AlreadyExists, CtrexecError, NotFound
from ctrexec.tasks import spec as taskspec
from ctrexec.tasks.config import config_of


def new_snapshot_key(name: str) -> str:
    """A unique key, so a snapshot left by a crash can never block a later one."""
    return f"{name}-{secrets.token_hex(4)}"


def is_snapshot_key_of(key: str, name: str) -> bool:
    """Whether ``key`` is one :func:`new_snapshot_key` made for ``name``."""
    prefix, _, suffix = key.rpartition("-")
    return prefix == name and len(suffix) == 8 and all(c in "0123456789abcdef" for c in suffix)


def create(
    client: Client,
    checked: taskspec.CheckedConfig,
    image: images.Image,
    *,
    spec: dict[str, Any],
    record_labels: Mapping[str, str],
    cache: images.ImageCache,
) -> tuple[containers.Container, list[snapshots.RootfsMount]]:
    """The container record, then its rootfs snapshot; the record goes again if the
    snapshot cannot be made."""
    config = checked.config
    snapshot_key = new_snapshot_key(config.name)
    try:
        record = containers.create(
            client,
            config.name,
            image=image.name,
            spec=spec,
            snapshotter=config.snapshotter,
            snapshot_key=snapshot_key,
            runtime=checked.runtime.to_runtime(),
            labels=record_labels,
            extensions={
                lbl.CONFIG_EXTENSION: containers.json_extension(
                    lbl.CONFIG_TYPE_URL, config.to_record()
                )
            },
        )
    except AlreadyExists as exc:
        raise AlreadyExists(f"container name {config.name!r} is already in use") from exc
    try:
        return record, prepare_rootfs(client, record, image, cache)
    except BaseException:
        with contextlib.suppress(CtrexecError):
            containers.delete(client, config.name)
        raise


def prepare_rootfs(
    client: Client, record: containers.Container, image: images.Image, cache: images.ImageCache
) -> list[snapshots.RootfsMount]:
    """Prepare the record's snapshot; when the image's layers went (removed and
    collected since the cache saw them) unpack them again, once."""
    key, snapshotter = record.snapshot_key, record.snapshotter
    try:
        return snapshots.prepare_rootfs(
            client, key, image.top_chain_id, snapshotter=snapshotter, lease=None
        )
    except NotFound:
        cache.forget(client, image, snapshotter)
        image = images.ensure_image(
            client, image.name, platform=image.platform, snapshotter=snapshotter, cache=cache
        )
    return snapshots.prepare_rootfs(
        client, key, image.top_chain_id, snapshotter=snapshotter, lease=None
    )


def rootfs_mounts(
    client: Client, record: containers.Container, cache: images.ImageCache
) -> list[snapshots.RootfsMount]:
    """The rootfs mounts, prepared now for a record whose create was cut short."""
    try:
        return snapshots.snapshot_mounts(client, record.snapshot_key, record.snapshotter)
    except NotFound:
        config = config_of(record)
        image = images.ensure_image(
            client,
            record.image,
            platform=config.platform if config is not None else None,
            snapshotter=record.snapshotter,
            cache=cache,
        )
        return prepare_rootfs(client, record, image, cache)
