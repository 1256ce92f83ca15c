"""``image prune``: delete the images no container uses; containerd's GC does the rest.

An image is in use when a container of the namespace names it, or names another
record with the same target (docker keeps every tag of an image a container runs).
Without ``all_images`` only dangling images go, as in docker: those without a tag
(a digest-only name such as ``repo@sha256:...``, or a name that is no reference).

Only the records are deleted; the last deletion asks for a synchronous GC, which
frees every blob and snapshot that nothing references any more (containerd's labels
chain image -> index -> manifest -> config -> snapshot), before prune returns.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from ctrexec import errors
from ctrexec.containerd import content, images
from ctrexec.containerd.client import Client
from ctrexec.images.reference import is_dangling
from ctrexec.images.usage import image_usage


@attrs.frozen
class PruneReport:
    """What a prune deleted, and the bytes of content the GC freed in the namespace."""

    deleted: tuple[str, ...]
    reclaimed: int


def _blobs(client: Client, name: str) -> dict[str, int]:
    """The image's blobs for the host's platform (what ``reclaimed`` counts)."""
    try:
        image = images.get_image(client, name)
    except errors.CtrexecError:
        return {}  # content already missing, or for other platforms only
    found = (image.target, *image.indexes, image.manifest, image.config_descriptor, *image.layers)
    return {d.digest: d.size for d in found}


def prune_images(client: Client, *, all_images: bool = False) -> PruneReport:
    """Delete unused images (dangling ones only, unless ``all_images``), then let the
    GC reclaim their content and snapshots before returning."""
    found = images.list_images(client)
    usage = image_usage(client)
    by_name: Mapping[str, str] = {i.name: i.digest for i in found}
    used_targets = {by_name[n] for n in usage if n in by_name}
    doomed = [
        i
        for i in found
        if i.digest not in used_targets and i.name not in usage
        and (all_images or is_dangling(i.name))
    ]  # fmt: skip
    blobs: dict[str, int] = {}
    for i in doomed:
        blobs |= _blobs(client, i.name)
    deleted = []
    for n, i in enumerate(doomed):
        try:
            images.remove_image(client, i.name, sync=n == len(doomed) - 1, target=i.digest)
        except (errors.NotFound, errors.Conflict):
            continue  # removed, or re-tagged to another image, meanwhile
        deleted.append(i.name)
    reclaimed = sum(size for d, size in blobs.items() if not content.exists(client, d))
    return PruneReport(tuple(deleted), reclaimed)
