"""A task's user, resolved through its image's /etc/passwd and /etc/group, cached.

Kept out of the executor: a self-contained cache with one question, "which uid, gid
and groups is USER in this image", that every start and ``exec -u`` asks.
"""

from __future__ import annotations

from ctrexec.containerd import images
from ctrexec.containerd.client import Client
from ctrexec.containerd.memo import Memo
from ctrexec.oci.user import ResolvedUser, resolve_user_spec


class ImageUsers:
    """Resolved users by (namespace, snapshotter, image top chain ID, user spec, added
    groups)."""

    def __init__(self) -> None:
        self._memo: Memo[tuple[str, str, str, str, tuple[str, ...]], ResolvedUser] = Memo()

    def resolve(
        self,
        client: Client,
        image: images.Image,
        user: str,
        snapshotter: str,
        group_add: tuple[str, ...] = (),
    ) -> ResolvedUser:
        """Always through the image's files: docker takes even a numeric uid's primary
        and supplementary groups from /etc/passwd and /etc/group when it is listed.

        Cached by the image's top chain ID: those files are part of a committed
        snapshot, which its digest fixes; reading them mounts the image (a lease, a
        view, a private mount namespace), which costs more than the rest of a start.
        """
        if not user and not group_add:
            return ResolvedUser(uid=0, gid=0)
        key = (client.namespace, snapshotter, image.top_chain_id, user, group_add)
        return self._memo.get_or_compute(
            key, lambda: _read(client, image, user, snapshotter, group_add)
        )


def _read(
    client: Client, image: images.Image, user: str, snapshotter: str, group_add: tuple[str, ...]
) -> ResolvedUser:
    files = images.read_rootfs_files(
        client, image, ["/etc/passwd", "/etc/group"], snapshotter=snapshotter
    )
    passwd, group = files.get("/etc/passwd"), files.get("/etc/group")
    return resolve_user_spec(
        user,
        passwd.decode(errors="replace") if passwd is not None else None,
        group.decode(errors="replace") if group is not None else None,
        group_add,
    )
