"""Tar streams of a directory tree under a root fd, written and read without leaving it.

``cp`` moves files the way docker's does: as a tar stream, built on one side and
unpacked on the other. Either side may be a container's root, whose files are
untrusted. Every path is resolved below a root fd by
:func:`ctrexec._linux.openat2_in_root` (the one resolver), and below an entry every
step is one component opened with ``O_NOFOLLOW`` relative to its directory's fd: a
symlink in the tree, or one swapped in meanwhile, is archived or replaced as a link
and never followed to a host file.

An archive is untrusted too (``cp -`` reads one from stdin). A member's name is
cleaned and may not climb above the destination, nor may a relative symlink's or a
hard link's target (docker's "breakout" rule); absolute names are taken as relative
to the destination, as docker's are.
"""

from __future__ import annotations

# Paths here are strings relative to directory fds (dir_fd=, /proc/self/fd): pathlib has
# no dir_fd, so os's calls are the point.
# ruff: noqa: PTH208
import contextlib
import errno
import os
import posixpath
import stat
import tarfile
from collections.abc import Iterator
from typing import IO

from ctrexec import _linux, errors

_CHUNK = 1 << 20
#: docker's words for a write into a ``--read-only`` container's root.
READ_ONLY = "container rootfs is marked read-only"


def clean(path: str) -> str:
    """A container path as docker reads it: relative to ``/``, ``..`` stopping there."""
    return posixpath.normpath("/" + path.lstrip("/")).replace("//", "/")


def _reopen(pfd: int, flags: int) -> int:
    # The O_PATH fd names the resolved file: reopening it through procfs walks nothing.
    return os.open(f"/proc/self/fd/{pfd}", flags | os.O_CLOEXEC)


# -- writing a tree as a tar stream -------------------------------------------------------------


#: ``f_type`` of the kernel's pseudo filesystems (statfs(2)): their directories are
#: archived empty, as docker's archive of a container has ``/proc`` and ``/sys`` (its
#: copy reads the rootfs with the volumes mounted, never these). Walking them reads
#: the kernel's state, not files: ``/proc/self`` names nothing from outside the
#: task's pid namespace, and a process's directory vanishes mid-walk.
PSEUDO_FILESYSTEMS = frozenset(
    {
        0x9FA0,  # proc
        0x62656572,  # sysfs
        0x1CD1,  # devpts
        0x19800202,  # mqueue
        0x27E0EB,  # cgroup
        0x63677270,  # cgroup2
        0x73636673,  # securityfs
        0x64626720,  # debugfs
        0x74726163,  # tracefs
        0xCAFE4A11,  # bpf
        0x42494E4D,  # binfmt_misc
        0x65735543,  # fusectl
        0x62656570,  # configfs
        0x6165676C,  # pstore
        0xF97CFF8C,  # selinuxfs
        _linux.NSFS_MAGIC,
    }
)
TMPFS_MAGIC = 0x01021994
#: The container's device directory: a tmpfs mounted there is the runtime's /dev.
_DEV = "/dev"


def write_tar(
    root_fd: int, path: str, out: IO[bytes], *, arcname: str, follow: bool = False
) -> None:
    """Write ``path`` (below ``root_fd``) to ``out`` as a tar stream named ``arcname``.

    ``follow``: a symlink at ``path`` itself is followed (inside the root), as with
    ``cp -L``; symlinks below it never are. A pseudo filesystem's directory (see
    :data:`PSEUDO_FILESYSTEMS`) and a tmpfs mounted at ``/dev`` are archived without
    their contents. An entry that vanishes while the tree is read is left out, as a
    process's files come and go: only the walk's start must exist.
    """
    top = _linux.path_in_root(root_fd, path, follow=follow)
    try:
        with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            _add(tar, top, arcname, _Where(path, os.fstat(root_fd).st_dev, {}), top=True)
    finally:
        os.close(top)


class _Where:
    """Where the walk is: the entry's path below the root, its parent's device, and the
    hard links seen so far (shared by the whole walk)."""

    def __init__(self, path: str, parent_dev: int, seen: dict[tuple[int, int], str]) -> None:
        self.path, self.parent_dev, self.seen = path, parent_dev, seen

    def child(self, name: str, dev: int) -> _Where:
        return _Where(posixpath.join(self.path, name), dev, self.seen)


def _gone(exc: OSError) -> bool:
    """The entry vanished under the walk (a procfs task's files fail with ESRCH)."""
    return exc.errno in (errno.ENOENT, errno.ESRCH)


def _walked(pfd: int, st: os.stat_result, where: _Where) -> bool:
    """Whether a directory's contents are archived: not a pseudo filesystem's."""
    kind = _linux.fstatfs_type(pfd)
    if kind in PSEUDO_FILESYSTEMS:
        return False
    return not (kind == TMPFS_MAGIC and where.path == _DEV and st.st_dev != where.parent_dev)


def _info(st: os.stat_result, arcname: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(arcname)
    info.mode = stat.S_IMODE(st.st_mode)
    info.uid, info.gid = st.st_uid, st.st_gid
    info.mtime = int(st.st_mtime)
    return info


class _Exact:
    """A file read as exactly ``size`` bytes: one that shrank since its stat is padded
    with zeros (as GNU tar pads it), so the archive's header stays true."""

    def __init__(self, f: IO[bytes], size: int) -> None:
        self._f, self._left = f, size

    def read(self, n: int = -1) -> bytes:
        n = self._left if n < 0 else min(n, self._left)
        data = self._f.read(n)
        data += bytes(n - len(data))
        self._left -= n
        return data


def _add(tar: tarfile.TarFile, pfd: int, arcname: str, where: _Where, *, top: bool = False) -> None:
    """Archive one entry; everything that can find it gone is done before its header
    is written, so a vanished entry is left out whole (the top one is an error)."""
    try:
        st = os.fstat(pfd)
        info = _info(st, arcname)
        if stat.S_ISDIR(st.st_mode):
            info.type = tarfile.DIRTYPE
            if not _walked(pfd, st, where):
                tar.addfile(info)
                return
            dfd = _reopen(pfd, os.O_RDONLY | os.O_DIRECTORY)
            try:
                names = sorted(os.listdir(dfd))
                tar.addfile(info)
                _add_children(tar, dfd, arcname, names=names, where=where, dev=st.st_dev)
            finally:
                os.close(dfd)
        elif stat.S_ISREG(st.st_mode):
            _add_file(tar, pfd, st, info, where.seen)
        elif stat.S_ISLNK(st.st_mode):
            info.type = tarfile.SYMTYPE
            info.linkname = os.readlink("", dir_fd=pfd)  # readlinkat(fd, ""): the link's text
            tar.addfile(info)
        elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) or stat.S_ISFIFO(st.st_mode):
            info.type = (
                tarfile.CHRTYPE
                if stat.S_ISCHR(st.st_mode)
                else tarfile.BLKTYPE
                if stat.S_ISBLK(st.st_mode)
                else tarfile.FIFOTYPE
            )
            info.devmajor, info.devminor = os.major(st.st_rdev), os.minor(st.st_rdev)
            tar.addfile(info)
        # a socket has no tar type: left out, as docker's archive leaves it out
    except OSError as exc:
        if top or not _gone(exc):
            raise


def _add_file(
    tar: tarfile.TarFile,
    pfd: int,
    st: os.stat_result,
    info: tarfile.TarInfo,
    seen: dict[tuple[int, int], str],
) -> None:
    key = (st.st_dev, st.st_ino)
    if st.st_nlink > 1 and key in seen:
        info.type, info.linkname = tarfile.LNKTYPE, seen[key]
        tar.addfile(info)
        return
    with os.fdopen(_reopen(pfd, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
        info.size = os.fstat(f.fileno()).st_size
        seen[key] = info.name
        tar.addfile(info, _Exact(f, info.size))


def _add_children(
    tar: tarfile.TarFile, dfd: int, arcname: str, *, names: list[str], where: _Where, dev: int
) -> None:
    for name in names:
        try:
            child = _linux.child_path(dfd, name)
        except FileNotFoundError:
            continue  # removed while the tree was read
        try:
            _add(tar, child, posixpath.join(arcname, name), where.child(name, dev))
        finally:
            os.close(child)


# -- unpacking a tar stream below a root ------------------------------------------------------


def _member_path(name: str, dest: str, rebase: tuple[str, str] | None) -> str:
    """Where a member goes below the root; InvalidArgument when it climbs out of ``dest``."""
    rel = posixpath.normpath(name.lstrip("/") or ".")
    if rel == ".." or rel.startswith("../"):
        raise errors.InvalidArgument(f"invalid archive: {name!r} is outside the destination")
    if rebase is not None and rebase[0] == ".":  # a directory's contents, under a new name
        rel = posixpath.normpath(posixpath.join(rebase[1], rel))
    elif rebase is not None:
        head, _, tail = rel.partition("/")
        if head == rebase[0]:
            rel = posixpath.join(rebase[1], tail) if tail else rebase[1]
    return posixpath.normpath(posixpath.join(dest, rel))


def _inside(path: str, dest: str) -> bool:
    return path == dest or path.startswith(dest.rstrip("/") + "/")


def extract_tar(
    root_fd: int,
    dest: str,
    tar: tarfile.TarFile,
    *,
    rebase: tuple[str, str] | None = None,
    owner: tuple[int, int] | None = None,
) -> None:
    """Unpack ``tar`` into the directory ``dest`` below ``root_fd``.

    ``rebase`` renames the archive's top entry (``cp``'s file-to-new-name rule).
    ``owner``: every file's uid and gid (``cp`` without ``-a``), or the archive's when None.
    Modes and modification times are the archive's.
    """
    dest = clean(dest)
    dirs: list[tuple[str, float]] = []
    for member in tar:
        path = _member_path(member.name, dest, rebase)
        if not _inside(path, dest):
            raise errors.InvalidArgument(f"invalid archive: {member.name!r} is outside {dest}")
        uid, gid = owner if owner is not None else (member.uid, member.gid)
        if path == "/":
            continue  # the root itself keeps what it has
        parent, base = posixpath.split(path)
        pfd = _ensure_dir(root_fd, parent)
        try:
            if member.isdir():
                _make_dir(pfd, base, path, mode=member.mode, uid=uid, gid=gid)
                dirs.append((path, member.mtime))
                continue
            _clear(pfd, base, path)
            _make(
                tar,
                member,
                root_fd=root_fd,
                pfd=pfd,
                base=base,
                dest=dest,
                rebase=rebase,
                owner=(uid, gid),
            )
        finally:
            os.close(pfd)
    for path, mtime in reversed(dirs):  # children first: making them moved their mtimes
        with _opened(root_fd, path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW) as fd:
            os.utime(fd, (mtime, mtime))


@contextlib.contextmanager
def _opened(root_fd: int, path: str, flags: int) -> Iterator[int]:
    fd = _linux.openat2_in_root(root_fd, path, flags)
    try:
        yield fd
    finally:
        os.close(fd)


def _ensure_dir(root_fd: int, path: str) -> int:
    """An O_PATH fd of the directory ``path``, made (0755) with its parents if missing."""
    try:
        return _linux.path_in_root(root_fd, path, directory=True)
    except FileNotFoundError:
        pass
    parent, base = posixpath.split(path)
    pfd = _ensure_dir(root_fd, parent)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(base, 0o755, dir_fd=pfd)
        return _linux.child_path(pfd, base, directory=True)
    finally:
        os.close(pfd)


def _lstat(pfd: int, base: str) -> os.stat_result | None:
    try:
        return os.stat(base, dir_fd=pfd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _make_dir(pfd: int, base: str, path: str, *, mode: int, uid: int, gid: int) -> None:
    st = _lstat(pfd, base)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise errors.FailedPrecondition(f"cannot overwrite non-directory {path!r} with directory")
    if st is None:
        os.mkdir(base, 0o700, dir_fd=pfd)
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
    try:
        os.fchown(fd, uid, gid)
        os.fchmod(fd, mode & 0o7777)
    finally:
        os.close(fd)


def _clear(pfd: int, base: str, path: str) -> None:
    """Make room for a non-directory: an old one goes, a directory stays (an error)."""
    st = _lstat(pfd, base)
    if st is None:
        return
    if stat.S_ISDIR(st.st_mode):
        raise errors.FailedPrecondition(f"cannot overwrite directory {path!r} with non-directory")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(base, dir_fd=pfd)


def _make(
    tar: tarfile.TarFile,
    member: tarfile.TarInfo,
    *,
    root_fd: int,
    pfd: int,
    base: str,
    dest: str,
    rebase: tuple[str, str] | None,
    owner: tuple[int, int],
) -> None:
    uid, gid = owner
    if member.isreg():
        _write_file(tar, member, pfd=pfd, base=base, uid=uid, gid=gid)
    elif member.issym():
        here = posixpath.dirname(_member_path(member.name, dest, rebase))
        if not member.linkname.startswith("/") and not _inside(
            posixpath.normpath(posixpath.join(here, member.linkname)), dest
        ):
            raise errors.InvalidArgument(
                f"invalid symlink {member.name!r} -> {member.linkname!r}: outside the destination"
            )
        os.symlink(member.linkname, base, dir_fd=pfd)
        os.chown(base, uid, gid, dir_fd=pfd, follow_symlinks=False)
    elif member.islnk():
        target = _member_path(member.linkname, dest, rebase)
        if not _inside(target, dest):
            raise errors.InvalidArgument(f"invalid hard link {member.name!r}: outside {dest}")
        tparent, tbase = posixpath.split(target)
        tfd = _linux.path_in_root(root_fd, tparent, directory=True)
        try:
            os.link(tbase, base, src_dir_fd=tfd, dst_dir_fd=pfd, follow_symlinks=False)
        finally:
            os.close(tfd)
    elif member.ischr() or member.isblk() or member.isfifo():
        kind = stat.S_IFCHR if member.ischr() else stat.S_IFBLK if member.isblk() else stat.S_IFIFO
        dev = os.makedev(member.devmajor, member.devminor)
        os.mknod(base, kind | (member.mode & 0o777), dev, dir_fd=pfd)
        os.chown(base, uid, gid, dir_fd=pfd, follow_symlinks=False)


def _write_file(
    tar: tarfile.TarFile, member: tarfile.TarInfo, *, pfd: int, base: str, uid: int, gid: int
) -> None:
    # O_EXCL|O_NOFOLLOW: the name was just cleared, so a link or a file put there
    # meanwhile fails the open rather than being written through.
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(base, flags, 0o600, dir_fd=pfd)
    with os.fdopen(fd, "wb") as out:
        src = tar.extractfile(member)
        if src is not None:
            while chunk := src.read(_CHUNK):
                out.write(chunk)
        os.fchown(fd, uid, gid)
        os.fchmod(fd, member.mode & 0o7777)  # after chown, which clears setuid bits
        out.flush()
        os.utime(fd, (member.mtime, member.mtime))


def kind_error(exc: OSError, path: str) -> errors.CtrexecError:
    """An OSError of a walk below a root, in the words docker's archive code uses."""
    if exc.errno == errno.ENOTDIR:
        return errors.InvalidArgument(f"{path}: not a directory")
    if exc.errno == errno.EROFS:
        return errors.FailedPrecondition(READ_ONLY)
    if exc.errno in (errno.EPERM, errno.EACCES):
        return errors.PermissionDenied(f"{path}: {exc.strerror}")
    return errors.Internal(f"{path}: {exc.strerror or exc}")
