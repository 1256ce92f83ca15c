"""The code blocks of README.md and docs/*.md run, as written, on the session's
containerd (tests/_docblocks.py says which blocks and how they are marked).

The world the docs assume is made here: ``$CONTAINERD_ADDRESS`` names the session's
containerd, an image named ``busybox`` (the test image, which is busybox-static) is in
the docs' namespace, and in shell blocks ``ctrexec daemon start|stop`` stand for the
containerd the session owns (``start`` prints its address, ``stop`` does nothing),
because a second embedded containerd is not the tests' to start. ctrexec's bridge
network is the module's own: the ``CTREXEC_*`` settings (which ``NetworkRequest`` and
``networks_from_env`` read, as the command line does) name a bridge, subnet, CNI cache
and IPAM directory of its own, so a block that publishes a port is what a user types
and touches neither ``ctrexec0`` nor another test's network. Everything else is the
docs' own: each example removes what it made, and the test checks that it did
(containers, tasks, leases, active snapshots, pinned namespaces, and of the bridge
network: addresses, CNI results, iptables rules) before removing leftovers, so one
failing block does not fail the next.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import TEST_NAMESPACE
from _docblocks import ROOT, Block, all_blocks
from _nethelpers import IP_FORWARD, PLUGIN_DIR, iptables_dump, link_exists

from ctrexec import (
    Client,
    CtrexecError,
    FailedPrecondition,
    NotFound,
    list_images,
    remove_image,
    tag_image,
)
from ctrexec.testing import audit, import_image

#: The namespace the library examples name (``Client.connect(namespace="sched")``).
DOCS_LIBRARY_NAMESPACE = "sched"
#: The CLI examples' namespace, the session's own.
DOCS_CLI_NAMESPACE = f"{TEST_NAMESPACE}-docs"
#: The examples use fixed names (``web-1``, ``alloc1``) and cgroups are shared by the
#: sessions that run side by side (scripts/test --matrix), so they take turns.
LOCK = Path("/tmp/ctrexec-docs-examples.lock")
#: A generous bound for one example on a loaded machine: none takes a minute here.
EXAMPLE_TIMEOUT = 300
BLOCKS = [b for b in all_blocks() if b.kind in ("python", "shell")]
#: The docs' bridge network's subnet: a /24 no other test uses (tests/integration/
#: _nethelpers.py hands out 10.231.200-250; the modules with a fixed one keep 180-198
#: apart from this). Each session of scripts/test --matrix runs in a network namespace
#: of its own (scripts/isolate), and the sessions take turns here (``LOCK``).
DOCS_SUBNET = "10.231.184.0/24"
#: What marks the network's iptables rules (NAT, masquerade, port maps).
DOCS_SUBNET_PREFIX = DOCS_SUBNET.rsplit(".", 1)[0] + "."

#: What the shell blocks run before their text: `ctrexec` is the venv's, but the
#: session owns containerd.
SHELL_PRELUDE = """\
set -euo pipefail
ctrexec() {
  if [ "${1:-}" = daemon ]; then
    case "${2:-}" in start) echo "$CONTAINERD_ADDRESS";; stop) ;; *) command ctrexec "$@";; esac
  else
    command ctrexec "$@"
  fi
}
"""


@pytest.fixture(scope="module")
def docs_world(containerd_address: str, test_image_archive: Path) -> Iterator[str]:
    """The docs' image in their namespaces; both namespaces removed at the end."""
    with LOCK.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # released when the file closes
        for ns in (DOCS_LIBRARY_NAMESPACE, DOCS_CLI_NAMESPACE):
            (name,) = import_image(containerd_address, ns, test_image_archive)
            with Client.connect(containerd_address, namespace=ns) as c:
                tag_image(c, name, "busybox")
        try:
            yield containerd_address
        finally:
            for ns in (DOCS_LIBRARY_NAMESPACE, DOCS_CLI_NAMESPACE):
                _remove_namespace(containerd_address, ns)


@pytest.fixture(scope="module")
def docs_bridge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The ``CTREXEC_*`` settings of the docs' own bridge network; the bridge removed
    and ip_forward (which the bridge plugin turns on) put back at the end, then
    nothing of the network may be left."""
    if os.geteuid() != 0 or not (PLUGIN_DIR / "bridge").exists():
        pytest.skip("the docs' published ports need root and the CNI plugins")
    where = tmp_path_factory.mktemp("docs-net")
    name = f"cxtdoc{secrets.token_hex(2)}"
    env = {
        "CTREXEC_NETWORK": name,
        "CTREXEC_BRIDGE": name,
        "CTREXEC_SUBNET": DOCS_SUBNET,
        "CTREXEC_CNI_CACHE_DIR": str(where / "cni-cache"),
        "CTREXEC_IPAM_DIR": str(where / "ipam"),
    }
    forward = IP_FORWARD.read_text()
    try:
        yield env
    finally:
        subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)
        IP_FORWARD.write_text(forward)
    assert not link_exists(name)
    assert _network_leftovers(env) == []


def _network_leftovers(env: dict[str, str]) -> list[str]:
    """What of the bridge network outlived its containers: an allocated address, a CNI
    result or owner record, an iptables rule of the subnet."""
    ipam, cache = Path(env["CTREXEC_IPAM_DIR"]), Path(env["CTREXEC_CNI_CACHE_DIR"])
    found = [f"address {p.name}" for p in ipam.rglob(DOCS_SUBNET_PREFIX + "*")]
    found += [f"CNI result {p.name}" for p in cache.rglob("*-eth0")]
    found += [f"attachment owner {p.name}" for p in (cache / "owners").glob("*")]
    found += [f"rule {line}" for line in iptables_dump().splitlines() if DOCS_SUBNET_PREFIX in line]
    return found


def _remove_namespace(address: str, namespace: str) -> None:
    with Client.connect(address, namespace=namespace) as c:
        for image in list_images(c):
            remove_image(c, image.name)
        deadline = time.monotonic() + 60
        while True:  # containerd's GC frees the blobs and snapshots a moment later
            try:
                c.delete_lease(c.create_lease(ttl=None).id, sync=True)
                c.delete_namespace()
                return
            except NotFound:
                return
            except FailedPrecondition:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def _netns() -> set[str]:
    where = Path("/run/netns")
    return {p.name for p in where.iterdir()} if where.is_dir() else set()


def _leftovers(address: str, net_env: dict[str, str]) -> list[str]:
    """What the examples left, then removed so the next block starts clean."""
    found: list[str] = []
    for ns in (DOCS_LIBRARY_NAMESPACE, DOCS_CLI_NAMESPACE):
        with Client.connect(address, namespace=ns) as c:
            found += [f"{ns}: {what}" for what in audit(c)]
    return found + [f"bridge network: {what}" for what in _network_leftovers(net_env)]


def _clean(address: str, namespaces_before: set[str], net_env: dict[str, str]) -> None:
    """A container's removal releases its network by the settings in its labels; a
    group left up is taken down with the docs' settings."""
    env = dict(os.environ) | net_env
    for ns in (DOCS_LIBRARY_NAMESPACE, DOCS_CLI_NAMESPACE):
        cli = [sys.executable, "-m", "ctrexec.cli.main"]
        listed = subprocess.run(
            [*cli, "ps", "-aq", "--no-trunc", "--address", address, "--namespace", ns],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        names = listed.stdout.split()
        if names:
            subprocess.run(
                [*cli, "rm", "-f", *names, "--address", address, "--namespace", ns],
                capture_output=True, check=False, env=env,
            )  # fmt: skip
        groups = subprocess.run(
            [*cli, "group", "ls", "--address", address, "--namespace", ns],
            capture_output=True, text=True, check=False, env=env,
        )  # fmt: skip
        for group in groups.stdout.split() if groups.returncode == 0 else ():
            subprocess.run(
                [*cli, "group", "down", group, "--address", address, "--namespace", ns],
                capture_output=True, check=False, env=env,
            )  # fmt: skip
    for name in _netns() - namespaces_before:
        subprocess.run(
            [sys.executable, "-m", "ctrexec.cli.main", "netns", "rm", "--force", name],
            capture_output=True, check=False,
        )  # fmt: skip


def _run(
    block: Block, address: str, net_env: dict[str, str], tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ) | net_env
    env["CONTAINERD_ADDRESS"] = address
    env["CTREXEC_NAMESPACE"] = DOCS_CLI_NAMESPACE
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    if block.kind == "python":
        script = tmp_path / "example.py"
        script.write_text(block.code)
        argv = [sys.executable, str(script)]
        cwd = tmp_path
    else:
        script = tmp_path / "example.sh"
        script.write_text(SHELL_PRELUDE + block.code)
        argv = ["bash", str(script)]
        cwd = ROOT  # the README's commands are a checkout's (.venv/bin/python scripts/...)
    # Its own session, so that an example that hangs (a `stats` that streams forever) is
    # killed with everything it started; the test is its keeper.
    with subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    ) as proc:  # fmt: skip
        try:
            out, err = proc.communicate(timeout=EXAMPLE_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            err += f"\n(killed: still running after {EXAMPLE_TIMEOUT} s)"
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


@pytest.mark.parametrize("block", BLOCKS, ids=[b.where for b in BLOCKS])
def test_a_doc_example_runs_and_leaves_nothing(
    block: Block, docs_world: str, docs_bridge: dict[str, str], tmp_path: Path
) -> None:
    namespaces_before = _netns()
    try:
        done = _run(block, docs_world, docs_bridge, tmp_path)
        assert done.returncode == 0, (
            f"{block.where} failed ({done.returncode}):\n{block.code}\n"
            f"stdout: {done.stdout[-3000:]}\nstderr: {done.stderr[-3000:]}"
        )
        left = _leftovers(docs_world, docs_bridge)
        assert not left, f"{block.where} left {left}"
        pinned = sorted(_netns() - namespaces_before)
        assert not pinned, f"{block.where} left network namespaces {pinned}"
    finally:
        try:
            _clean(docs_world, namespaces_before, docs_bridge)
        except CtrexecError as exc:  # the assertion above says what was wrong
            print(f"cleaning after {block.where}: {exc}", file=sys.stderr)


def test_the_library_and_cli_examples_are_collected() -> None:
    """docs/library.md's rename example is one of them: the call it once got wrong."""
    assert any(b.path.name == "library.md" and "rename(" in b.code for b in BLOCKS)
    assert any(b.path.name == "README.md" and b.kind == "shell" for b in BLOCKS)
