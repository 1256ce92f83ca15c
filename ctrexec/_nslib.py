"""Thin, fork-free wrappers around the Linux namespace and mount syscalls.

Python 3.11 has no ``os.unshare``/``os.setns`` (3.12 does), so these go through
libc with ctypes. ``ctypes.util.find_library`` is deliberately not used: on Linux
it runs ``ldconfig``/``gcc`` in a subprocess, and this module must never fork
(gRPC channels live in the same process, and gRPC does not support fork).
``CDLL(None)`` gives the symbols already loaded into the interpreter, libc included.

Everything here raises plain :class:`OSError` with the real errno; the public
modules (:mod:`ctrexec.net.netns`) translate them into ctrexec errors at their seam.

The network namespace is a per-thread attribute. Code that must run inside another
namespace does so in a brand-new :class:`threading.Thread` (:func:`run_in_fresh_thread`)
that exits right after, so no thread that ever left the host namespace is reused.
"""

from __future__ import annotations

import ctypes
import fcntl
import logging
import os
import socket
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

CLONE_NEWNET = 0x40000000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_SHARED = 1 << 20
MNT_DETACH = 0x2
NSFS_MAGIC = 0x6E736673
#: ``_IO(0xb7, 0x3)`` from linux/nsfs.h: answers the CLONE_NEW* type of an nsfs fd.
NS_GET_NSTYPE = 0xB703

#: The calling *thread's* namespace. ``/proc/self`` names the thread-group leader,
#: which is the wrong namespace for a thread that unshared on its own.
THREAD_NETNS = "/proc/thread-self/ns/net"

_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = "16sH22x"  # struct ifreq: ifr_name[IFNAMSIZ], ifr_flags, padding to 40 bytes

_libc = ctypes.CDLL(None, use_errno=True)
_libc.unshare.argtypes = [ctypes.c_int]
_libc.unshare.restype = ctypes.c_int
_libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
_libc.setns.restype = ctypes.c_int
_libc.mount.argtypes = [
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_void_p,
]
_libc.mount.restype = ctypes.c_int
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.umount2.restype = ctypes.c_int
_libc.fstatfs.argtypes = [ctypes.c_int, ctypes.c_void_p]
_libc.fstatfs.restype = ctypes.c_int


def _check(ret: int, what: str, path: str | None = None) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}", path)


def unshare(flags: int) -> None:
    """unshare(2) for the calling thread only."""
    _check(_libc.unshare(flags), "unshare")


def setns(fd: int, nstype: int) -> None:
    """setns(2): move the calling thread into the namespace open at ``fd``."""
    _check(_libc.setns(fd, nstype), "setns")


def mount(source: str, target: str, fstype: str | None, flags: int) -> None:
    """mount(2) with no data argument."""
    _check(
        _libc.mount(
            os.fsencode(source),
            os.fsencode(target),
            os.fsencode(fstype) if fstype is not None else None,
            flags,
            None,
        ),
        "mount",
        target,
    )


def umount2(target: str, flags: int) -> None:
    """umount2(2)."""
    _check(_libc.umount2(os.fsencode(target), flags), "umount2", target)


def fstatfs_type(fd: int) -> int:
    """The ``f_type`` magic of the filesystem holding ``fd``.

    ``f_type`` is the first member of ``struct statfs`` on every Linux ABI, a
    native ``long`` on the 64-bit ones; the buffer is sized generously for the rest.
    """
    buf = ctypes.create_string_buffer(256)
    _check(_libc.fstatfs(fd, buf), "fstatfs")
    return ctypes.c_ulong.from_buffer(buf).value & 0xFFFFFFFF


def ns_type(fd: int) -> int:
    """``NS_GET_NSTYPE``: the CLONE_NEW* flag of the namespace behind an nsfs fd."""
    return int(fcntl.ioctl(fd, NS_GET_NSTYPE))


def set_link_up(ifname: str) -> None:
    """Set IFF_UP on ``ifname`` in the calling thread's network namespace.

    Uses the classic SIOCSIFFLAGS ioctl on a throwaway AF_INET socket, which is
    created in -- and therefore acts on -- the current thread's namespace. Used for
    ``lo`` right after unshare, where a full netlink stack would be overkill.
    """
    name = os.fsencode(ifname)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        req = struct.pack(_IFREQ, name, 0)
        flags = struct.unpack(_IFREQ, fcntl.ioctl(sock.fileno(), _SIOCGIFFLAGS, req))[1]
        if not flags & _IFF_UP:
            fcntl.ioctl(sock.fileno(), _SIOCSIFFLAGS, struct.pack(_IFREQ, name, flags | _IFF_UP))


def same_file(a: os.stat_result, b: os.stat_result) -> bool:
    """Namespace identity is (st_dev, st_ino) of its nsfs inode."""
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


class _Box:
    """Carries a thread's return value or exception back to the caller."""

    def __init__(self) -> None:
        self.value: object = None
        self.error: BaseException | None = None


def run_in_fresh_thread(fn: Callable[[], T], *, name: str = "ctrexec-netns") -> T:
    """Run ``fn`` in a new thread that exits when ``fn`` returns; re-raise its error.

    Threads are never reused for namespace work: if ``fn`` fails to restore the
    thread's namespace, the thread dies with it and nothing else ever runs there.
    """
    box = _Box()

    def target() -> None:
        try:
            box.value = fn()
        except BaseException as exc:  # carried to the caller, never swallowed
            box.error = exc

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    thread.join()
    if box.error is not None:
        raise box.error
    return box.value  # type: ignore[return-value]


def _restore(orig: int, orig_stat: os.stat_result) -> None:
    """Re-enter the thread's original namespace; log (only) if that fails."""
    try:
        setns(orig, CLONE_NEWNET)
    except OSError as exc:
        log.warning("netns thread could not return to its namespace: %s", exc)
        return
    if not same_file(Path(THREAD_NETNS).stat(), orig_stat):
        log.warning("netns thread is not back in its original namespace")


def in_netns(ns_fd: int | None, fn: Callable[[], T]) -> T:
    """Call ``fn`` on the current (fresh) thread inside a network namespace.

    ``ns_fd`` is an open nsfs fd to enter with setns, or ``None`` to unshare a new
    namespace. The thread's original namespace is re-entered afterwards and checked;
    a failure there is only logged, because the caller runs this on a throwaway
    thread (:func:`run_in_fresh_thread`) that exits right after, so nothing else can
    ever run in the wrong namespace.
    """
    orig = os.open(THREAD_NETNS, os.O_RDONLY | os.O_CLOEXEC)
    try:
        orig_stat = os.fstat(orig)
        if ns_fd is None:
            unshare(CLONE_NEWNET)
        else:
            setns(ns_fd, CLONE_NEWNET)
        try:
            return fn()
        finally:
            _restore(orig, orig_stat)
    finally:
        os.close(orig)
