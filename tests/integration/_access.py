"""What a process of another uid can reach: a child that runs as nobody and tries.

The child is the system's python, started as root; its first lines drop the
supplementary groups, setgid() and setuid() to 65534 (then check that root is out of
reach), so what it tries next it tries as any other user's process would. It prints
what it got: ``ok``, a reply, or the errno's name. It is not started with
``subprocess``'s ``user=``: that forks without vfork, and a fork of a test process
whose gRPC threads are busy can crash in gRPC's fork handlers.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

NOBODY = 65534
PYTHON = "/usr/bin/python3"

_DROP = f"""
import os
os.setgroups([])
os.setgid({NOBODY})
os.setuid({NOBODY})
try:
    os.setuid(0)
except PermissionError:
    pass
else:
    raise SystemExit("still root")
"""

_CONNECT = """
import errno, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(10)
try:
    s.connect(sys.argv[1])
except OSError as exc:
    print(errno.errorcode[exc.errno]); sys.exit()
if len(sys.argv) < 3:
    print("ok"); sys.exit()
try:
    s.sendall(sys.argv[2].encode())
    reply = s.recv(65536)
except OSError as exc:
    print(errno.errorcode[exc.errno]); sys.exit()
print(reply.decode(errors="replace").strip() or "closed")
"""

_OPEN = """
import errno, os, sys
try:
    os.close(os.open(sys.argv[1], os.O_RDONLY))
except OSError as exc:
    print(errno.errorcode[exc.errno]); sys.exit()
print("ok")
"""


def _as_nobody(code: str, *args: str) -> str:
    done = subprocess.run(
        [PYTHON, "-I", "-S", "-c", _DROP + code, *args],
        cwd="/", capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return done.stdout.strip()


def nobody_connects(path: Path | str, send: str | None = None) -> str:
    """``ok`` (or, with ``send``, the reply, ``closed`` for none) or the errno's name."""
    return _as_nobody(_CONNECT, str(path), *([send] if send is not None else []))


def nobody_opens(path: Path | str) -> str:
    return _as_nobody(_OPEN, str(path))


def assert_roots_alone(path: Path | str, mode: int) -> None:
    """Owned by root, and exactly ``mode`` (no bit for the group or others)."""
    st = os.stat(path)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, mode), (
        f"{path}: uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}"
    )


@contextlib.contextmanager
def loosened(*dirs: Path) -> Iterator[None]:
    """Let anyone through these directories for the block (0711), then put the modes
    back: what the next guard (the file's mode, the daemon's check) does alone."""
    before = [(d, stat.S_IMODE(d.stat().st_mode)) for d in dirs]
    try:
        for d, _ in before:
            d.chmod(0o711)
        yield
    finally:
        for d, mode in before:
            d.chmod(mode)


@contextlib.contextmanager
def passable_dir() -> Iterator[Path]:
    """A new directory anyone may pass through (0711), as /run and /tmp are: what is
    made under it is guarded by ctrexec's own modes alone. Removed after."""
    where = Path(tempfile.mkdtemp(prefix="sac-", dir="/tmp"))
    where.chmod(0o711)
    try:
        yield where
    finally:
        shutil.rmtree(where)
