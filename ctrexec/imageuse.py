"""Which containers use an image, so ``rmi`` can refuse to pull one out from under them.

docker refuses to remove an image a container was made from unless forced. containerd
would delete the record regardless (the container's snapshot keeps its files, but
``start`` again, or a second container, would find no image), so the check is ctrexec's.
"""

from __future__ import annotations

from ctrexec.containerd import containers, images
from ctrexec.containerd.client import Client
from ctrexec.errors import Conflict


def users(client: Client, ref: str) -> list[str]:
    """The ids of this namespace's containers whose image is ``ref``."""
    name = images.normalize_reference(ref)
    return sorted(c.id for c in containers.list_containers(client) if c.image == name)


def remove(client: Client, ref: str, *, force: bool = False) -> None:
    """Remove the image; refused (Conflict) while a container uses it, unless ``force``."""
    if not force:
        using = users(client, ref)
        if using:
            raise Conflict(
                f"image {ref} is in use by container {', '.join(using)} "
                "(remove the container first, or force with rmi -f)"
            )
    images.remove_image(client, ref)
