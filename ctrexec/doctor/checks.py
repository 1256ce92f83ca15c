"""Every check, in gc's order, and the two calls the CLI and the library make.

The order is gc's: a check runs after the removals of those before it, so what a
removed container held (its snapshot, its namespace, its log directory) is already
unowned when its own check looks.
"""

from __future__ import annotations

import attrs

from ctrexec.doctor import (
    cgroups,
    containers,
    daemon,
    files,
    helperscopes,
    integrity,
    logdaemon,
    logdisk,
    netside,
    netstate,
    nomadsockets,
    restarts,
    shims,
    snapshots,
)
from ctrexec.doctor.files import is_spared
from ctrexec.doctor.findings import Check, Finding, Scope
from ctrexec.errors import CtrexecError

#: gc's order (see the module docstring).
CHECKS: tuple[Check, ...] = (
    # containerd and files
    containers.CHECK,
    shims.CHECK,
    snapshots.LEASES,
    snapshots.SNAPSHOTS,
    files.LOGS,
    files.FILES,
    cgroups.CHECK,
    nomadsockets.CHECK,
    # the host's network: a namespace before its veth, a result (its DEL) before the
    # reservations and rules no result explains
    netside.NAMESPACES,
    netside.VETHS,
    netstate.RESULTS,
    netstate.RESERVATIONS,
    netstate.RULES,
    # the integrity issue's damage: findings with their repair, nothing gc removes
    integrity.GROUPS,
    integrity.ADDRESSES,
    # a restart pending that no supervisor makes: a finding with its fix
    restarts.CHECK,
    # disks: warnings, nothing gc removes
    *logdisk.CHECKS,
    # the log daemon: started again if it died; a finding only when it cannot be
    logdaemon.CHECK,
    # the helpers' place on a systemd host (after the log daemon's start): findings only
    helperscopes.CHECK,
    # the daemon's own warnings (containerd 2.x's deprecations): nothing gc removes
    daemon.CHECK,
)


@attrs.frozen
class Failure:
    """A finding gc could not remove, and why (in the user's words)."""

    finding: Finding
    reason: str


@attrs.frozen
class GcReport:
    """What gc removed (or, with ``dry_run``, would remove), what it could not, and
    what it spared (no owner recorded: the reason is in each one's ``what``)."""

    removed: list[Finding]
    failed: list[Failure]
    dry_run: bool
    spared: list[Finding] = attrs.field(factory=list)


def _unchecked(check: Check, err: CtrexecError) -> Finding:
    return Finding(
        kind=check.kind,
        where="-",
        what=f"could not check: {err}",
        fix="ctrexec doctor (again, once the cause is fixed)",
        garbage=False,
    )


def _find(check: Check, scope: Scope) -> list[Finding]:
    try:
        return check.find(scope)
    except CtrexecError as err:
        return [_unchecked(check, err)]


def doctor(scope: Scope, checks: tuple[Check, ...] | None = None) -> list[Finding]:
    """Every finding of every check; changes nothing. A check that fails says so as a
    finding of its own, so a clean report means every check ran. The checks share one
    listing of each namespace and one read of the host's processes, taken during this
    run, not kept from an earlier one on the same scope."""
    scope.forget()
    try:
        return [f for check in (CHECKS if checks is None else checks) for f in _find(check, scope)]
    finally:
        scope.forget()


def gc(scope: Scope, *, dry_run: bool = False, checks: tuple[Check, ...] | None = None) -> GcReport:
    """Remove what doctor calls garbage, check by check in gc's order.

    With ``dry_run`` nothing is removed: the report lists what one check at a time
    finds, so a leftover that only an earlier removal would free is not listed.

    The scope's shared listings (:class:`~ctrexec.doctor.findings.Scope`) are dropped
    before and after each removal. Before: a remover judges its object again, and that
    second look must see what changed since its check's find, as it did when every
    check listed for itself (a shim serving a task started meanwhile is kept). After:
    the next check must see this removal, or what the removed object held (its
    snapshot, its log directory, its namespace pin) would look owned for the rest of
    the run, and the order above would free nothing.
    """
    scope.forget()
    try:
        return _gc(scope, dry_run, CHECKS if checks is None else checks)
    finally:
        scope.forget()


def _gc(scope: Scope, dry_run: bool, checks: tuple[Check, ...]) -> GcReport:
    removed: list[Finding] = []
    failed: list[Failure] = []
    kept: list[Finding] = []
    for check in checks:
        for finding in _find(check, scope):
            if is_spared(finding):
                kept.append(finding)
            if not finding.garbage or check.remove is None:
                continue
            if dry_run:
                removed.append(finding)
                continue
            scope.forget()
            try:
                check.remove(scope, finding)
            except CtrexecError as err:
                failed.append(Failure(finding, str(err)))
            else:
                removed.append(finding)
            finally:
                scope.forget()  # a failed removal may have removed part of it
    return GcReport(removed=removed, failed=failed, dry_run=dry_run, spared=kept)
