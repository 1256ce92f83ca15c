"""Fixtures for the chaos suite.

``chaos_daemon`` is a private containerd for tests that kill containerd, so the
session's daemon is never disturbed; ``session_ex`` is an executor on the session's
daemon for tests that keep it up. Both clean up on failure and fail the test if
anything of theirs is left: containerd objects, mounts, processes, namespaces.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _chaoslib import ChaosDaemon, gc_pass, kill_strays, remove_cgroups
from _integrity import bridged  # noqa: F401  (the fixture, for every chaos test)
from _sweep import CHAOS_PREFIX

from ctrexec import errors
from ctrexec._linux import mounts_under, unmount_all
from ctrexec.containerd.client import Client
from ctrexec.net import netns
from ctrexec.tasks.executor import Executor
from ctrexec.testing import PRIVATE_PARENT, audit, import_image, private_containerd

#: Prefix of every container id the chaos tests create on the session daemon.
SESSION_PREFIX = "chaos-"


@pytest.fixture
def chaos_daemon(test_image_archive: Path) -> Iterator[ChaosDaemon]:
    """A private containerd with the test image, in a namespace of its own."""
    base = Path(tempfile.mkdtemp(prefix=CHAOS_PREFIX, dir=PRIVATE_PARENT))
    namespace = f"chaos-{secrets.token_hex(3)}"
    address = str(base / "state" / "containerd.sock")
    left: list[str] = []
    try:
        with private_containerd(base) as first:
            daemon = ChaosDaemon(first, base, namespace)
            import_image(first.address, namespace, test_image_archive)
            try:
                yield daemon
            finally:
                daemon.close_clients()
                # A running daemon lets stop() kill and delete the tasks properly.
                if not daemon.current.is_running():
                    with contextlib.suppress(errors.CtrexecError):
                        daemon.restart()
                if daemon.current is not first:
                    daemon.current.stop()
    finally:
        left = kill_strays(address, namespace, "", base)
        remove_cgroups(namespace)
        unmount_all(mounts_under(base))
        mounted = mounts_under(base)
        if not mounted:
            shutil.rmtree(base, ignore_errors=True)
    assert left == [], f"processes outlived the private containerd: {left}"
    assert mounted == [], f"mounts left under {base}: {mounted}"


@pytest.fixture
def session_ex(
    client: Client, test_image: str, containerd_address: str, tmp_path: Path
) -> Iterator[Executor]:
    """An executor on the session daemon; teardown destroys what the test left.

    Tests name their containers ``chaos-...`` so the stray-process check can tell
    their shims and task processes from anything else the daemon runs.
    """
    ex = Executor(client, log_dir=tmp_path / "logs", files_dir=tmp_path / "files")
    leases_before = {le.id for le in client.leases()}
    daemon_dir = Path(containerd_address).parent.parent
    yield ex
    # Clean first, assert after: a failed test must not poison the session's audit.
    for info in ex.list(all_tasks=True):
        with contextlib.suppress(errors.NotFound):
            ex.destroy(info.id, force=True)
    left = kill_strays(containerd_address, client.namespace, SESSION_PREFIX, tmp_path)
    new_leases = [le.id for le in client.leases() if le.id not in leases_before]
    for lease_id in new_leases:  # a crash's expiring leases; tests report theirs
        client.delete_lease(lease_id, sync=True)
    gc_pass(client)
    assert left == [], f"processes left: {left}"
    assert mounts_under(daemon_dir) == [], "test left mounts behind"
    assert audit(client) == []
    files = list((tmp_path / "files").glob("*")) if (tmp_path / "files").exists() else []
    assert files == [], f"netns files left: {files}"


@pytest.fixture
def make_netns() -> Iterator[Callable[[], str]]:
    """Create pinned namespaces named ``cxt-...``; remove them after the test."""
    made: list[str] = []

    def make() -> str:
        name = f"cxt-{secrets.token_hex(4)}"
        netns.create(name)
        made.append(name)
        return name

    yield make
    for name in made:
        with contextlib.suppress(errors.NotFound):
            netns.remove(name)
    left = [n for n in made if Path(f"/run/netns/{n}").exists()]
    assert left == [], f"netns left: {left}"
