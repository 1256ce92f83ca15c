"""Task bundles that containerd no longer knows: what a cancelled Tasks.Create leaves.

A client that dies inside Tasks.Create makes containerd (1.6) cancel the call
halfway: the bundle directory (``<state>/io.containerd.runtime.v2.task/<ns>/<id>``)
and its work directory (under the root) can stay, often with a shim still running
in it and a ``runc init`` waiting under that shim, while containerd lists no task.
Every later Tasks.Create of that id then fails with ``failed to start shim: mkdir
<bundle>: file exists``. Only that message names the directory: containerd's API
tells a client neither its state directory nor that the bundle is there.

:func:`left_by` reads the path from the error; :func:`delete_container` and
:func:`remove` do what containerd's own cleanup of a dead shim does (the shim
binary's ``delete``, then the two directories).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from ctrexec import _linux
from ctrexec.errors import CtrexecError

#: The runtime v2 plugin's directory name, under containerd's state and root dirs.
PLUGIN_DIR = "io.containerd.runtime.v2.task"
#: Where containerd 1.6 puts every shim's socket, whatever the daemon's own state
#: directory: a fixed path, shared by all containerds of the host.
SHIM_SOCKET_DIR = Path("/run/containerd/s")
_LEFT = re.compile(r"mkdir (/\S+): file exists")
_GONE = re.compile(r"open (/\S+): no such file or directory")
#: How long the shim's ``delete`` may take (containerd gives its own cleanup 5 s).
DELETE_TIMEOUT = 30.0


def left_by(exc: CtrexecError, namespace: str, container_id: str) -> Path | None:
    """The directory of this container that a Tasks.Create failure says is in the way
    (the bundle, or its work directory), else None. Only a path of the runtime's own
    layout for exactly this namespace and id is taken, so nothing else is removed."""
    match = _LEFT.search(str(exc))
    if match is None:
        return None
    path = Path(match.group(1))
    if path.parts[-3:] != (PLUGIN_DIR, namespace, container_id) or ".." in path.parts:
        return None
    return path


def vanished(exc: CtrexecError, namespace: str, container_id: str) -> bool:
    """Whether a Tasks.Create failed because the new shim's bundle went as it started.
    containerd's cleanup of an earlier create of this id that was cancelled (its caller
    killed) removes the bundle by path, and it can land on the one made for the next
    create: 1.6's shim then fails in it (``getwd``), and 2.x fails to write the file it
    keeps there (``open <bundle>/shim-binary-path``). That cleanup runs once, so the
    create sent again finds its way clear. Only this container's own bundle counts."""
    text = str(exc)
    if "failed to start shim" not in text:
        return False
    if "getwd: no such file or directory" in text:
        return True
    match = _GONE.search(text)
    if match is None:
        return False
    path = Path(match.group(1))
    return path.parts[-4:-1] == (PLUGIN_DIR, namespace, container_id) and ".." not in path.parts


def shim_socket(address: str, namespace: str, group: str) -> Path:
    """The socket of the shim that serves ``group`` (a task's runc group annotation,
    else its id) for the containerd at ``address``: containerd's own naming
    (``SocketAddress``: sha256 of ``<address>/<namespace>/<group>``), which the API
    does not report."""
    joined = os.path.normpath(Path(address, namespace, group))
    return SHIM_SOCKET_DIR / hashlib.sha256(joined.encode()).hexdigest()


def delete_container(
    path: Path, *, shim_binary: str, address: str, namespace: str, container_id: str
) -> None:
    """The shim binary's ``delete`` in the bundle, as containerd's cleanup of a dead
    shim runs it: it force-deletes the runc container of this id (a ``runc init``
    that waits for a start dies) and unmounts the rootfs. A work directory, or a
    bundle without a spec, has no container: nothing to do."""
    exe = shutil.which(shim_binary)
    if exe is None or not (path / "config.json").exists():
        return
    argv = [exe, "-namespace", namespace, "-address", address]
    argv += ["-id", container_id, "-bundle", os.fspath(path), "delete"]
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run(argv, cwd=path, capture_output=True, timeout=DELETE_TIMEOUT, check=False)


def remove(path: Path) -> None:
    """Remove the bundle (its rootfs mounts left, the work directory it links to, then
    itself), or a work directory, once nothing works in it any more."""
    work = None
    with contextlib.suppress(OSError):
        work = (path / "work").readlink()
    _linux.unmount_all(_linux.mounts_under(path))
    shutil.rmtree(path, ignore_errors=True)
    if work is not None and work.parts[-3:] == path.parts[-3:]:
        shutil.rmtree(work, ignore_errors=True)
