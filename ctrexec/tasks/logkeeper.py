"""Keeping the shared log daemon alive: who notices its death, and what then happens.

The daemon (:mod:`ctrexec.logs.daemon`) is one process reading every ``json-file``
task's FIFOs. When it dies (SIGKILL, the OOM killer, a crash), a task's output fills
its FIFO (64 KiB) and the task then blocks in its next write, while ``ps`` says Up.
Its keepers, each calling :func:`revive`:

- the supervisor, every :data:`CHECK_INTERVAL` seconds (``groups.supervisor``);
- ``ps``, ``inspect``, ``logs`` and ``group ps`` (through :mod:`ctrexec.tasks.info`)
  and ``doctor`` (:mod:`ctrexec.doctor.logdaemon`), whenever they run;
- every task start that uses it (its registration starts one that does not answer).

:func:`revive` starts a new daemon, which adopts every run from its registration
file; a writer blocked meanwhile resumes, and what waited in the FIFO is logged (no
line is lost, unless the killed daemon had read part of a line that it had not
written yet). If ctrexec's runtime directory was wiped, the registrations are gone:
the runs are found again from containerd's records (each managed container's log
path and rotation) and the FIFOs next to each log. When the daemon cannot be
started, :func:`annotate` gives each running task it should read a problem that
``ps`` and ``inspect`` show, and doctor names it with the fix.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import attrs

from ctrexec import labels as lbl
from ctrexec.containerd import containers
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import Status
from ctrexec.errors import CtrexecError
from ctrexec.logs import client as logclient
from ctrexec.logs import daemon as logdaemon
from ctrexec.logs import modes as logmodes
from ctrexec.tasks.config import config_of
from ctrexec.tasks.fields import Problem
from ctrexec.tasks.output import uses_daemon
from ctrexec.tasks.reports import TaskInfo

log = logging.getLogger("ctrexec.tasks.logkeeper")
#: How often the supervisor checks that the daemon answers (a listing and a ping).
CHECK_INTERVAL = 3.0
#: Every how many checks the supervisor also looks for runs from containerd's records.
THOROUGH_EVERY = 20
#: The problem's words, shared by ``ps``, ``inspect`` and doctor.
STOPPED = "logging stopped: the log daemon is down and could not be started again"
REPAIR = "run `ctrexec doctor` once the cause is fixed (it starts the daemon)"


def revive(
    client: Client,
    state_dir: Path | None = None,
    *,
    thorough: bool = False,
    records: Callable[[], Iterable[containers.Container]] | None = None,
) -> str | None:
    """Bring the log daemon back if runs need it; None when logging works (or nothing
    needs it), else why it could not (for :func:`annotate` and doctor).

    ``state_dir``: an Executor's (the daemon's directory under it); None for the
    default. Cheap when all is well: a listing of the registrations, a ping when there
    are some, and a stat; containerd is asked only after a restart or a wiped state,
    or when ``thorough`` (doctor; the supervisor now and then): that also finds the
    runs of a daemon that lost its state dir and was killed after a successor began.
    ``records``: the namespace's container records when the caller has listed them
    already (doctor's run shares one listing), called only when containerd is asked.
    """
    where = logmodes.daemon_dir(state_dir) or logclient.state_dir()
    try:
        restarted = logclient.keep_alive(where)
        wiped = not (where / logdaemon.STREAMS_DIR).is_dir()
        if restarted:
            log.warning("the log daemon in %s did not answer; started a new one", where)
        if restarted or wiped or thorough:
            if found := logclient.recover(_logs(client, records), where):
                log.warning("asked the log daemon to read %d runs again", found)
            # Marks this state as known, so the next check does not list again (a
            # place this caller cannot write is no failure while nothing needs it).
            with contextlib.suppress(OSError):
                where.mkdir(mode=0o700, parents=True, exist_ok=True)
                (where / logdaemon.STREAMS_DIR).mkdir(mode=0o700, exist_ok=True)
    except (CtrexecError, OSError) as exc:
        return f"{exc} (its own log: {where / 'logd.log'})"
    return None


def _logs(
    client: Client, listed: Callable[[], Iterable[containers.Container]] | None
) -> list[tuple[str, int, int]]:
    """``(log path, max size, max files)`` of every managed container whose output goes
    through the daemon, from containerd's records (no shim is asked)."""
    found = []
    if listed is None:
        records = containers.list_containers(client, containers.label_filter(lbl.MANAGED, "true"))
    else:  # the same records as that filter: the label's value, exactly "true"
        records = [r for r in listed() if r.labels.get(lbl.MANAGED) == "true"]
    for record in records:
        config = config_of(record)
        path = record.labels.get(lbl.LOG_PATH, "")
        if config is not None and path and Path(path).is_absolute() and uses_daemon(config):
            found.append((path, config.log_max_size, config.log_max_files))
    return found


def annotate(infos: Sequence[TaskInfo], stopped: str | None) -> list[TaskInfo]:
    """The infos, each running task the daemon should read given the problem that its
    logging stopped (``stopped``: :func:`revive`'s reason), so ``ps`` and ``inspect``
    say so."""
    if stopped is None:
        return list(infos)
    problem = Problem(STOPPED, stopped, REPAIR)
    return [
        attrs.evolve(i, problems=(*i.problems, problem))
        if i.status in (Status.RUNNING, Status.PAUSED) and uses_daemon(i.config)
        else i
        for i in infos
    ]


def keep(client: Client, state_dir: Path | None, done: threading.Event) -> None:
    """Check every :data:`CHECK_INTERVAL` seconds until ``done`` (the supervisor's
    thread): a daemon that died is started again within one interval, so a task
    blocked on its full FIFO resumes; one that cannot be started is logged once."""
    said: str | None = None
    checks = 0
    while not done.wait(CHECK_INTERVAL):
        checks += 1
        stopped = revive(client, state_dir, thorough=checks % THOROUGH_EVERY == 0)
        if stopped is not None and stopped != said:
            log.error("%s: %s", STOPPED, stopped)
        said = stopped
