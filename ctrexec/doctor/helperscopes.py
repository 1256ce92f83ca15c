"""Where the helpers run, on a systemd host: each in a scope of its own.

A helper in the cgroup of the unit whose command started it (started by a ctrexec from
before :mod:`ctrexec.placement`, or with ``CTREXEC_HELPER_SCOPE=0``) dies when that unit
stops: the embedded containerd with its shims, the log daemon with every ``json-file``
task's reader. Nothing else says so before it happens, and afterwards the tasks look
merely ``Created``. doctor names the unit and the pid; moving a live process is left to
the operator, who knows when its tasks can spare it. gc removes nothing here.
"""

from __future__ import annotations

from ctrexec.containerd.daemon import EmbeddedContainerd
from ctrexec.doctor.findings import Check, Finding, Scope
from ctrexec.logs import client as logclient
from ctrexec.placement import SLICE, cgroup_of, systemd_booted

KIND = "helper-placement"

#: What each helper's death costs and how to move it, by role.
FIXES = {
    "containerd": (
        "with its shims",
        "when its tasks can be stopped, `ctrexec daemon stop`; the next command starts it "
        f"in a scope of its own in {SLICE}",
    ),
    "logd": (
        "and json-file tasks block once 64 KiB of output wait",
        "`kill PID`; the next task start or `ctrexec doctor` starts it again in a scope "
        "of its own, and it reads the running tasks' FIFOs again",
    ),
}


def foreign_unit(role: str, cgroup: str) -> str | None:
    """The unit a helper is in when that unit is not its own scope, else None."""
    parts = [p for p in cgroup.split("/") if p]
    if len(parts) >= 2 and parts[-2] == SLICE and parts[-1].startswith(f"ctrexec-{role}-"):
        return None
    units = [p for p in parts if p.endswith((".service", ".scope"))]
    return units[-1] if units else (parts[-1] if parts else "-.slice")


def _helpers(scope: Scope) -> list[tuple[str, int]]:
    found = []
    embedded = EmbeddedContainerd()
    if scope.client.address == embedded.address and (pid := embedded.pid()) is not None:
        found.append(("containerd", pid))
    reply = logclient.request({"op": "ping"}, start=False)
    if reply is not None and isinstance(reply.get("pid"), int):
        found.append(("logd", reply["pid"]))
    return found


def find(scope: Scope) -> list[Finding]:
    if not systemd_booted():
        return []  # no manager ends a caller's cgroup: today's placement holds
    findings = []
    for role, pid in _helpers(scope):
        cgroup = cgroup_of(pid)
        unit = None if cgroup is None else foreign_unit(role, cgroup)
        if unit is None:
            continue
        cost, fix = FIXES[role]
        findings.append(
            Finding(
                kind=KIND,
                where=f"{role} (pid {pid})",
                what=f"runs in {unit}'s cgroup ({cgroup}): it dies when {unit} stops, {cost}",
                fix=fix.replace("PID", str(pid)),
                garbage=False,
            )
        )
    return findings


CHECK = Check(kind=KIND, find=find)
