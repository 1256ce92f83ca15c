"""Where ctrexec's long-lived helpers run: on a systemd host, a scope of their own.

The embedded containerd, the log daemon and the command server are started by whatever
command first needs them. On a host whose PID 1 is systemd that command may be a unit
(a ``Type=oneshot`` service, a timer's job, a Nomad task's scope), and a helper left in
its caller's cgroup dies when that unit ends, taking the shims and every later command's
view of the tasks with it, silently. So each helper starts in a transient scope of its
own under ``ctrexec.slice``: ``systemd-run --scope`` registers the scope and then
executes the helper in place, so the pid the caller records is the helper's, the
environment and inherited fds are kept, and the caller's unit can end without it. This
is how podman places conmon.

Without systemd as PID 1 (this project's cgroup v1 hosts, containers, most CI), the
argv is returned as it was and helpers keep today's placement: a session of their own.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from typing import TYPE_CHECKING

from ctrexec import procfs

if TYPE_CHECKING:
    from collections.abc import Sequence

#: Present exactly when systemd is the running manager (sd_booted(3)'s test).
SYSTEMD_BOOTED_DIR = "/run/systemd/system"
#: Helpers' scopes are grouped here, apart from every unit that may have started them.
SLICE = "ctrexec.slice"
#: ``0`` keeps helpers in their caller's cgroup even under systemd (a host whose policy
#: forbids transient units; a test that wants the old placement).
SCOPE_ENV = "CTREXEC_HELPER_SCOPE"


def systemd_booted() -> bool:
    """Whether systemd is the service manager here, and so may end a caller's cgroup."""
    try:
        return stat.S_ISDIR(os.lstat(SYSTEMD_BOOTED_DIR).st_mode)
    except OSError:
        return False


def scope_unit(role: str) -> str:
    """A unit name that is new each start: a scope outlives its helper while any process
    it left (a shim under containerd) is in it, so a name reused would be refused."""
    return f"ctrexec-{role}-{os.getpid()}-{os.urandom(3).hex()}.scope"


def helper_argv(role: str, argv: Sequence[str]) -> list[str]:
    """``argv`` as started in a transient systemd scope of its own, where systemd is the
    manager and the caller is root; ``argv`` itself elsewhere.

    ``role`` names the helper in the unit's name and description (``containerd``,
    ``logd``, ``server``). The helper's pid is the one the returned command's process
    has: ``systemd-run --scope`` executes it in place once the scope exists, and fails
    (exit status 1, its reason on stderr) when systemd refuses the scope, which the
    starter reports as the helper's failure to start.
    """
    if os.environ.get(SCOPE_ENV) == "0" or os.geteuid() != 0 or not systemd_booted():
        return list(argv)
    run = shutil.which("systemd-run", path="/usr/bin:/bin:/usr/sbin:/sbin")
    if run is None:
        return list(argv)
    return [
        run,
        "--scope",
        "--quiet",
        "--collect",
        f"--unit={scope_unit(role)}",
        f"--slice={SLICE}",
        f"--description=ctrexec {role} (started by pid {os.getpid()})",
        "--",
        *argv,
    ]


def cgroup_of(pid: int) -> str | None:
    """The process's cgroup in the unified hierarchy (the one systemd keeps units in),
    or None if it is gone or has none."""
    cgroups = procfs.proc_cgroups(pid)
    return None if cgroups is None else cgroups.get("")


def helper_placed(pid: int, *, timeout: float = 5.0) -> bool:
    """Wait, bounded, until the helper ``pid`` (started with :func:`helper_argv`) has
    left this process's cgroup; whether it did.

    A caller that exits right after starting a helper (the command line's server is
    started at the command's exit) must wait for this: when the caller's unit ends, its
    cgroup is killed whole, and a ``systemd-run`` that had not yet moved into its scope
    dies with it. Where ``helper_argv`` changed nothing, the helper shares the caller's
    cgroup by design and this answers False at once.
    """
    mine = cgroup_of(os.getpid())
    deadline = time.monotonic() + timeout
    while True:
        theirs = cgroup_of(pid)
        if theirs is None or not procfs.process_alive(pid):
            return False
        if theirs != mine:
            return True
        if not systemd_booted() or time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
