"""Interactive I/O: a task started with ``tty``/``stdin_open``, streaming exec, attach.

An interactive task's stdio is a FIFO set in a per-task directory, beside its log
path (so ``destroy`` removes it with the rest), as containerd's ``ctr`` keeps one: the
shim holds both ends of every FIFO, so clients can come and go (``attach``, detach,
``attach`` again) while the task runs.

Its output is logged as docker's is, with the default ``json-file`` through the log
daemon: the shim writes the daemon's FIFOs, as for any task, and the daemon copies what
it logs into the client's ``stdout`` (and ``stderr``) FIFO while a client reads it
(:mod:`ctrexec.logs.copies`). Without a client the task never waits for one. With
another log driver or transport, the client's FIFOs are the shim's: the client is
their one reader, nothing is logged, and without a client output waits in the pipe
(64 KiB), then the task blocks on its next write. Stdin is the shim's FIFO either way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Unpack

from ctrexec import labels as lbl
from ctrexec.containerd import containers, tasks
from ctrexec.containerd.client import Client
from ctrexec.containerd.fifos import STDERR, STDOUT, ClientEnds, FifoPaths
from ctrexec.containerd.streams import Process, StreamOptions
from ctrexec.containerd.tasks import Status, Stdio
from ctrexec.errors import CtrexecError, FailedPrecondition, InvalidArgument, TaskError
from ctrexec.oci.process import merge_env
from ctrexec.oci.user import ResolvedUser
from ctrexec.tasks import config as taskconfig
from ctrexec.tasks import info as taskinfo
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.output import is_interactive, uses_daemon
from ctrexec.tasks.reports import TaskHandle

#: The per-task FIFO directory's name, beside the task's log.
FIFO_DIR = "fifo"


def task_fifos(labels: Mapping[str, str], config: TaskConfig) -> FifoPaths:
    """Where an interactive task's FIFOs are (they may not exist yet)."""
    log_path = labels.get(lbl.LOG_PATH)
    if not log_path:
        raise FailedPrecondition("the container has no task directory for its FIFOs")
    return FifoPaths.existing(
        Path(log_path).parent / FIFO_DIR, stdin=config.stdin_open, stderr=not config.tty
    )


@contextlib.contextmanager
def task_stdio(
    labels: Mapping[str, str],
    config: TaskConfig | None,
    logged: Callable[[Mapping[str, str] | None], Stdio],
) -> Iterator[Stdio]:
    """The Stdio for Tasks.Create: ``logged(None)``'s (the log's), or an interactive
    task's: its stdin FIFO, and its output through the log daemon (``logged(copies)``,
    ``copies`` the client's FIFOs it feeds) or, with no daemon, the client's FIFOs.

    For the FIFOs, our ends are held across the block (the shim's opens need a peer,
    and the daemon opens its copies' ends while a reader is there) and closed after it:
    from then on the shim holds both ends of each, or the daemon one of a copy.
    """
    if config is None or not is_interactive(config):
        yield logged(None)
        return
    paths = _make_fifos(labels, config)
    with contextlib.closing(ClientEnds(paths, hold=True)):
        out, err = paths.stdout, paths.stderr
        if uses_daemon(config):
            copies = {STDOUT: out} | ({STDERR: err} if err else {})
            through = logged(copies)
            out, err = through.stdout, through.stderr
        yield Stdio(stdin=paths.stdin, stdout=out, stderr=err, terminal=config.tty)


def _make_fifos(labels: Mapping[str, str], config: TaskConfig) -> FifoPaths:
    wanted = task_fifos(labels, config)
    return FifoPaths.make(wanted.directory, stdin=config.stdin_open, stderr=not config.tty)


def start_attached(
    client: Client,
    task_id: str,
    start: Callable[[str], TaskHandle],
    *,
    stdin: bool = True,
    **streams: Unpack[StreamOptions],
) -> tuple[TaskHandle, Process]:
    """``start`` the task with our own FIFO ends open across it, then stream over them:
    what it writes before any attach is ours, even if it exits at once. A failed start
    closes them again; removing a container made for this run is the caller's."""
    record = containers.get(client, task_id)
    config = _interactive_config(task_id, taskconfig.config_of(record))
    paths = _make_fifos(record.labels, config)
    if not (stdin and config.stdin_open):
        paths = FifoPaths.existing(paths.directory, stdin=False, stderr=bool(paths.stderr))
    ends = ClientEnds(paths, hold=True)
    try:
        handle = start(task_id)
    except BaseException:
        ends.close()
        raise
    return handle, _process(client, task_id, handle.pid, config, ends, **streams)


def _interactive_config(task_id: str, config: TaskConfig | None) -> TaskConfig:
    if config is None or not is_interactive(config):
        raise FailedPrecondition(
            f"container {task_id} was not started with -i or -t; its output is in its log"
        )
    return config


def _process(
    client: Client,
    task_id: str,
    pid: int,
    config: TaskConfig,
    ends: ClientEnds,
    **streams: Unpack[StreamOptions],
) -> Process:
    """A Process for the task's init process, over these ends."""
    try:
        pending = tasks.arm_wait(client, task_id)
    except BaseException:
        ends.close()
        raise
    return Process(
        client, task_id, "", pid=pid, tty=config.tty, ends=ends, pending=pending, **streams
    )


def attach(
    client: Client, task_id: str, *, stdin: bool = True, **streams: Unpack[StreamOptions]
) -> Process:
    """Join the FIFOs of a running interactive task (stdin only if it has one open)."""
    info = taskinfo.inspect(client, task_id, addresses=False)
    config = _interactive_config(task_id, info.config)
    if info.status not in (Status.RUNNING, Status.PAUSED):
        raise FailedPrecondition(
            f"You cannot attach to a stopped container {task_id}, start it first"
        )
    paths = task_fifos(info.labels, config)
    if not stdin:
        paths = FifoPaths.existing(paths.directory, stdin=False, stderr=bool(paths.stderr))
    ends = ClientEnds(paths, hold=False)
    return _process(client, task_id, info.pid, config, ends, **streams)


def running_record(client: Client, task_id: str, args: Sequence[str]) -> containers.Container:
    """The record of a task that runs, for an exec of ``args`` (refused first if empty)."""
    if not args:
        raise InvalidArgument("exec needs a command")
    record = containers.get(client, task_id)
    state = tasks.find(client, task_id)
    if state is not None and state.status in (Status.PAUSED, Status.PAUSING):  # docker's words
        raise FailedPrecondition(
            f"container {task_id} is paused, unpause the container before exec"
        )
    if state is None or state.status is not Status.RUNNING:
        raise FailedPrecondition(f"container {task_id} is not running")
    return record


def exec_spec(
    task_spec: Mapping[str, Any],
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None,
    workdir: str | None,
    user: ResolvedUser | None,
    tty: bool,
) -> dict[str, Any]:
    """The exec'd process: the task's own process spec with these changes."""
    proc = dict(task_spec.get("process", {}))
    proc["args"] = list(args)
    proc["terminal"] = tty
    proc.pop("consoleSize", None)
    base = proc.get("env", [])
    if tty:
        base = ["TERM=xterm", *base]  # docker's, unless the task or the caller set one
    if env or tty:
        proc["env"] = merge_env(base, env or {})
    if workdir:
        proc["cwd"] = workdir
    if user is not None:
        proc["user"] = {
            "uid": user.uid,
            "gid": user.gid,
            "additionalGids": list(user.additional_gids),
        }
    return proc


@contextlib.contextmanager
def command_errors() -> Iterator[None]:
    """runc's 'not found' and 'permission denied' as docker's 127 and 126."""
    try:
        yield
    except TaskError:
        raise
    except CtrexecError as exc:
        raise tasks.command_error(exc) from exc
