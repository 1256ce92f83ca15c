"""Who made a host object: recorded when it is made, so gc never has to guess.

Pins, log and host-file directories and cgroups are the host's, shared by every
containerd on it, and two containerds may well use one namespace name (the embedded
daemon and a system containerd both default to ``ctrexec``). "No record of mine names
it" is then no proof of garbage: the record may be the other daemon's. So every such
object ctrexec makes names its owner, an :class:`Owner`: the containerd (its address:
two daemons on one host cannot share one), the containerd namespace, and the
container or group. gc removes only an object whose recorded owner is the daemon and
namespace it looks at, and which that daemon has no record for; one with no owner
recorded (made before owners were, or by someone else) is spared, and doctor says so.

Where the record lives: a namespace pin's in its marker (:mod:`ctrexec.net.nsmarks`);
a task's (its log and host-file directories, its cgroup) in one small file per task,
:func:`task_record`, under the state directory, written before the container record
is made and removed after it went; a network attachment's (its CNI result and the
host-local reservation its ADD makes, which names only the group) in one file per
attachment, :func:`attachment_record`, beside the CNI cache, written before the ADD
and removed with the cached result by the DEL. All go with a reboot, as pins and
cgroups do; a log directory that outlives a reboot then has no owner recorded and
is spared.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import attrs

from ctrexec.defaults import RUN_DIR

#: The per-task owner records, under the state directory; the per-attachment ones,
#: under the CNI cache directory.
OWNERS_DIR = "owners"
#: Why gc spares an object with no owner recorded, in doctor's and gc's words.
UNRECORDED = "no owner record: made before ctrexec recorded owners, or by another tool; spared"


@attrs.frozen
class Owner:
    """A containerd (by address), a namespace of it, and the container or group."""

    address: str
    namespace: str
    of: str

    def to_text(self) -> str:
        return f"address={self.address}\nnamespace={self.namespace}\nof={self.of}\n"

    @classmethod
    def parse(cls, text: str) -> Owner | None:
        """The owner a record's text names; None for anything else (an older marker)."""
        fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
        if not all(fields.get(k) for k in ("address", "namespace", "of")):
            return None
        return cls(fields["address"], fields["namespace"], fields["of"])

    def same_daemon(self, address: str, namespace: str) -> bool:
        """Whether this is an object of that containerd's namespace."""
        return (self.address, self.namespace) == (address, namespace)

    def __str__(self) -> str:
        return f"{self.of} of namespace {self.namespace} at {self.address}"


def task_record(state_dir: Path | None, namespace: str, task_id: str) -> Path:
    """The owner record of the task ``task_id`` of a containerd namespace, under the
    state directory (``/run/ctrexec`` when None)."""
    base = Path(RUN_DIR) if state_dir is None else state_dir
    return Path(base, OWNERS_DIR, f"{namespace}+{task_id}")


def attachment_record(cache_dir: Path, network: str, container_id: str, ifname: str) -> Path:
    """The owner record of the attachment (network, container id, ifname) whose CNI
    result is cached under ``cache_dir``: the owner of that result and of the
    reservation its ADD made (a host-local file names the container id alone)."""
    return Path(cache_dir, OWNERS_DIR, f"{network}+{container_id}+{ifname}")


def task_owners(state_dir: Path | None, namespace: str) -> list[Owner]:
    """The owners recorded for the tasks of a containerd namespace (of any daemon)."""
    base = task_record(state_dir, namespace, "x").parent
    try:
        paths = [p for p in base.iterdir() if p.name.startswith(f"{namespace}+")]
    except OSError:
        return []
    return [o for p in paths if (o := read(p)) is not None and o.namespace == namespace]


def write(path: Path, owner: Owner) -> None:
    """Record ``owner`` at ``path``, whole or not at all (a rename)."""
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(owner.to_text())
    tmp.replace(path)


@contextlib.contextmanager
def recording(state_dir: Path | None, owner: Owner) -> Iterator[None]:
    """Record ``owner`` as its task's (:func:`task_record`) for the block that makes
    the task's container record; if the block fails, the owner record goes again,
    unless it was there before (the name's existing container's: AlreadyExists)."""
    path = task_record(state_dir, owner.namespace, owner.of)
    had = path.exists()
    write(path, owner)
    try:
        yield
    except BaseException:
        if not had:
            forget(path)
        raise


def read(path: Path) -> Owner | None:
    """The owner recorded at ``path``; None when there is none."""
    try:
        return Owner.parse(path.read_text())
    except OSError:
        return None


def forget(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def spared(owner: Owner | None, address: str, namespace: str) -> str | None:
    """Why an object with this recorded owner is not gc's to judge for that containerd
    namespace, in doctor's words; None when it is."""
    if owner is None:
        return UNRECORDED
    if not owner.same_daemon(address, namespace):
        return f"owned by {owner}; spared"
    return None


__all__ = [
    "OWNERS_DIR",
    "UNRECORDED",
    "Owner",
    "attachment_record",
    "forget",
    "read",
    "recording",
    "spared",
    "task_owners",
    "task_record",
    "write",
]
