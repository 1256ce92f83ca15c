"""``commit``: a container's changes as a new image, as docker's ``commit`` makes it.

The layer is what containerd's Diff service finds between a read-only view of the
container's parent snapshot (the image's top layer) and the container's own snapshot:
a gzip tar in the content store, with its diff ID as containerd labels it. The image's
config gets that diff ID, a history entry and docker's ``--change`` edits; the manifest
gets the layer, in the base manifest's own vocabulary (OCI or docker). Every blob is
written under one lease, the record is made last and the image unpacked (so ``run`` of
it prepares at once), then the lease goes: a commit cut short leaves nothing that GC
does not take.

The container is not paused (docker's default ``--pause``): a task that writes while
the diff is taken may leave a file half-written in the layer.
"""

from __future__ import annotations

import json
import secrets
import shlex
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from ctrexec import errors
from ctrexec.containerd import containers, content, images, snapshots
from ctrexec.containerd.client import Client
from ctrexec.containerd.content import Descriptor
from ctrexec.images import lookup
from ctrexec.images import store as imagestore

#: The ``--change`` instructions taken, as the image config's keys they set.
CHANGE_KEYS = {"CMD": "Cmd", "ENTRYPOINT": "Entrypoint", "ENV": "Env", "WORKDIR": "WorkingDir",
               "USER": "User"}  # fmt: skip


def _command(value: str) -> list[str]:
    """Dockerfile's two forms: a JSON list (exec form), else ``/bin/sh -c TEXT``."""
    if value.startswith("["):
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if isinstance(parsed, list) and all(isinstance(v, str) for v in parsed):
            return parsed
    return ["/bin/sh", "-c", value]


def _env(value: str) -> list[str]:
    """``ENV K=V [K2=V2...]`` or ``ENV K V``: each as ``K=V``."""
    if "=" not in value.split(" ", 1)[0]:
        key, _, rest = value.partition(" ")
        return [f"{key}={rest.strip()}"]
    return shlex.split(value)


def apply_changes(config: dict[str, Any], changes: Sequence[str]) -> dict[str, Any]:
    """The image config's ``config`` object with docker's ``--change`` lines applied
    (CMD, ENTRYPOINT, ENV, WORKDIR, USER); InvalidArgument for any other instruction."""
    out = dict(config)
    for line in changes:
        word, _, value = line.strip().partition(" ")
        key = CHANGE_KEYS.get(word.upper())
        value = value.strip()
        if key is None or not value:
            raise errors.InvalidArgument(
                f"--change {line!r}: use one of {', '.join(CHANGE_KEYS)} with a value"
            )
        if key in ("Cmd", "Entrypoint"):
            out[key] = _command(value)
        elif key == "Env":
            env = {e.split("=", 1)[0]: e for e in out.get("Env") or []}
            env.update((e.split("=", 1)[0], e) for e in _env(value))
            out["Env"] = list(env.values())
        else:
            out[key] = value
    return out


def check_changes(changes: Sequence[str]) -> None:
    """Refuse (InvalidArgument) a ``--change`` line :func:`commit_container` would: for
    a front end that checks its input before it connects, so a typo starts no daemon."""
    apply_changes({}, changes)


def _json_desc(desc: Descriptor) -> dict[str, Any]:
    return {"mediaType": desc.media_type, "digest": desc.digest, "size": desc.size}


def _layer(client: Client, c: containers.Container, base: images.Image, lease: str) -> str:
    """The container's changes as a layer blob; returns its descriptor's JSON."""
    docker = base.manifest.media_type == content.MT_DOCKER_MANIFEST
    media_type = content.MT_DOCKER_LAYER_GZIP if docker else content.MT_OCI_LAYER_GZIP
    view = f"ctrexec-commit-{secrets.token_hex(8)}"
    lower = snapshots.view_snapshot(
        client, view, base.top_chain_id, snapshotter=c.snapshotter, lease=lease
    )
    try:
        upper = snapshots.snapshot_mounts(client, c.snapshot_key, c.snapshotter)
        desc = snapshots.diff_mounts(
            client, lower, upper, media_type=media_type, ref=view, lease=lease
        )
    finally:
        snapshots.remove_snapshot(client, view, c.snapshotter)
    return json.dumps(_json_desc(desc))


def _store(
    client: Client, media_type: str, obj: dict[str, Any], *, lease: str, manifest: bool
) -> Descriptor:
    data = json.dumps(obj, separators=(",", ":")).encode()
    desc = Descriptor(media_type, content.digest_of(data), len(data))
    labels = imagestore.manifest_labels("manifest", obj) if manifest else None
    imagestore.store_bytes(client, desc, data, lease=lease, labels=labels)
    return desc


def commit_container(
    client: Client,
    container_id: str,
    ref: str,
    *,
    changes: Sequence[str] = (),
    message: str = "",
    author: str = "",
) -> images.Image:
    """Make the image ``ref`` of the container's image plus its changes (see above);
    ``container_id`` may be a unique prefix, as docker's IDs."""
    name = lookup.image_name(ref).name  # a bad name makes nothing
    c = containers.get(client, containers.Lookup(client)(container_id))  # docker's prefixes
    if not c.snapshot_key or not c.image:
        raise errors.FailedPrecondition(f"container {container_id} has no image or rootfs")
    base = lookup.get_image(client, c.image)
    config = json.loads(content.read_blob(client, base.config_descriptor))
    config["config"] = apply_changes(config.get("config") or {}, changes)
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    with imagestore.lease(client) as le:
        layer = json.loads(_layer(client, c, base, le.id))
        diff_id = content.info(client, layer["digest"]).labels.get(content.LABEL_UNCOMPRESSED)
        if not diff_id:
            raise errors.Internal(f"layer {layer['digest']} has no diff ID label")
        config.setdefault("rootfs", {"type": "layers", "diff_ids": []})["diff_ids"].append(diff_id)
        entry = {"created": now, "created_by": "ctrexec commit"}
        config["history"] = [
            *(config.get("history") or []),
            entry | ({"comment": message} if message else {}),
        ]
        config["created"] = now
        if author:
            config["author"] = author
        config_desc = _store(
            client, base.config_descriptor.media_type, config, lease=le.id, manifest=False
        )
        manifest = json.loads(content.read_blob(client, base.manifest))
        manifest["config"] = _json_desc(config_desc)
        manifest["layers"] = [*manifest.get("layers", []), layer]
        manifest_desc = _store(
            client, base.manifest.media_type, manifest, lease=le.id, manifest=True
        )
        images.record_image(client, name, manifest_desc, lease=le.id)
        return imagestore.unpack_image(
            client, name, lease=le.id, platform=base.platform, snapshotter=c.snapshotter
        )
