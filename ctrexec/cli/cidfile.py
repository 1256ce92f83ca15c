"""docker's ``--cidfile``: the container's ID written to a file, which must not exist.

The file is made (exclusively) before anything else, so two runs given one path cannot
both go ahead; the ID is written once the config is known (ctrexec's ID is the name),
and the file is removed again if the command fails before the container exists.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from ctrexec.errors import Conflict, InvalidArgument


@contextlib.contextmanager
def written(path: str | None) -> Iterator[Callable[[str], None]]:
    """A writer of the ID to ``path`` (None: no file, and the writer does nothing)."""
    if path is None:
        yield lambda _id: None
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise Conflict(
            f"container ID file found, make sure the other container isn't running or delete {path}"
        ) from None
    except OSError as exc:
        raise InvalidArgument(
            f"failed to create the container ID file: {exc.strerror or exc}"
        ) from exc
    os.close(fd)

    def write(container_id: str) -> None:
        Path(path).write_text(container_id)

    try:
        yield write
    except BaseException:
        with contextlib.suppress(OSError):
            Path(path).unlink()
        raise
