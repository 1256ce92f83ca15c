"""Each task's /etc/hosts, /etc/resolv.conf and /etc/hostname, as docker gives them.

Every task has its own three files, bind-mounted from a directory keyed by its
containerd namespace and container id, whatever its network: tasks sharing one
namespace (a group) each see their own hostname and resolver. Rendering is pure;
:func:`ensure` writes a task's files, and :mod:`ctrexec.tasks.files` says what goes in.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import attrs

from ctrexec.defaults import RUN_DIR
from ctrexec.errors import InvalidArgument
from ctrexec.net.netns import NETNS_RUN_DIR

DEFAULT_DIR = Path(RUN_DIR, "netns-files")
HOST_RESOLV = Path("/etc/resolv.conf")
HOST_HOSTS = Path("/etc/hosts")
_NAMES = ("hosts", "resolv.conf", "hostname")
#: Loopback lines every hosts file starts with (docker's set).
_LOCALHOST = (
    "127.0.0.1\tlocalhost",
    "::1\tlocalhost ip6-localhost ip6-loopback",
    "fe00::0\tip6-localnet",
    "ff00::0\tip6-mcastprefix",
    "ff02::1\tip6-allnodes",
    "ff02::2\tip6-allrouters",
)


@attrs.frozen
class HostFiles:
    """The three files of one task, as host paths."""

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


def task_dir(base: Path, namespace: str, container_id: str) -> HostFiles:
    """A task's files: ``base/<namespace>+<id>`` ('+' is in no containerd identifier, so
    no two pairs share a name, and none clashes with the per-namespace ``name-``/``ino-``
    directories of older versions)."""
    return HostFiles(base / f"{namespace}+{container_id}")


@attrs.frozen
class Member:
    """A task of a group, as the shared part of every member's /etc/hosts names it."""

    id: str
    task: str
    hostname: str


def format_members(members: Sequence[Member]) -> str:
    """The label value: ``ID:TASK:HOSTNAME`` entries, comma-separated."""
    return ",".join(f"{m.id}:{m.task}:{m.hostname}" for m in members)


def parse_members(text: str) -> tuple[Member, ...]:
    """:func:`format_members` read back; an entry not of three fields is skipped (a
    label is not user input, and a bad one must not stop the task from starting)."""
    found = []
    for entry in text.split(","):
        parts = entry.strip().split(":")
        if len(parts) == 3 and all(parts):
            found.append(Member(*parts))
    return tuple(found)


def parse_extra_host(text: str) -> tuple[str, str]:
    """docker's ``--add-host NAME:IP`` (or ``NAME=IP``; an IPv6 address may be in
    brackets) as (name, ip); the first separator splits, so ``db:fd00::5`` works."""
    cut = min((i for i in (text.find(":"), text.find("=")) if i >= 0), default=-1)
    name, ip = (text[:cut], text[cut + 1 :]) if cut >= 0 else (text, "")
    if cut < 0 or not name or any(c.isspace() or c == "#" for c in name):
        raise InvalidArgument(f"extra host {text!r} is not NAME:IP")
    if ip == "host-gateway":
        raise InvalidArgument(
            f"extra host {text!r}: host-gateway is not supported; give the host's IP address"
        )
    bare = ip[1:-1] if ip.startswith("[") and ip.endswith("]") else ip
    try:
        return name, str(ipaddress.ip_address(bare))
    except ValueError as exc:
        raise InvalidArgument(f"extra host {text!r}: {ip!r} is not an IP address") from exc


@attrs.frozen(kw_only=True)
class HostsEntries:
    """What one task's /etc/hosts says. ``base``: text to start from instead of the
    loopback lines (the host's own file, for a task on the host's network)."""

    hostname: str
    addresses: tuple[str, ...] = ()
    members: tuple[Member, ...] = ()
    extra_hosts: tuple[tuple[str, str], ...] = ()
    base: str | None = None


def render_hosts(entries: HostsEntries) -> str:
    """docker's order: loopback lines, the user's extra hosts (first match wins in
    glibc, so they override what follows), the task's own name, then its group.

    The task's own line names each of its namespace's addresses, else 127.0.1.1. Each
    group member is named (id, task name, hostname) on the namespace's addresses, else
    on 127.0.0.1: tasks of one namespace reach each other over its loopback.
    """
    base = entries.base
    lines = list(_LOCALHOST) if base is None else base.rstrip("\n").splitlines()
    named = {w for line in lines for w in line.split("#", 1)[0].split()[1:]}
    lines += [f"{ip}\t{name}" for name, ip in entries.extra_hosts]
    if entries.base is None or entries.hostname not in named:
        own = entries.addresses or ("127.0.1.1",)
        lines += [f"{addr}\t{entries.hostname}" for addr in own]
    named.add(entries.hostname)
    shared = entries.addresses or ("127.0.0.1",)
    for m in entries.members:
        names = [n for n in dict.fromkeys((m.id, m.task, m.hostname)) if n not in named]
        named.update(names)
        if names:
            lines += [f"{addr}\t{' '.join(names)}" for addr in shared]
    return "\n".join(lines) + "\n"


def render_resolv_conf(host_text: str, *, keep_loopback: bool = False) -> str:
    """The host's resolver config, without loopback nameservers unless ``keep_loopback``.

    A nameserver on the host's 127.0.0.0/8 (systemd-resolved, dnsmasq) is not
    reachable from another namespace, so it is dropped, as docker does; a task on the
    host's network reaches it, so it keeps them.
    """
    kept = []
    for line in host_text.splitlines():
        words = line.split()
        nameserver = words[:1] == ["nameserver"] and len(words) > 1
        if nameserver and not keep_loopback and _is_loopback(words[1]):
            continue
        kept.append(line)
    return "\n".join(kept).strip() + "\n"


def _is_loopback(server: str) -> bool:
    return server.startswith("127.") or server == "::1"


@attrs.frozen(kw_only=True)
class Resolver:
    """A resolv.conf's nameservers, search domains and options, in the file's order."""

    servers: tuple[str, ...] = ()
    searches: tuple[str, ...] = ()
    options: tuple[str, ...] = ()


def parse_resolv_conf(text: str, *, keep_loopback: bool = False) -> Resolver:
    """The parts of a resolv.conf (the last ``search`` line wins, as in glibc); loopback
    servers are left out unless ``keep_loopback``, for the reason
    :func:`render_resolv_conf` gives."""
    servers: list[str] = []
    searches: list[str] = []
    options: list[str] = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split(";", 1)[0].split()
        if words[:1] == ["nameserver"] and len(words) > 1:
            if keep_loopback or not _is_loopback(words[1]):
                servers.append(words[1])
        elif words[:1] in (["search"], ["domain"]):
            searches = words[1:]
        elif words[:1] == ["options"]:
            options += words[1:]
    return Resolver(servers=tuple(servers), searches=tuple(searches), options=tuple(options))


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


def host_resolver() -> Resolver:
    """The host's resolv.conf (:data:`HOST_RESOLV`) as a task's namespace can use it:
    loopback servers left out (they are not reachable from there); unreadable: empty."""
    return parse_resolv_conf(read_host_file(HOST_RESOLV))


def read_host_file(path: Path) -> str:
    """A host file's text; a missing or unreadable one reads as empty."""
    try:
        return path.read_text()
    except OSError:
        return ""


def all_written(directory: Path) -> bool:
    """Whether a task's files were all written (a crash, or a reboot that emptied
    /run, can leave some missing)."""
    return all((directory / n).exists() for n in _NAMES)


def _write(path: Path, text: str, *, replace: bool) -> None:
    """Write ``path`` through a temp file of the same directory, so no reader ever sees
    it half-written. ``replace=False`` keeps a file that exists: ``link`` never
    replaces, so the first of two writers wins and the file a running task
    bind-mounted (and may have edited, as /etc/hosts is writable) stays as it is.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            os.fchmod(f.fileno(), 0o644)
        if replace:
            Path(tmp).replace(path)
        else:
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def overwrite(path: Path, text: str) -> None:
    """Write over a task's file in place (same inode): a running task bind-mounted the
    file itself, so a new file renamed over it would stay unseen inside."""
    with path.open("w", encoding="utf-8") as f:
        f.write(text)


def ensure(
    files: HostFiles, *, hosts: str, resolv_conf: str, hostname: str, replace: bool
) -> HostFiles:
    """Write a task's files: all of them (``replace``, at create: what an earlier
    container of the name left is not this one's), else only those missing (at start)."""
    files.directory.mkdir(parents=True, exist_ok=True, mode=0o755)
    _write(files.hosts, hosts, replace=replace)
    _write(files.resolv_conf, resolv_conf, replace=replace)
    _write(files.hostname, hostname + "\n", replace=replace)
    return files


def remove_dir(directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)


def legacy_key(netns_path: str) -> str:
    """The per-namespace directory of versions before per-task files: its ip-netns name,
    else its inode."""
    parent, _, name = netns_path.rpartition("/")
    if parent == NETNS_RUN_DIR:
        return "name-" + name
    st = Path(netns_path).stat()
    return f"ino-{st.st_dev}-{st.st_ino}"


def remove_legacy(netns_path: str, *, base: Path = DEFAULT_DIR) -> None:
    """Forget a namespace's files as older versions wrote them (group down after an
    upgrade); nothing of the kind is made any more."""
    with contextlib.suppress(FileNotFoundError, OSError):
        shutil.rmtree(base / legacy_key(netns_path))
