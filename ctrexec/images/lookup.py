"""Images by a user's reference: ``busybox`` normalised, then containerd's record.

The public :func:`get_image` and :func:`ensure_image` (and, in
:mod:`ctrexec.images.usage`, ``remove_image``) take what a user typed;
:mod:`ctrexec.containerd.images` takes only the names containerd stores, so the grammar
(:mod:`ctrexec.images.reference`) is applied here, once, and ``containerd/`` never
imports ``images/``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctrexec.containerd import images
from ctrexec.containerd.client import Client
from ctrexec.containerd.content import Platform
from ctrexec.containerd.images import DEFAULT_SNAPSHOTTER, Image, ImageCache, ImageName
from ctrexec.images.reference import parse_reference


def image_name(ref: str) -> ImageName:
    """The record ``ref`` names: InvalidArgument (docker's words) for a bad reference."""
    parsed = parse_reference(ref)
    return ImageName(str(parsed), parsed.name, parsed.digest, given=ref)


def get_image(client: Client, ref: str, *, platform: Platform | str | None = None) -> Image:
    """The image ``ref`` of the client's namespace, resolved for ``platform`` (host's)."""
    return images.get_image(client, image_name(ref), platform=platform)


def ensure_image(
    client: Client,
    ref: str,
    *,
    platform: Platform | str | None = None,
    snapshotter: str = DEFAULT_SNAPSHOTTER,
    source_namespaces: Sequence[str] | None = None,
    cache: ImageCache | None = None,
) -> Image:
    """The image ``ref``, ready to run: found here or adopted from another namespace,
    then unpacked (see :func:`ctrexec.containerd.images.ensure_image`)."""
    return images.ensure_image(
        client,
        image_name(ref),
        platform=platform,
        snapshotter=snapshotter,
        source_namespaces=source_namespaces,
        cache=cache,
    )
