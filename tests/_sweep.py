"""Leftovers of a test session that was killed, removed before this session starts.

CI runs on the machine a developer's session used, right after that session is stopped
and all it left running is killed. A test run in flight then leaves its private
containerd's directory behind, and with it the containers in it and their namespaces,
host files, CNI attachments and iptables rules on the host. Those collide with the next
session's fixed names and fail its audits, which look for the tests' own subnets.

Each such directory is a containerd that no longer runs. It is started again on its own
directories, and every container in it is removed the way a user would remove it
(``rm -f``, which tears down the attachment its labels record). Then the daemon is
stopped and its directory deleted. Two kinds of leftover have no record to go by, and
are judged by the tests' reserved range ``10.231.0.0/16`` (every test subnet lies in
it, which tests/unit/test_sweep.py checks): iptables rules that name an address in it,
with the CNI chains only they use, and bridges that hold an address in it and have no
port. So are the namespaces tests pin themselves (``cxt-``) that no process uses. These
are left alone while another test run is going on. runc's own state of the session's
namespace (under a path all containerds share) goes when no shim of that namespace runs
and the container's init is dead, and so do its empty cgroups. Nothing else on the host
is touched.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import attrs

from ctrexec._linux import mounts_under, remove_empty_cgroups
from ctrexec.containerd import containers
from ctrexec.containerd.daemon import DaemonPaths, EmbeddedContainerd
from ctrexec.doctor.cgroups import hierarchies
from ctrexec.errors import CtrexecError
from ctrexec.ids import CGROUP_PARENT, task_cgroup
from ctrexec.logs.orphaned_shims import arg, processes
from ctrexec.net import netns, nsrefs
from ctrexec.net.netns import NETNS_RUN_DIR
from ctrexec.testing import (
    OWNER_LOCK,
    PRIVATE_PARENT,
    PRIVATE_PREFIX,
    RUNC_STATE_DIR,
    owner_gone,
)

#: The chaos suite's own private containerds (tests/chaos/conftest.py), beside the
#: session's (``ctrexec.testing.PRIVATE_PREFIX``).
CHAOS_PREFIX = "cxc-"
PREFIXES = (PRIVATE_PREFIX, CHAOS_PREFIX)

#: Every subnet a test gives its networks lies in this range, and nothing else does.
TEST_RANGE = ipaddress.ip_network("10.231.0.0/16")
#: The prefix of the namespaces tests pin themselves (ctrexec's own are ``cx-``).
TEST_PINS = "cxt-"
#: A directory without an owner lock younger than this may be a run that is starting.
MIN_AGE = 60.0
TABLES = ("nat", "filter")
_ADDRESS = re.compile(r"\b10\.231\.\d{1,3}\.\d{1,3}\b")
_OWNER = re.compile(r'name: \\"([^"\\]+)\\" id: \\"([^"\\]+)\\"')


@attrs.frozen
class Rule:
    """One ``-A CHAIN ...`` line of ``iptables-save``."""

    table: str
    chain: str
    spec: tuple[str, ...]
    line: str

    @property
    def target(self) -> str | None:
        for flag, value in zip(self.spec, self.spec[1:], strict=False):
            if flag in ("-j", "--jump", "-g", "--goto"):
                return value
        return None

    @property
    def owner(self) -> tuple[str, str] | None:
        """The (network, container id) a CNI plugin wrote into the rule's comment."""
        found = _OWNER.search(self.line)
        return (found.group(1), found.group(2)) if found else None


def parse_rules(table: str, saved: str) -> list[Rule]:
    out: list[Rule] = []
    for line in saved.splitlines():
        if line.startswith("-A "):
            words = shlex.split(line)
            out.append(Rule(table, words[1], tuple(words[2:]), line))
    return out


Range = ipaddress.IPv4Network | ipaddress.IPv6Network


def doomed(rules: Sequence[Rule], within: Range = TEST_RANGE) -> tuple[list[Rule], list[str]]:
    """The rules that belong to test networks, and the CNI chains only they use.

    A rule is a test's when it names an address of the tests' range, or when its comment
    names the same (network, container) as such a rule does (portmap's jump into a
    container's chain names no address). A chain goes, whatever it holds, when it is one
    of CNI's per-container chains (its name a hash of network and container) and only
    doomed rules jump to it.
    """
    picked = [r for r in rules if _names_address_in(r.line, within)]
    owners = {r.owner for r in picked if r.owner is not None}
    picked += [r for r in rules if r not in picked and r.owner in owners]
    chains: list[str] = []
    for rule in picked:
        target = rule.target
        if target is None or not target.startswith("CNI-") or _shared(target):
            continue
        jumps = [r for r in rules if r.table == rule.table and r.target == target]
        if target not in chains and all(r in picked for r in jumps):
            chains.append(target)
    return picked, chains


def _shared(chain: str) -> bool:
    """CNI's chains for every container (portmap's CNI-HOSTPORT-*), never one's own."""
    return chain.startswith("CNI-HOSTPORT-")


def _names_address_in(text: str, within: Range) -> bool:
    for address in _ADDRESS.findall(text):
        with contextlib.suppress(ValueError):
            if ipaddress.ip_address(address) in within:
                return True
    return False


def remove_rules(within: Range = TEST_RANGE) -> list[str]:
    """Delete the tests' leftover rules and chains; returns what went, as saved lines."""
    gone: list[str] = []
    for table in TABLES:
        saved = _run("iptables-save", "-t", table).stdout
        picked, chains = doomed(parse_rules(table, saved), within)
        for rule in picked:
            if _run("iptables", "-t", table, "-D", rule.chain, *rule.spec).returncode == 0:
                gone.append(rule.line)
        for chain in chains:
            _run("iptables", "-t", table, "-F", chain)
            if _run("iptables", "-t", table, "-X", chain).returncode == 0:
                gone.append(f"{table} chain {chain}")
    return gone


def remove_bridges(within: Range = TEST_RANGE, sys_net: Path = Path("/sys/class/net")) -> list[str]:
    """Delete bridges with an address in the tests' range and no port left."""
    gone: list[str] = []
    for link in sorted(sys_net.glob("*/bridge")):
        name = link.parent.name
        shown = _run("ip", "-o", "-4", "addr", "show", "dev", name).stdout
        if any((link.parent / "brif").iterdir()) or not _names_address_in(shown, within):
            continue
        if _run("ip", "link", "del", name).returncode == 0:
            gone.append(f"bridge {name}")
    return gone


def dead_dirs(base: Path = PRIVATE_PARENT, *, now: float | None = None) -> list[Path]:
    """Private containerds' directories whose run was killed: nobody holds the
    directory's owner lock; for a directory without one, its containerd no longer
    runs and it is old enough not to be a run that is starting."""
    now = time.time() if now is None else now
    found: list[Path] = []
    for where in _private_dirs(base):
        with contextlib.suppress(OSError):
            gone = owner_gone(where)
            if gone is None:
                young = now - where.stat().st_mtime < MIN_AGE
                gone = not young and not EmbeddedContainerd(DaemonPaths.under(where)).is_running()
            if gone and (where / "state").is_dir():
                found.append(where)
    return found


def remove_dead_dir(where: Path, cli: Sequence[str]) -> list[str]:
    """Start the dead containerd again, ``rm -f`` every container in it, then stop it
    and delete its directory. ``cli`` is how to run ctrexec's CLI."""
    claim = _claim(where)
    if claim is None:
        return []  # another session's sweep has it
    daemon = EmbeddedContainerd(DaemonPaths.under(where))
    gone: list[str] = []
    try:
        daemon.start()
        with daemon.client() as root:
            for ns in root.namespaces():
                ids = [c.id for c in containers.list_containers(root.with_namespace(ns))]
                if ids:
                    gone += _rm(cli, daemon.address, ns, ids)
    finally:
        daemon.stop()
        if not mounts_under(where):
            shutil.rmtree(where, ignore_errors=True)
            gone.append(f"directory {where}")
        os.close(claim)
    return gone


def _claim(where: Path) -> int | None:
    """The directory's owner lock, held while it is swept; None when someone has it."""
    fd = os.open(where / OWNER_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _rm(cli: Sequence[str], address: str, namespace: str, ids: Sequence[str]) -> list[str]:
    """``rm -f`` the containers; what it removed, and what it said when it failed."""
    argv = [*cli, "rm", "-f", "--address", address, "--namespace", namespace, *ids]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    said = [f"container {namespace}/{line}" for line in done.stdout.split()]
    return said + [f"rm -f in {namespace}: {line}" for line in done.stderr.splitlines()]


def _private_dirs(base: Path) -> list[Path]:
    return sorted(p for prefix in PREFIXES for p in base.glob(f"{prefix}*"))


def live_runs(base: Path = PRIVATE_PARENT) -> list[Path]:
    """Private containerds' directories of runs that are still going."""
    out = []
    for where in _private_dirs(base):
        gone = owner_gone(where)
        if gone is False or (
            gone is None and EmbeddedContainerd(DaemonPaths.under(where)).is_running()
        ):
            out.append(where)
    return out


def remove_test_pins(run_dir: Path = Path(NETNS_RUN_DIR)) -> list[str]:
    """The tests' own pinned namespaces (``cxt-``) that no process uses."""
    gone: list[str] = []
    for pin in sorted(run_dir.glob(f"{TEST_PINS}*")):
        if nsrefs.users_of(str(pin)):
            continue
        with contextlib.suppress(CtrexecError):
            netns.remove(pin.name)
            gone.append(f"namespace {pin.name}")
    return gone


def remove_runc_state(namespace: str, *, served: bool, root: Path = RUNC_STATE_DIR) -> list[str]:
    """runc's state of this session's namespace that no shim serves and whose init is
    dead: what a killed run leaves when its shims were killed too (CI kills all a
    stopped session left running). runc's state outlives its containerd, under a path
    every containerd of the host shares, so the next session's create of the same id
    fails with ``container with id exists``. The namespace is this session's own (each
    run of a matrix has its own); while any shim of it runs (``served``, from
    :func:`shim_serves`), nothing is touched."""
    where = root / namespace
    if not where.is_dir() or served:
        return []
    runc = shutil.which("runc")
    gone: list[str] = []
    for state in sorted(where.iterdir()):
        if _init_alive(state / "state.json"):
            continue
        if runc is not None:
            _run(runc, "--root", str(where), "delete", "--force", state.name)
        shutil.rmtree(state, ignore_errors=True)
        gone.append(f"runc state {namespace}/{state.name}")
    return gone


def remove_cgroups(namespace: str, *, served: bool) -> list[str]:
    """The empty cgroups of this session's namespace, and its ``/ctrexec/<namespace>``
    parent once empty: what a killed run leaves when its tasks died with their shims
    and nothing ran runc's delete (CI kills all a stopped session left running, and may
    share the host's cgroup trees but not its files, so no dead directory or runc state
    leads here). The kernel removes only a cgroup with no process and no child; while
    any shim of the namespace runs (``served``), nothing is touched (a task being made)."""
    if served:
        return []
    parent = f"{CGROUP_PARENT}/{namespace}"
    leaves: set[str] = set()
    for tree in hierarchies():
        with contextlib.suppress(OSError):
            leaves.update(p.name for p in (tree / parent.lstrip("/")).iterdir() if p.is_dir())
    gone = [
        f"cgroup {task_cgroup(namespace, leaf)}"
        for leaf in sorted(leaves)
        if remove_empty_cgroups(task_cgroup(namespace, leaf).lstrip("/"), parents=False)
    ]
    remove_empty_cgroups(parent.lstrip("/"), parents=False)
    return gone


def shim_serves(namespace: str) -> bool:
    """Whether a containerd shim of ``namespace`` runs (any containerd's). A scan of
    every process's argv: :func:`sweep` makes it once for the steps that ask."""
    for _, argv in processes().values():
        shim = Path(os.fsdecode(argv[0])).name.startswith("containerd-shim")
        if shim and arg(argv, b"-namespace") == os.fsencode(namespace):
            return True
    return False


def _init_alive(state: Path) -> bool:
    """Whether the container's init process (pid and start time, as runc recorded
    them) still runs. Unreadable state counts as alive: it is left alone."""
    try:
        saved = json.loads(state.read_text())
        pid, start = int(saved["init_process_pid"]), int(saved["init_process_start"])
    except (OSError, ValueError, KeyError, TypeError):
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except OSError:
        return False
    return int(fields[19]) == start


def sweep(cli: Sequence[str], namespace: str) -> list[str]:
    """Everything a killed test run left that this one can tell is a test's.

    What only a name or an address tells is left alone while another run goes on
    (two sessions at once: a developer's, say): it may be that run's.
    """
    gone: list[str] = []
    for where in dead_dirs():
        gone += remove_dead_dir(where, cli)
    served = shim_serves(namespace)  # after the dead dirs: their removal ends shims
    gone += remove_runc_state(namespace, served=served)
    gone += remove_cgroups(namespace, served=served)
    if live_runs():
        return gone
    return gone + remove_rules() + remove_bridges() + remove_test_pins()


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
