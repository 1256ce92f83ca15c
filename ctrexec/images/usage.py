"""Images as a user names them (a name, or docker's image ID or a prefix of it), and
which containers use them: the one owner of that question, which ``rmi`` asks so it can
refuse to pull an image out from under a container, and ``image prune`` and ``images``
ask for every image at once.

An image ID is the config digest of the image for this host's platform, as docker's
(``images`` shows 12 of its hex digits). docker's order of lookup: a whole ID, then an
exact name, then a unique ID prefix (so a name such as ``db`` is never taken for an
ID that starts ``db``); a prefix of several IDs is refused.

docker refuses to remove an image a container was made from unless forced. containerd
would delete the record regardless (the container's snapshot keeps its files, but
``start`` again, or a second container, would find no image), so the check is ctrexec's.
"""

from __future__ import annotations

import re

from ctrexec import ids
from ctrexec.containerd import containers, images
from ctrexec.containerd.client import Client
from ctrexec.errors import AmbiguousPrefix, Conflict, CtrexecError, NotFound
from ctrexec.images import lookup
from ctrexec.images.reference import is_dangling, parse_reference

_HEX = re.compile(r"[0-9a-f]{1,64}")
_ID_PREFIX = "sha256:"


def containers_by_image(client: Client) -> dict[str, list[str]]:
    """Each image name the containers of the namespace name -> their ids, sorted."""
    out: dict[str, list[str]] = {}
    for c in sorted(containers.list_containers(client), key=lambda c: c.id):
        if c.image:
            out.setdefault(c.image, []).append(c.id)
    return out


def image_usage(client: Client) -> dict[str, int]:
    """How many containers of the namespace use each image name."""
    return {name: len(using) for name, using in containers_by_image(client).items()}


def _is_name(client: Client, word: str) -> bool:
    try:
        lookup.get_image(client, word)
    except CtrexecError:
        return False
    return True


def names_of(client: Client, word: str) -> list[str] | None:
    """The image names ``word`` means when it is an image ID (tags first), by docker's
    order of lookup; None when it is a name (or nothing here has such an ID)."""
    hexid = word.removeprefix(_ID_PREFIX)
    if not _HEX.fullmatch(hexid):
        return None
    if len(hexid) < 64 and _is_name(client, word):
        return None
    found = images.list_images(client)
    known = {s.config_digest.removeprefix(_ID_PREFIX) for s in found if s.config_digest}
    try:
        match = ids.by_prefix(hexid, known)
    except AmbiguousPrefix as exc:
        raise AmbiguousPrefix(f"multiple IDs found with provided prefix: {word}") from exc
    if match is None:
        return None
    named = [s.name for s in found if s.config_digest == _ID_PREFIX + match]
    return sorted(named, key=lambda n: (is_dangling(n), n))


def resolve_image(client: Client, word: str) -> str:
    """The image name to run for ``word``, by docker's order of lookup: an image ID's
    (or a unique prefix's) name, tags first, else ``word`` itself (a name, which a pull
    may yet find). AmbiguousPrefix for a prefix of several IDs."""
    named = names_of(client, word)
    return named[0] if named else word


def remove_image(client: Client, ref: str, *, force: bool = False, sync: bool = False) -> None:
    """Remove the image ``ref`` names (every name of it, given its ID), as docker's
    ``rmi``: refused (Conflict) while a container of the namespace uses it, and for an ID
    that several repositories name, unless ``force``. containerd's GC then frees what
    nothing else references (before returning when ``sync``)."""
    named = names_of(client, ref)
    if named is None:
        name = lookup.image_name(ref)
        if not force:
            _refuse_in_use(client, [name])
        _remove_name(client, name, sync=sync)
        return
    repos = {parse_reference(n).name for n in named if not is_dangling(n)}
    if len(repos) > 1 and not force:
        shown = ref.removeprefix(_ID_PREFIX)[:12]
        raise Conflict(
            f"conflict: unable to delete {shown} (must be forced) - "
            "image is referenced in multiple repositories"
        )
    given = [images.ImageName(name, given=ref) for name in named]
    if not force:
        # Every name checked, with one listing, before any goes: no half-removed ID.
        _refuse_in_use(client, given)
    for n, name in enumerate(given, 1):
        _remove_name(client, name, sync=sync and n == len(given), by_id=True)


def _refuse_in_use(client: Client, names: list[images.ImageName]) -> None:
    users = containers_by_image(client)
    for name in names:
        if using := users.get(name.name, []):
            raise Conflict(
                f"image {name.shown} is in use by container {', '.join(using)} "
                "(remove the container first, or force with rmi -f)"
            )


def _remove_name(
    client: Client, name: images.ImageName, *, sync: bool, by_id: bool = False
) -> None:
    """``by_id``: one of the names an ID stands for, which may be gone meanwhile.

    The record's target is read first and the delete carries it, so a record that a
    pull or an import moves meanwhile is not removed (containerd 2.x)."""
    target = images.recorded_target(client, name.name)
    if target is None and by_id:
        return
    try:
        images.remove_image(client, name, sync=sync, target=target or "")
    except NotFound:
        if not by_id:
            raise
