"""host-local's on-disk store, put back in step with the addresses that are really in use.

host-local (containernetworking/plugins 1.1.1, its ``disk`` backend) keeps one file
per allocated address in ``<dataDir>/<network>/``, named by the address as Go prints
it, holding ``<container id>\\r\\n<ifname>``, created exclusively, under a flock on
the ``lock`` file of that directory. It trusts that directory alone: once it is
wiped (a reboot empties /run, someone cleans /run/ctrexec) the allocator starts again
from the bottom and hands out addresses that live namespaces still carry.

:func:`reconcile` is the fix, run before each ADD: every live address without a
file gets one, naming its holder, so host-local skips it. A file that is there is
never touched, whoever it names; nothing here ever deletes one.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

log = logging.getLogger(__name__)

#: host-local's default dataDir, when a conflist does not give one.
DEFAULT_DATA_DIR = "/var/lib/cni/networks"
#: What separates the container id from the interface name in a reservation.
LINE_BREAK = "\r\n"
_LOCK_FILE = "lock"

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def reservation_text(holder: str, ifname: str) -> str:
    """A reservation file's content, as host-local writes it."""
    return holder.strip() + LINE_BREAK + ifname


def parse_reservation(text: str) -> tuple[str, str | None]:
    """(holder, ifname) of a reservation; files from before 0.7 hold the id alone."""
    holder, sep, ifname = text.strip().partition(LINE_BREAK)
    return holder.strip(), (ifname.strip() if sep else None)


@attrs.frozen
class Pool:
    """One host-local store: where its files are and which subnets it hands out."""

    directory: Path
    subnets: tuple[IPNetwork, ...]

    def holds(self, address: IPAddress) -> bool:
        return any(address in net for net in self.subnets)


def host_local_pools(network: str, plugins: Sequence[Mapping[str, Any]]) -> list[Pool]:
    """The host-local stores a conflist's plugins use (``ranges`` or the old ``subnet``)."""
    out = []
    for plugin in plugins:
        ipam = plugin.get("ipam")
        if not isinstance(ipam, Mapping) or ipam.get("type") != "host-local":
            continue
        texts = [r.get("subnet") for rs in ipam.get("ranges") or [] for r in rs or []]
        texts.append(ipam.get("subnet"))
        subnets = []
        for text in texts:
            if isinstance(text, str):
                with contextlib.suppress(ValueError):
                    subnets.append(ipaddress.ip_network(text, strict=False))
        data_dir = ipam.get("dataDir") or DEFAULT_DATA_DIR
        out.append(Pool(Path(str(data_dir), network), tuple(subnets)))
    return out


@contextlib.contextmanager
def _store_lock(directory: Path) -> Iterator[None]:
    """host-local's own lock on its store, so no ADD allocates while files are written."""
    fd = os.open(directory / _LOCK_FILE, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def reserve(directory: Path, address: IPAddress, holder: str, ifname: str) -> bool:
    """Write one reservation unless the address has one; True if it was written."""
    path = directory / str(address)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        return False
    try:
        os.write(fd, reservation_text(holder, ifname).encode())
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    os.close(fd)
    return True


def reconcile(
    pool: Pool, live: Mapping[IPAddress, str], *, ifname: str, skip: str | None = None
) -> list[IPAddress]:
    """Reserve every address of ``live`` (address -> holder) in the pool that has no
    file; the holder ``skip`` (the one being ADDed, whose own files host-local would
    call a duplicate allocation) is left out. The addresses reserved, for the log."""
    wanted = {a: h for a, h in live.items() if pool.holds(a) and h != skip}
    if not wanted:
        return []
    made = []
    try:
        pool.directory.mkdir(mode=0o755, parents=True, exist_ok=True)
        with _store_lock(pool.directory):
            for address, holder in sorted(wanted.items(), key=lambda kv: str(kv[0])):
                if reserve(pool.directory, address, holder, ifname):
                    made.append(address)
    except OSError as exc:  # the ADD still runs; duplicate address detection follows it
        log.warning("cannot reconcile IPAM store %s: %s", pool.directory, exc)
    for address in made:
        log.warning(
            "IPAM store %s had lost %s, still held by %s: reserved it again",
            pool.directory,
            address,
            wanted[address],
        )
    return made


def release_own(pool: Pool, addresses: Sequence[str], holder: str) -> None:
    """Remove the reservations of ``addresses`` that name ``holder`` (a teardown's
    leftovers host-local did not find); any other holder's file stays."""
    for text in addresses:
        path = pool.directory / text
        with contextlib.suppress(OSError, ValueError):
            if pool.holds(ipaddress.ip_address(text)):
                owner, _ = parse_reservation(path.read_bytes().decode("utf-8", "replace"))
                if owner == holder:
                    path.unlink()


__all__ = [
    "DEFAULT_DATA_DIR",
    "LINE_BREAK",
    "Pool",
    "host_local_pools",
    "parse_reservation",
    "reconcile",
    "release_own",
    "reservation_text",
    "reserve",
]
