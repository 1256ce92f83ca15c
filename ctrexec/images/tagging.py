"""``tag``: a second image record, under a new name, with the same target.

containerd's image records are names pointing at content; a tag adds one and copies
no content (the source record already holds it from GC), so no lease is needed.
Removing either name later leaves the other whole, as docker's ``rmi`` of one tag.
"""

from __future__ import annotations

from ctrexec import errors
from ctrexec.containerd import images
from ctrexec.containerd.client import Client
from ctrexec.images import lookup, usage


def tag_image(client: Client, source: str, target: str) -> str:
    """Name the image ``source`` (a name, or docker's image ID or a unique prefix of it)
    also ``target``; returns the stored new name. A ``target`` that already names an
    image is moved, as docker's ``tag`` moves it. InvalidArgument (docker's "invalid
    reference format") for a bad name; NotFound ("No such image") for a missing source."""
    new = lookup.image_name(target)  # a typo makes nothing
    named = usage.names_of(client, source)
    old = images.ImageName(named[0], given=source) if named else lookup.image_name(source)
    try:
        desc = images.record_target(client, old)
    except errors.NotFound:
        raise errors.NotFound(f"No such image: {source}") from None
    # no lease: the content is already held by the source record
    images.record_image(client, new.name, desc, lease="")
    return new.name
