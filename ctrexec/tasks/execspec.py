"""An exec's process spec: the running task's process, with what the exec changes.

Apart from the Executor so that its exec verbs (captured, streamed and detached) share
one builder without the Executor's module growing past its bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict

from ctrexec.containerd import images
from ctrexec.containerd.client import Client
from ctrexec.tasks import config as taskconfig
from ctrexec.tasks import requestsize
from ctrexec.tasks import stdio as taskio
from ctrexec.tasks.users import ImageUsers


class ExecOptions(TypedDict, total=False):
    """What an exec changes from the task's process: its environment (added to the
    task's), working directory and user (a name or uid[:gid], resolved in the image)."""

    env: dict[str, str] | None
    workdir: str | None
    user: str | None


def process_spec(
    client: Client,
    users: ImageUsers,
    task_id: str,
    args: Sequence[str],
    options: ExecOptions,
    *,
    tty: bool = False,
) -> dict[str, Any]:
    """The OCI process ``args`` run as in the running task ``task_id``: refused in the
    user's words when the task does not run (:func:`ctrexec.tasks.stdio.running_record`),
    and before any call when it would not fit in containerd's request (:mod:`requestsize`)."""
    requestsize.check(
        [("command", tuple(args)), ("env", options.get("env") or {})], why=requestsize.EXEC
    )
    record = taskio.running_record(client, task_id, args)
    resolved, user = None, options.get("user")
    if user:
        cfg = taskconfig.config_of(record)
        image = images.get_image(client, record.image, platform=cfg.platform if cfg else None)
        snapshotter = cfg.snapshotter if cfg else "overlayfs"
        resolved = users.resolve(client, image, user, snapshotter)
    env, workdir = options.get("env"), options.get("workdir")
    return taskio.exec_spec(record.spec, args, env=env, workdir=workdir, user=resolved, tty=tty)
