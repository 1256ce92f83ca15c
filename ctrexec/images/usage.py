"""Images as a user names them (a name, or docker's image ID or a prefix of it), and
which containers use them, so ``rmi`` can refuse to pull one out from under them.

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

import attrs

from ctrexec import ids
from ctrexec.containerd import containers, images
from ctrexec.containerd.client import Client
from ctrexec.errors import AmbiguousPrefix, Conflict, CtrexecError, NotFound
from ctrexec.images import prune
from ctrexec.tasks.config import TaskConfig

_HEX = re.compile(r"[0-9a-f]{1,64}")
_ID_PREFIX = "sha256:"


def users(client: Client, ref: str) -> list[str]:
    """The ids of this namespace's containers whose image is ``ref``."""
    name = images.normalize_reference(ref)
    return sorted(c.id for c in containers.list_containers(client) if c.image == name)


def _is_name(client: Client, word: str) -> bool:
    try:
        images.normalize_reference(word)
        images.get_image(client, word)
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
    return sorted(named, key=lambda n: (prune.is_dangling(n), n))


def resolve(client: Client, word: str) -> str:
    """The image name to run for ``word``: an ID's (a tag of it), else ``word`` itself
    (a name, which a pull may yet find)."""
    named = names_of(client, word)
    return named[0] if named else word


def resolved_config(client: Client, config: TaskConfig) -> TaskConfig:
    """``config`` with an image given by ID naming one of that image's names."""
    name = resolve(client, config.image)
    return config if name == config.image else attrs.evolve(config, image=name)


def remove(client: Client, ref: str, *, force: bool = False) -> None:
    """Remove the image (every name of it, given its ID); refused (Conflict) while a
    container uses it, unless ``force``, and, as docker's, for an ID that several
    repositories name unless ``force``."""
    named = names_of(client, ref)
    if named is None:
        _remove_name(client, ref, ref, force=force)
        return
    repos = {images.parse_reference(n).name for n in named if not prune.is_dangling(n)}
    if len(repos) > 1 and not force:
        shown = ref.removeprefix(_ID_PREFIX)[:12]
        raise Conflict(
            f"conflict: unable to delete {shown} (must be forced) - "
            "image is referenced in multiple repositories"
        )
    for name in named:
        _remove_name(client, name, ref, force=force)


def _remove_name(client: Client, name: str, given: str, *, force: bool) -> None:
    if not force:
        using = users(client, name)
        if using:
            raise Conflict(
                f"image {given} is in use by container {', '.join(using)} "
                "(remove the container first, or force with rmi -f)"
            )
    try:
        images.remove_image(client, name)
    except NotFound:
        if name == given:
            raise
