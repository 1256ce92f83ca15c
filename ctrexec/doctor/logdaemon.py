"""The shared log daemon: doctor brings it back, and names it when it cannot.

Why here: a dead daemon blocks every ``json-file`` task once its FIFO fills, while
``ps`` says Up. doctor is one of its keepers (:mod:`ctrexec.tasks.logkeeper`): it
starts a daemon that does not answer (which adopts the runs, or finds them again from
containerd's records after ``/run`` was wiped), so a sound host reports nothing. Only a
daemon that cannot be started is a finding: damage, with its cause and the fix; gc
removes nothing here.
"""

from __future__ import annotations

from pathlib import Path

from ctrexec.defaults import RUN_DIR
from ctrexec.doctor.findings import Check, Finding, Scope
from ctrexec.tasks import logkeeper

KIND = "logdaemon"


def find(scope: Scope) -> list[Finding]:
    # The default state dir means the daemon's default place (CTREXEC_LOGD_DIR too).
    state_dir = None if scope.state_dir == Path(RUN_DIR) else scope.state_dir
    stopped = logkeeper.revive(scope.client, state_dir, thorough=True, records=scope.records)
    if stopped is None:
        return []
    return [
        Finding(
            kind=KIND,
            where="log daemon",
            what=f"{logkeeper.STOPPED}: {stopped}; its json-file tasks block once 64 KiB wait",
            fix=(
                "fix the cause its own log names, then run `ctrexec doctor` again: it starts "
                "the daemon, which reads every running task's FIFOs again (or restart the "
                "tasks with --log-driver file)"
            ),
            garbage=False,
        )
    ]


CHECK = Check(kind=KIND, find=find)
