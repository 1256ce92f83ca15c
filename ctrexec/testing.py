"""Test helpers for ctrexec and for schedulers built on it.

:func:`private_containerd` gives a throwaway containerd with its own root, state and
socket; :func:`audit` lists what a test run left behind in it. Both are plain
functions so any test framework can use them; ctrexec's own pytest fixtures wrap them.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ctrexec import _rpc, containers, tasks
from ctrexec._api.containerd.services.snapshots.v1 import snapshots_pb2
from ctrexec.client import Client
from ctrexec.daemon import DaemonPaths, EmbeddedContainerd
from ctrexec.mounts_table import mounts_under

TEST_ADDRESS_ENV = "CTREXEC_TEST_ADDRESS"
#: Snapshot kinds from containerd's snapshots API.
SNAPSHOT_ACTIVE = 2


@contextlib.contextmanager
def private_containerd(base: Path | None = None) -> Iterator[EmbeddedContainerd]:
    """Run a private containerd for the block, then stop it and remove its directories.

    The base directory is short on purpose: unix socket paths are limited to 108 bytes.
    """
    owned = base is None
    base_dir = Path(tempfile.mkdtemp(prefix="cxd-", dir="/var/tmp")) if base is None else base
    daemon = EmbeddedContainerd(DaemonPaths.under(base_dir))
    try:
        daemon.start()
        yield daemon
    finally:
        daemon.stop()
        if owned and not mounts_under(base_dir):
            shutil.rmtree(base_dir, ignore_errors=True)


def import_image(address: str, namespace: str, archive: Path) -> None:
    """Import an OCI archive with ``ctr`` (used until ctrexec imports by itself)."""
    subprocess.run(
        ["ctr", "--address", address, "--namespace", namespace, "images", "import", str(archive)],
        check=True,
        capture_output=True,
    )


def audit(client: Client, *, snapshotter: str = "overlayfs") -> list[str]:
    """What is left in the client's namespace that a clean test run would have removed.

    Committed snapshots belong to unpacked images and are not leaks; active ones are
    container root filesystems and are.
    """
    leftovers: list[str] = [f"task {t.container_id}" for t in tasks.list_tasks(client)]
    leftovers += [f"container {c.id}" for c in containers.list_containers(client)]
    leftovers += [f"lease {le.id}" for le in client.leases()]
    stream = client.rpc.server_stream(
        _rpc.SNAPSHOTS,
        "List",
        snapshots_pb2.ListSnapshotsRequest(snapshotter=snapshotter),
        snapshots_pb2.ListSnapshotsResponse,
        namespace=client.namespace,
    )
    for page in stream:
        leftovers += [f"snapshot {i.name}" for i in page.info if i.kind == SNAPSHOT_ACTIVE]
    return leftovers


def host_audit(prefix: str) -> list[str]:
    """Host objects whose names start with ``prefix``: netns files, links, mounts."""
    leftovers: list[str] = []
    netns_dir = Path("/run/netns")
    if netns_dir.is_dir():
        leftovers += [f"netns {p.name}" for p in netns_dir.iterdir() if p.name.startswith(prefix)]
    with contextlib.suppress(OSError):
        leftovers += [
            f"link {p.name}" for p in Path("/sys/class/net").iterdir() if p.name.startswith(prefix)
        ]
    return leftovers
