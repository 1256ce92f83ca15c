"""``cp``: files between a container and the host, by docker's rules.

Where a container's files are: a running (or paused) task's root is
``/proc/PID/root``, which is the task's own view, so volumes and bind mounts inside
it are copied through as docker copies through them. A container with no running
task (stopped, or created and never started) has its rootfs snapshot mounted in a
mount namespace private to one short-lived thread
(:func:`ctrexec._linux.in_private_mount_namespace`): the host never sees the mount,
it is unmounted before the thread returns, and it dies with the thread whatever
happens. Its volumes and bind mounts are mounted over the snapshot there too, where
the task had them (:func:`_mount_binds`), as docker's cp mounts a stopped container's.
The kernel's pseudo filesystems (``/proc``, ``/sys``, ...) are archived as empty
directories either way (:data:`ctrexec.tasks.copyarchive.PSEUDO_FILESYSTEMS`).

Everything below the container's root goes through :mod:`ctrexec.tasks.copyarchive`,
which never leaves it. Both directions move a tar stream, as docker's do: the side
that reads builds one, the side that writes unpacks it with :func:`plan`'s target
and name. The stream is held in an unlinked temporary file between the two.
"""

from __future__ import annotations

# Host paths stay strings: they are compared, joined and split by docker's string rules.
# ruff: noqa: PTH100, PTH106, PTH110, PTH112, PTH115, PTH116, PTH120
import os
import posixpath
import stat
import tarfile
import tempfile
from collections.abc import Callable
from contextlib import suppress
from typing import IO, TypeVar

import attrs

from ctrexec import _linux, errors
from ctrexec.containerd import containers, tasks
from ctrexec.containerd.client import Client
from ctrexec.containerd.images import ImageCache
from ctrexec.oci.mounts import Mount
from ctrexec.tasks import records
from ctrexec.tasks.copyarchive import READ_ONLY, clean, extract_tar, kind_error, write_tar

T = TypeVar("T")

_LIVE = (tasks.Status.RUNNING, tasks.Status.PAUSED)
#: What docker's own archive code answers for the two impossible copies.
CANNOT_COPY_DIR = "cannot copy directory"
NO_SUCH_DIR = "no such directory"


@attrs.frozen
class Target:
    """Where an archive of one top entry goes: into ``directory``, its top renamed."""

    directory: str
    rebase: tuple[str, str] | None


def _shape(path: str) -> tuple[str, bool, bool]:
    """(the cleaned path, whether it asks for a directory, whether for its contents)."""
    contents = path.endswith("/.") or path in (".", "/")
    return clean(path), path.endswith("/") or contents, contents


def arcname_of(path: str) -> str:
    """The top name of the archive of ``path``: ``.`` for a directory's contents."""
    cleaned, _, contents = _shape(path)
    return "." if contents or cleaned == "/" else posixpath.basename(cleaned)


def plan(
    src_is_dir: bool, arcname: str, dst: str, dst_kind: str | None, parent_is_dir: bool
) -> Target:
    """docker's destination rules. ``dst_kind`` is ``dir``, ``file`` or None (missing);
    ``parent_is_dir`` whether ``dst``'s parent is an existing directory."""
    cleaned = posixpath.normpath(dst) if dst else "."
    if dst_kind == "dir":
        return Target(cleaned, None)
    if dst_kind == "file" and src_is_dir:
        raise errors.InvalidArgument(CANNOT_COPY_DIR)
    if dst_kind is None and dst.endswith("/") and not src_is_dir:
        raise errors.NotFound(NO_SUCH_DIR)
    if dst_kind is None and not parent_is_dir:
        raise errors.NotFound(f"{posixpath.dirname(cleaned)}: {NO_SUCH_DIR}")
    return Target(posixpath.dirname(cleaned) or ".", (arcname, posixpath.basename(cleaned)))


def _kind(st: os.stat_result | None) -> str | None:
    return None if st is None else "dir" if stat.S_ISDIR(st.st_mode) else "file"


# -- a container's root ---------------------------------------------------------------------------


def in_container_root(
    client: Client,
    cache: ImageCache,
    name: str,
    fn: Callable[[int], T],
    *,
    write: bool,
    with_mounts: bool = True,
) -> T:
    """Call ``fn`` with an O_PATH fd of the container's root (see the module's docstring).

    ``with_mounts=False``: a stopped container's snapshot alone, without its volumes
    and bind mounts over it (docker's copy-up reads the image's files that a new
    volume then covers)."""
    record = containers.get(client, name)
    state = tasks.find(client, name)
    live = state is not None and state.status in _LIVE and state.pid > 0
    if write and not live and record.spec.get("root", {}).get("readonly"):
        raise errors.FailedPrecondition(READ_ONLY)  # a running one: EROFS, but its volumes
    if state is not None and state.status is tasks.Status.UNKNOWN:
        raise errors.FailedPrecondition(f"{name}: {state.reason}")
    if live and state is not None:
        fd = _linux.open_root(f"/proc/{state.pid}/root")
        try:
            again = tasks.find(client, name)  # the pid is still the task's: not reused
            if again is None or again.pid != state.pid or again.status not in _LIVE:
                raise errors.Conflict(f"{name} stopped while cp opened it; try again")
            return fn(fd)
        finally:
            os.close(fd)
    mounts = records.rootfs_mounts(client, record, cache)
    binds = [
        Mount(m["destination"], m.get("type", ""), m.get("source", ""), tuple(m.get("options", ())))
        for m in record.spec.get("mounts") or []
    ]
    tmp = tempfile.mkdtemp(prefix="ctrexec-cp-")

    def work() -> T:
        try:
            _linux.mount_readonly(mounts, tmp, writable=write)
            fd = _linux.open_root(tmp)
            try:
                if with_mounts:
                    _mount_binds(fd, tmp, [m for m in binds if m.is_bind], write=write)
                return fn(fd)
            finally:
                os.close(fd)
        finally:
            _linux.unmount_all_at(tmp)

    try:
        return _linux.in_private_mount_namespace(work)
    finally:
        with suppress(OSError):
            os.rmdir(tmp)


def _mount_binds(root_fd: int, root: str, binds: list[Mount], *, write: bool) -> None:
    """Mount a stopped container's volumes and bind mounts over its snapshot at ``root``
    (inside the private mount namespace), as docker's cp mounts them: where the task had
    them, each resolved inside the root. One whose mount point or source is missing (a
    created container's, never made; a removed host directory) is left out. ``ro``
    stays read-only whatever ``write`` asks."""
    for m in binds:
        try:
            fd = _linux.path_in_root(root_fd, m.destination)
        except (FileNotFoundError, NotADirectoryError):
            continue
        try:
            at = os.readlink(f"/proc/self/fd/{fd}")  # the resolved place, below root
        finally:
            os.close(fd)
        if not at.startswith(root.rstrip("/") + "/") or not os.path.exists(m.source):
            continue
        readonly = _linux.split_options(m.options)[0] & _linux.MS_RDONLY
        _linux.mount_readonly([m], at, writable=write and not readonly)


def _stat(root_fd: int, path: str, *, follow: bool) -> os.stat_result | None:
    try:
        fd = _linux.path_in_root(root_fd, path, follow=follow)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        return os.fstat(fd)
    finally:
        os.close(fd)


def _source(root_fd: int, path: str, follow: bool, missing: str) -> os.stat_result:
    """The source's stat; NotFound (``missing``) when absent, and docker's "not a
    directory" for ``path/`` or ``path/.`` naming a file."""
    cleaned, wants_dir, _ = _shape(path)
    st = _stat(root_fd, cleaned, follow=follow or wants_dir)
    if st is None:
        raise errors.NotFound(missing)
    if wants_dir and not stat.S_ISDIR(st.st_mode):
        raise errors.InvalidArgument(f"{path}: not a directory")
    return st


def _final_link(root_fd: int, path: str) -> str:
    """``path`` with its final symlinks followed (inside the root), as docker follows a
    destination that is a link: the file it names is overwritten, not the link."""
    for _ in range(40):
        try:
            fd = _linux.path_in_root(root_fd, path, follow=False)
        except OSError:
            return path
        try:
            if not stat.S_ISLNK(os.fstat(fd).st_mode):
                return path
            target = os.readlink("", dir_fd=fd)
        finally:
            os.close(fd)
        path = clean(posixpath.join(posixpath.dirname(path), target))
    return path


def _target(root_fd: int, name: str, src_is_dir: bool, arcname: str, dst: str) -> Target:
    cleaned = _final_link(root_fd, clean(dst))
    if cleaned != clean(dst):
        dst = cleaned
    kind = _kind(_stat(root_fd, cleaned, follow=True))
    parent = _stat(root_fd, posixpath.dirname(cleaned), follow=True)
    if kind is None and (parent is None or not stat.S_ISDIR(parent.st_mode)):
        missing = posixpath.dirname(cleaned)
        raise errors.NotFound(f"Could not find the file {missing} in container {name}")
    return plan(src_is_dir, arcname, dst if dst.startswith("/") else "/" + dst, kind, True)


def _guarded(path: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except OSError as exc:
        raise kind_error(exc, path) from exc


# -- the two directions -------------------------------------------------------------------------


def copy_out(
    client: Client,
    cache: ImageCache,
    name: str,
    src: str,
    dst: str,
    *,
    follow: bool = False,
    stdout: IO[bytes] | None = None,
) -> None:
    """``cp NAME:SRC DST``: DST ``-`` writes the tar stream to ``stdout``. Files made on
    the host belong to the caller, as docker's do."""
    missing = f"Could not find the file {clean(src)} in container {name}"
    arcname = arcname_of(src)
    if dst == "-" and stdout is None:
        raise errors.InvalidArgument("cp NAME:SRC -: no standard output to write to")
    if dst != "-":
        _check_host_parent(dst)
    with tempfile.TemporaryFile(prefix="ctrexec-cp-") as spool:

        def read(root_fd: int) -> bool:
            st = _source(root_fd, src, follow, missing)
            path = clean(src)
            out = stdout if dst == "-" and stdout is not None else spool  # None: refused above
            _guarded(src, lambda: write_tar(root_fd, path, out, arcname=arcname, follow=follow))
            return stat.S_ISDIR(st.st_mode)

        src_is_dir = in_container_root(client, cache, name, read, write=False)
        if dst == "-":
            return
        spool.seek(0)
        _extract_on_host(spool, src_is_dir, arcname, dst)


def _check_host_parent(dst: str) -> None:
    parent = os.path.dirname(os.path.normpath(dst))
    if parent and not os.path.isdir(parent):
        raise errors.NotFound(f"invalid output path: directory {parent!r} does not exist")


def _extract_on_host(spool: IO[bytes], src_is_dir: bool, arcname: str, dst: str) -> None:
    try:
        st: os.stat_result | None = os.stat(dst)
    except FileNotFoundError:
        st = None
    parent = os.path.dirname(os.path.abspath(dst))
    target = plan(src_is_dir, arcname, os.path.abspath(dst) + ("/" if dst.endswith("/") else ""),
                  _kind(st), os.path.isdir(parent))  # fmt: skip
    host_fd = _linux.open_root(target.directory)
    try:
        with tarfile.open(fileobj=spool, mode="r|") as tar:
            owner = (os.geteuid(), os.getegid())
            _guarded(dst, lambda: extract_tar(host_fd, "/", tar, rebase=target.rebase, owner=owner))
    finally:
        os.close(host_fd)


def copy_in(
    client: Client,
    cache: ImageCache,
    name: str,
    src: str,
    dst: str,
    *,
    follow: bool = False,
    archive: bool = False,
    stdin: IO[bytes] | None = None,
) -> None:
    """``cp SRC NAME:DST``; SRC ``-`` reads a tar stream from ``stdin`` into the
    directory DST. Files belong to the container's root unless ``archive`` keeps the
    archive's owners."""
    owner = None if archive else (0, 0)
    if src == "-":
        if stdin is None:
            raise errors.InvalidArgument("cp -: no standard input")
        _stream_in(client, cache, name, stdin=stdin, dst=dst, owner=owner)
        return
    with tempfile.TemporaryFile(prefix="ctrexec-cp-") as spool:
        src_is_dir, arcname = _host_archive(src, follow, spool)
        spool.seek(0)

        def write(root_fd: int) -> None:
            target = _target(root_fd, name, src_is_dir, arcname, dst)
            with tarfile.open(fileobj=spool, mode="r|") as tar:
                _guarded(
                    dst,
                    lambda: extract_tar(
                        root_fd, target.directory, tar, rebase=target.rebase, owner=owner
                    ),
                )

        in_container_root(client, cache, name, write, write=True)


def _host_archive(src: str, follow: bool, spool: IO[bytes]) -> tuple[bool, str]:
    """Archive the host's ``src`` into ``spool``: (whether it is a directory, its top name)."""
    path = os.path.abspath(src)
    try:
        st = os.stat(path) if follow or src.endswith(("/", "/.")) else os.lstat(path)
    except FileNotFoundError as exc:
        raise errors.NotFound(f"lstat {path}: no such file or directory") from exc
    except NotADirectoryError as exc:
        raise errors.InvalidArgument(f"{src}: not a directory") from exc
    arcname = arcname_of(src)
    root_fd = _linux.open_root("/")
    try:
        _guarded(src, lambda: write_tar(root_fd, path, spool, arcname=arcname, follow=follow))
    finally:
        os.close(root_fd)
    return stat.S_ISDIR(st.st_mode), arcname


def _stream_in(
    client: Client,
    cache: ImageCache,
    name: str,
    *,
    stdin: IO[bytes],
    dst: str,
    owner: tuple[int, int] | None,
) -> None:
    def write(root_fd: int) -> None:
        st = _stat(root_fd, clean(dst), follow=True)
        if st is None:
            raise errors.NotFound(f"Could not find the file {clean(dst)} in container {name}")
        if not stat.S_ISDIR(st.st_mode):
            raise errors.InvalidArgument(f'destination "{name}:{dst}" must be a directory')
        with tarfile.open(fileobj=stdin, mode="r|*") as tar:
            _guarded(dst, lambda: extract_tar(root_fd, clean(dst), tar, owner=owner))

    try:
        in_container_root(client, cache, name, write, write=True)
    except tarfile.TarError as exc:
        raise errors.InvalidArgument(f"the standard input is not a tar archive: {exc}") from exc
