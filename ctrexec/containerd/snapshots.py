"""Snapshots: layer chains, container root filesystems, and reading files from them.

Snapshots are per namespace and per snapshotter. A committed snapshot is named by
the chain ID of the layers below and including it; a container's root filesystem is
an active snapshot prepared on top of the image's last chain ID.

Create snapshots under a lease (``lease=``): containerd collects any snapshot that no
lease, container or GC label references, sometimes before the caller's next call.

:func:`read_files` mounts a snapshot's mounts in a mount namespace private to one
short-lived thread, so the mount is never visible on the host and disappears with
the thread even if ctrexec is killed halfway.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import hashlib
import os
import secrets
import stat
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TypeVar

import attrs
from google.protobuf import empty_pb2

from ctrexec import _rpc, errors
from ctrexec._api.containerd.services.diff.v1 import diff_pb2
from ctrexec._api.containerd.services.snapshots.v1 import snapshots_pb2
from ctrexec._api.containerd.types import mount_pb2
from ctrexec.containerd.client import Client
from ctrexec.containerd.content import DATA_TIMEOUT, Descriptor, layer_compression, timestamp

T = TypeVar("T")

DEFAULT_SNAPSHOTTER = "overlayfs"
_KINDS = {
    snapshots_pb2.VIEW: "view",
    snapshots_pb2.ACTIVE: "active",
    snapshots_pb2.COMMITTED: "committed",
}


@attrs.frozen
class Mount:
    """One mount containerd hands out for a snapshot (type, source, options)."""

    type: str
    source: str
    target: str = ""
    options: tuple[str, ...] = ()

    @classmethod
    def from_proto(cls, msg: mount_pb2.Mount) -> Mount:
        return cls(msg.type, msg.source, msg.target, tuple(msg.options))

    def to_proto(self) -> mount_pb2.Mount:
        return mount_pb2.Mount(
            type=self.type, source=self.source, target=self.target, options=list(self.options)
        )


@attrs.frozen
class SnapshotInfo:
    name: str
    parent: str
    kind: str  # "view", "active" or "committed"
    labels: Mapping[str, str]
    created: datetime | None


def chain_ids(diff_ids: Sequence[str]) -> tuple[str, ...]:
    """OCI chain IDs: chain[0] = diff[0]; chain[n] = sha256(chain[n-1] + " " + diff[n])."""
    out: list[str] = []
    for diff_id in diff_ids:
        if not out:
            out.append(diff_id)
        else:
            text = f"{out[-1]} {diff_id}".encode()
            out.append("sha256:" + hashlib.sha256(text).hexdigest())
    return tuple(out)


def _mounts(msgs: Iterable[mount_pb2.Mount]) -> list[Mount]:
    return [Mount.from_proto(m) for m in msgs]


# -- the Snapshots service --------------------------------------------------------------


def stat_snapshot(client: Client, key: str, snapshotter: str) -> SnapshotInfo | None:
    """The snapshot named ``key``, or None when there is none."""
    try:
        resp = client.call(
            _rpc.SNAPSHOTS,
            "Stat",
            snapshots_pb2.StatSnapshotRequest(snapshotter=snapshotter, key=key),
            snapshots_pb2.StatSnapshotResponse,
        )
    except errors.NotFound:
        return None
    i = resp.info
    return SnapshotInfo(
        i.name, i.parent, _KINDS.get(i.kind, "unknown"), dict(i.labels), timestamp(i.created_at)
    )


def prepare_rootfs(
    client: Client,
    key: str,
    parent_chain_id: str,
    *,
    snapshotter: str = DEFAULT_SNAPSHOTTER,
    lease: str | None,
    labels: Mapping[str, str] | None = None,
) -> list[Mount]:
    """A writable (active) snapshot on top of ``parent_chain_id``; its mounts."""
    resp = client.call(
        _rpc.SNAPSHOTS,
        "Prepare",
        snapshots_pb2.PrepareSnapshotRequest(
            snapshotter=snapshotter, key=key, parent=parent_chain_id, labels=dict(labels or {})
        ),
        snapshots_pb2.PrepareSnapshotResponse,
        lease=lease,
    )
    return _mounts(resp.mounts)


def view_snapshot(
    client: Client, key: str, parent: str, *, snapshotter: str, lease: str | None
) -> list[Mount]:
    """A read-only view of the committed snapshot ``parent``; its mounts."""
    resp = client.call(
        _rpc.SNAPSHOTS,
        "View",
        snapshots_pb2.ViewSnapshotRequest(snapshotter=snapshotter, key=key, parent=parent),
        snapshots_pb2.ViewSnapshotResponse,
        lease=lease,
    )
    return _mounts(resp.mounts)


def snapshot_mounts(
    client: Client, key: str, snapshotter: str = DEFAULT_SNAPSHOTTER
) -> list[Mount]:
    resp = client.call(
        _rpc.SNAPSHOTS,
        "Mounts",
        snapshots_pb2.MountsRequest(snapshotter=snapshotter, key=key),
        snapshots_pb2.MountsResponse,
    )
    return _mounts(resp.mounts)


def commit_snapshot(
    client: Client, name: str, key: str, *, snapshotter: str, lease: str | None
) -> None:
    client.call(
        _rpc.SNAPSHOTS,
        "Commit",
        snapshots_pb2.CommitSnapshotRequest(snapshotter=snapshotter, name=name, key=key),
        empty_pb2.Empty,
        lease=lease,
    )


def remove_snapshot(client: Client, key: str, snapshotter: str = DEFAULT_SNAPSHOTTER) -> None:
    """Remove a snapshot; one that is already gone is fine."""
    with contextlib.suppress(errors.NotFound):
        client.call(
            _rpc.SNAPSHOTS,
            "Remove",
            snapshots_pb2.RemoveSnapshotRequest(snapshotter=snapshotter, key=key),
            empty_pb2.Empty,
        )


# -- unpacking layers ------------------------------------------------------------------


def _committed(client: Client, name: str, snapshotter: str) -> bool:
    found = stat_snapshot(client, name, snapshotter)
    if found is not None and found.kind != "committed":
        raise errors.FailedPrecondition(
            f"snapshot {name} exists in {snapshotter} but is {found.kind}, not committed"
        )
    return found is not None


def unpack_layers(
    client: Client,
    layers: Sequence[Descriptor],
    diff_ids: Sequence[str],
    *,
    snapshotter: str = DEFAULT_SNAPSHOTTER,
    lease: str,
    timeout: float = DATA_TIMEOUT,
) -> str:
    """Apply each missing layer as a committed snapshot named by its chain ID.

    Returns the top chain ID ("" for an image without layers). Layers already
    committed are skipped; losing a race to a concurrent unpack is fine.
    """
    if len(layers) != len(diff_ids):
        raise errors.InvalidArgument(f"image has {len(layers)} layers but {len(diff_ids)} diff_ids")
    for layer in layers:
        layer_compression(layer.media_type)  # refuse what Diff.Apply cannot apply
    parent = ""
    for layer, diff_id, chain_id in zip(layers, diff_ids, chain_ids(diff_ids), strict=True):
        if not _committed(client, chain_id, snapshotter):
            _apply_layer(
                client,
                layer,
                diff_id=diff_id,
                chain_id=chain_id,
                parent=parent,
                snapshotter=snapshotter,
                lease=lease,
                timeout=timeout,
            )
        parent = chain_id
    return parent


def _apply_layer(
    client: Client,
    layer: Descriptor,
    *,
    diff_id: str,
    chain_id: str,
    parent: str,
    snapshotter: str,
    lease: str,
    timeout: float,
) -> None:
    # containerd's own unpack key format: "extract-<unique> <chain id>".
    key = f"extract-{secrets.token_hex(8)} {chain_id}"
    try:
        mounts = prepare_rootfs(client, key, parent, snapshotter=snapshotter, lease=lease)
    except errors.AlreadyExists:
        if _committed(client, chain_id, snapshotter):
            return
        raise
    try:
        _apply(client, layer, mounts, diff_id=diff_id, lease=lease, timeout=timeout)
        try:
            commit_snapshot(client, chain_id, key, snapshotter=snapshotter, lease=lease)
        except errors.AlreadyExists:
            remove_snapshot(client, key, snapshotter)  # a concurrent unpack won
    except BaseException:
        with contextlib.suppress(errors.CtrexecError):
            remove_snapshot(client, key, snapshotter)
        raise


def _apply(
    client: Client,
    layer: Descriptor,
    mounts: Sequence[Mount],
    *,
    diff_id: str,
    lease: str,
    timeout: float,
) -> None:
    resp = client.call(
        _rpc.DIFF,
        "Apply",
        diff_pb2.ApplyRequest(diff=layer.to_proto(), mounts=[m.to_proto() for m in mounts]),
        diff_pb2.ApplyResponse,
        lease=lease,
        timeout=timeout,
    )
    if resp.applied.digest != diff_id:
        raise errors.Internal(
            f"layer {layer.digest} unpacked to {resp.applied.digest or '?'}, "
            f"but the image config says {diff_id}"
        )


# -- mounting in a private mount namespace -----------------------------------------------

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
#: containerd's mount option words that are flags (``mount_linux.go``); the rest is data.
_FLAG_OPTIONS = {
    "bind": MS_BIND,
    "rbind": MS_BIND | MS_REC,
    "ro": MS_RDONLY,
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
}
_IGNORED_OPTIONS = frozenset(
    {
        "rw",
        "defaults",
        "suid",
        "dev",
        "exec",
        "remount",
        "private",
        "rprivate",
        "shared",
        "rshared",
        "slave",
        "rslave",
        "relatime",
        "noatime",
        "strictatime",
        "sync",
        "async",
    }
)
#: Every mount made for reading is read-only, without setuid, devices or exec.
_SAFE_FLAGS = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        cls = errors.PermissionDenied if err in (errno.EPERM, errno.EACCES) else errors.Internal
        raise cls(f"{what}: {os.strerror(err)}")


def _sys_mount(source: str | None, target: str, fstype: str | None, flags: int, data: str) -> None:
    def enc(s: str | None) -> bytes | None:
        return None if s is None else os.fsencode(s)

    ret = _libc.mount(
        enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data or None)
    )
    _check(ret, f"mount {fstype or 'bind'} {source} on {target}")


def split_options(options: Iterable[str]) -> tuple[int, list[str]]:
    """Split containerd mount options into mount(2) flags and filesystem data."""
    flags, data = 0, []
    for opt in options:
        if opt in _FLAG_OPTIONS:
            flags |= _FLAG_OPTIONS[opt]
        elif opt not in _IGNORED_OPTIONS:
            data.append(opt)
    return flags, data


def compact_lowerdir(data: list[str], limit: int) -> tuple[list[str], str | None]:
    """Shorten a too-long ``lowerdir=`` by making it relative to a common directory.

    The kernel takes at most a page of mount data; containerd chdirs into the
    snapshots directory for that. Returns the new data and the directory to chdir to.
    """
    if len(",".join(data)) < limit:
        return data, None
    idx = next((i for i, d in enumerate(data) if d.startswith("lowerdir=")), None)
    if idx is None:
        return data, None
    dirs = data[idx].removeprefix("lowerdir=").split(":")
    common = os.path.commonpath(dirs)
    if not common or common == "/" or any(d == common for d in dirs):
        return data, None
    rel = [os.path.relpath(d, common) for d in dirs]
    return [*data[:idx], "lowerdir=" + ":".join(rel), *data[idx + 1 :]], common


def mount_readonly(mounts: Sequence[Mount], target: str) -> None:
    """Mount ``mounts`` one over the other on ``target``, read-only and inert.

    Call only from a thread inside :func:`in_private_mount_namespace`: a relative
    ``lowerdir`` changes that thread's working directory.
    """
    for m in mounts:
        flags, data = split_options(m.options)
        if m.type == "bind" or flags & MS_BIND:
            _sys_mount(m.source, target, None, MS_BIND | (flags & MS_REC), "")
            _sys_mount(None, target, None, MS_REMOUNT | MS_BIND | _SAFE_FLAGS, "")
            continue
        data, chdir = compact_lowerdir(data, os.sysconf("SC_PAGE_SIZE") - 1)
        if chdir is not None:
            os.chdir(chdir)
        _sys_mount(m.source, target, m.type, (flags & ~MS_BIND) | _SAFE_FLAGS, ",".join(data))


def unmount_all_at(target: str) -> None:
    """Detach every mount stacked on ``target``."""
    for _ in range(64):
        if _libc.umount2(os.fsencode(target), MNT_DETACH) != 0:
            return


def in_private_mount_namespace(fn: Callable[[], T]) -> T:
    """Run ``fn`` in a new thread that has its own mount namespace, and return its result.

    The namespace (and every mount made in it) ends with the thread; nothing ever
    propagates to the host. Needs CAP_SYS_ADMIN. No fork happens, so it is safe
    while gRPC threads run.
    """
    result: list[T] = []
    failure: list[BaseException] = []

    def body() -> None:
        try:
            _check(_libc.unshare(CLONE_NEWNS), "unshare mount namespace")
            _sys_mount(None, "/", None, MS_REC | MS_PRIVATE, "")
            result.append(fn())
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=body, name="ctrexec-mountns", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result[0]


# -- reading files inside a root, never escaping it --------------------------------------

MAX_FILE_BYTES = 16 * 1024 * 1024
_MAX_SYMLINKS = 40


def _components(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]


def open_in_root(root_fd: int, path: str) -> int | None:
    """Open a regular file as if ``root_fd`` were ``/`` (symlinks and ``..`` stay inside).

    Each component is looked at with no symlink following; symlinks are resolved by
    hand against the root. Returns an fd, or None when there is no regular file there.
    """
    todo = deque(_components(path))
    stack = [os.dup(root_fd)]
    links = 0
    try:
        while todo:
            name = todo.popleft()
            if name == "..":
                if len(stack) > 1:
                    os.close(stack.pop())
                continue
            try:
                st = os.stat(name, dir_fd=stack[-1], follow_symlinks=False)
            except (FileNotFoundError, NotADirectoryError):
                return None
            if stat.S_ISLNK(st.st_mode):
                links += 1
                if links > _MAX_SYMLINKS:
                    return None
                target = os.readlink(name, dir_fd=stack[-1])
                if target.startswith("/"):
                    while len(stack) > 1:
                        os.close(stack.pop())
                todo.extendleft(reversed(_components(target)))
                continue
            if todo:
                if not stat.S_ISDIR(st.st_mode):
                    return None
                flags = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
                stack.append(os.open(name, flags, dir_fd=stack[-1]))
                continue
            if not stat.S_ISREG(st.st_mode):
                return None
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            fd = os.open(name, flags, dir_fd=stack[-1])
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                return None
            return fd
        return None  # the root itself, or a path ending in a directory
    finally:
        for fd in stack:
            os.close(fd)


def read_in_root(
    root: str, paths: Iterable[str], *, max_bytes: int = MAX_FILE_BYTES
) -> dict[str, bytes | None]:
    """Read each path below ``root`` (see :func:`open_in_root`); None when absent."""
    out: dict[str, bytes | None] = {}
    root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for path in paths:
            fd = open_in_root(root_fd, path)
            if fd is None:
                out[path] = None
                continue
            with os.fdopen(fd, "rb") as f:
                data = f.read(max_bytes + 1)
            if len(data) > max_bytes:
                raise errors.ResourceExhausted(f"{path} is larger than {max_bytes} bytes")
            out[path] = data
    finally:
        os.close(root_fd)
    return out


def check_paths(paths: Iterable[str]) -> list[str]:
    checked = list(paths)
    for p in checked:
        if not isinstance(p, str) or not p or "\0" in p:
            raise errors.InvalidArgument(f"invalid path {p!r}")
    return checked


def read_files(
    mounts: Sequence[Mount], paths: Iterable[str], *, max_bytes: int = MAX_FILE_BYTES
) -> dict[str, bytes | None]:
    """Mount ``mounts`` read-only in a private namespace and read ``paths`` inside them."""
    wanted = check_paths(paths)
    tmp = tempfile.mkdtemp(prefix="ctrexec-rootfs-")

    def work() -> dict[str, bytes | None]:
        mount_readonly(mounts, tmp)
        try:
            return read_in_root(tmp, wanted, max_bytes=max_bytes)
        finally:
            unmount_all_at(tmp)

    try:
        return in_private_mount_namespace(work)
    finally:
        with contextlib.suppress(OSError):
            Path(tmp).rmdir()


def read_snapshot_files(
    client: Client,
    parent: str,
    paths: Iterable[str],
    *,
    snapshotter: str = DEFAULT_SNAPSHOTTER,
    max_bytes: int = MAX_FILE_BYTES,
) -> dict[str, bytes | None]:
    """Read files of the committed snapshot ``parent`` through a temporary view.

    The view snapshot (under a lease) and the private read-only mount are gone when
    this returns, whatever happened. NotFound when ``parent`` does not exist.
    """
    wanted = check_paths(paths)
    key = f"ctrexec-view-{secrets.token_hex(8)}"
    with client.lease() as lease:
        mounts = view_snapshot(client, key, parent, snapshotter=snapshotter, lease=lease.id)
        try:
            return read_files(mounts, wanted, max_bytes=max_bytes)
        finally:
            remove_snapshot(client, key, snapshotter)
