"""/etc/hosts, /etc/resolv.conf and /etc/hostname shared by a network namespace.

Every task joined to one namespace sees the same three files, bind-mounted from a
directory keyed by that namespace. They are written once, atomically, by whichever
task comes first (threads and processes alike), so a task restarted into the
namespace finds them unchanged.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs

DEFAULT_DIR = Path("/run/ctrexec/netns-files")
HOST_RESOLV = Path("/etc/resolv.conf")


@attrs.frozen
class HostFiles:
    """The three files for one namespace, as host paths."""

    directory: Path

    @property
    def hosts(self) -> Path:
        return self.directory / "hosts"

    @property
    def resolv_conf(self) -> Path:
        return self.directory / "resolv.conf"

    @property
    def hostname(self) -> Path:
        return self.directory / "hostname"

    def mounts(self) -> list[tuple[Path, str]]:
        """(host file, container path) pairs for the spec."""
        return [
            (self.hosts, "/etc/hosts"),
            (self.resolv_conf, "/etc/resolv.conf"),
            (self.hostname, "/etc/hostname"),
        ]


def all_written(directory: Path) -> bool:
    """Whether a namespace's shared files were all written (a crash can cut it short)."""
    return all((directory / n).exists() for n in ("hosts", "resolv.conf", "hostname"))


def key_for(netns_path: str) -> str:
    """A directory name for a namespace: its ip-netns name, else its inode."""
    if netns_path.startswith("/run/netns/") and "/" not in netns_path[len("/run/netns/") :]:
        return "name-" + netns_path[len("/run/netns/") :]
    st = Path(netns_path).stat()
    return f"ino-{st.st_dev}-{st.st_ino}"


def render_hosts(hostname: str, addresses: Sequence[str] = ()) -> str:
    lines = [
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        "fe00::0\tip6-localnet",
        "ff00::0\tip6-mcastprefix",
        "ff02::1\tip6-allnodes",
        "ff02::2\tip6-allrouters",
    ]
    lines += [f"{addr}\t{hostname}" for addr in addresses]
    if not addresses:
        lines.append(f"127.0.1.1\t{hostname}")
    return "\n".join(lines) + "\n"


def render_resolv_conf(host_text: str) -> str:
    """The host's resolver config without loopback nameservers.

    A nameserver on the host's 127.0.0.0/8 (systemd-resolved, dnsmasq) is not
    reachable from another namespace, so it is dropped, as docker does.
    """
    kept = []
    for line in host_text.splitlines():
        words = line.split()
        if words[:1] == ["nameserver"] and len(words) > 1:
            addr = words[1]
            if addr.startswith("127.") or addr == "::1":
                continue
        kept.append(line)
    return "\n".join(kept).strip() + "\n"


def render_dns(
    servers: Sequence[str], search: Sequence[str] = (), options: Sequence[str] = ()
) -> str:
    """A resolv.conf of the caller's own (docker's --dns flags, Nomad's dns block)."""
    lines = [f"nameserver {s}" for s in servers]
    if search:
        lines.append("search " + " ".join(search))
    if options:
        lines.append("options " + " ".join(options))
    return "\n".join(lines) + "\n"


def _write_once(path: Path, text: str) -> None:
    """Create ``path`` with ``text`` unless it exists; concurrent writers agree on one.

    Every writer (any thread, any process) fills its own ``mkstemp`` file in the same
    directory and hard-links it into place. ``link`` never replaces: the first
    writer's file wins and the others drop theirs, so all converge on one content,
    and the inode that running tasks bind-mounted never changes under them (which
    ``os.replace`` would do). A temp name from the pid alone was shared by every
    thread of one Executor: one thread's cleanup deleted another's file mid-write.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            os.fchmod(f.fileno(), 0o644)
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def ensure(
    netns_path: str,
    *,
    hostname: str,
    addresses: Sequence[str] = (),
    base: Path = DEFAULT_DIR,
    resolv_conf: str | None = None,
) -> HostFiles:
    """The namespace's files, writing them on first use.

    Writers of one namespace take turns (an flock on its directory), so the three
    files come from one writer: two tasks asking for different hostnames at once
    cannot leave ``hosts`` naming one and ``hostname`` the other. ``resolv_conf``
    replaces the host's resolver config (without its loopback servers).
    """
    files = HostFiles(base / key_for(netns_path))
    files.directory.mkdir(parents=True, exist_ok=True, mode=0o755)
    if resolv_conf is None:
        try:
            host_resolv = HOST_RESOLV.read_text()
        except OSError:
            host_resolv = ""
        resolv_conf = render_resolv_conf(host_resolv)
    with _locked(files.directory):
        _write_once(files.hosts, render_hosts(hostname, addresses))
        _write_once(files.resolv_conf, resolv_conf)
        _write_once(files.hostname, hostname + "\n")
    return files


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # also drops the lock


def remove(netns_path: str, *, base: Path = DEFAULT_DIR) -> None:
    """Forget a namespace's files (when its last task is gone)."""
    with contextlib.suppress(FileNotFoundError, OSError):
        shutil.rmtree(base / key_for(netns_path))


def remove_dir(directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)
