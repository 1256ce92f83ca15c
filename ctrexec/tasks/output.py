"""Where a task's output goes, from its config: a log (by driver), the caller's paths,
an attached client, or nowhere.

The log drivers' vocabulary is :mod:`ctrexec.logs.modes`; this module is what one
task's :class:`~ctrexec.tasks.config.TaskConfig` makes of it: the stdio URIs or paths
``Tasks.Create`` gets, whether ``logs`` has anything to read, and the log daemon's
registrations a failed start, a destroy or a rename leaves to forget. An interactive
(``-i``/``-t``) task's output goes to the attached client, through the FIFOs
:mod:`ctrexec.tasks.stdio` makes; with the default ``json-file`` through the log
daemon, which logs it and copies it to those FIFOs, as docker keeps a terminal
container's log. With another driver or transport the client is its only reader, and
it keeps no log.
"""

from __future__ import annotations

import contextlib
import os
import stat
import urllib.parse
from collections.abc import Mapping
from pathlib import Path

from ctrexec import labels as lbl
from ctrexec.containerd import containers
from ctrexec.containerd.client import Client
from ctrexec.errors import CtrexecError, InvalidArgument
from ctrexec.logs import client as logdaemon_client
from ctrexec.logs import modes as logmodes
from ctrexec.logs import reader as logs
from ctrexec.logs.launcher import write_launcher
from ctrexec.tasks.config import TaskConfig, config_of


def caller_paths(config: TaskConfig | None) -> tuple[str, str] | None:
    """The caller's output paths, when the task's output goes there instead of a log."""
    if config is None or (config.stdout_path is None and config.stderr_path is None):
        return None
    return config.stdout_path or "", config.stderr_path or ""


def is_interactive(config: TaskConfig | None) -> bool:
    """Whether the task's output goes to an attached client (``-i``/``-t``)."""
    return config is not None and config.interactive


def uses_daemon(config: TaskConfig | None) -> bool:
    """Whether the task's output goes through the shared log daemon."""
    if config is None or caller_paths(config) is not None:
        return False  # a record from before the daemon: its own driver, if any
    return config.log_driver == logmodes.JSON_FILE and config.log_transport == logmodes.DAEMON


def _prepare_output(path: str) -> None:
    """Make a missing output path a file: the shim opens only a file or a FIFO that exists.

    The runc v2 shim appends to a regular file, and writes a FIFO once a reader has it
    open (within 30 s, or Tasks.Create fails). A FIFO is not opened here: a writer that
    came and went would end the stream for the caller's reader.
    """
    if not path:
        return
    try:
        st = Path(path).stat()
    except FileNotFoundError:
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o640))
        except OSError as exc:
            raise InvalidArgument(f"cannot create task output {path}: {exc.strerror}") from exc
        return
    except OSError as exc:
        raise InvalidArgument(f"cannot use task output {path}: {exc.strerror}") from exc
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
        raise InvalidArgument(f"task output {path} is neither a file nor a FIFO")


def stdio_for(
    config: TaskConfig | None,
    log_path: str,
    *,
    state_dir: Path | None = None,
    copies: Mapping[str, str] | None = None,
) -> tuple[str, str, str]:
    """``(stdout, stderr, token)`` for ``Tasks.Create`` (empty: the shim's null I/O).

    For the daemon the paths are FIFOs it already holds open, and ``token`` names the
    registration, which a failed start must drop (:func:`forget`). ``state_dir`` moves
    ctrexec's own files (the daemon's socket, the per-task driver's launcher) under it.
    ``copies``: an interactive task's client FIFOs, by stream, for the daemon to feed
    too (only when :func:`uses_daemon`).
    """
    paths = caller_paths(config)
    if paths is not None:
        for path in paths:
            _prepare_output(path)
        return paths[0], paths[1], ""
    driver = logmodes.driver_of(config)
    if driver == logmodes.NONE:
        return "", "", ""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    if driver == logmodes.FILE:
        uri = "file://" + urllib.parse.quote(os.fspath(log_path), safe="/")
        return uri, uri, ""
    max_size = config.log_max_size if config else logs.DEFAULT_MAX_SIZE
    max_files = config.log_max_files if config else logs.DEFAULT_MAX_FILES
    if uses_daemon(config):
        where = logmodes.daemon_dir(state_dir)
        token, out, err = logdaemon_client.register(
            log_path, max_size, max_files, where=where, copies=copies
        )
        return out, err, token
    launcher = write_launcher(state_dir / "bin") if state_dir is not None else None
    uri = logs.log_uri(log_path, max_size, max_files, driver=launcher)
    return uri, uri, ""


def forget(state_dir: Path | None, *, token: str = "", log_path: str = "") -> None:
    """Have the log daemon forget one run (``token``: a start that failed before the shim
    opened its FIFOs, which the daemon would wait for) or every run of a log
    (``log_path``: the container is removed, or renamed away from it).

    No daemon running means nothing to forget (none is started for it); one that does
    not answer is no reason to fail the caller, which is already failing or cleaning
    up, so its errors are swallowed here.
    """
    if not (token or log_path):
        return
    with contextlib.suppress(CtrexecError):
        logdaemon_client.drop(token=token, log_path=log_path, where=logmodes.daemon_dir(state_dir))


def settle(client: Client, task_id: str, state_dir: Path | None) -> None:
    """After the task's exit: return once the log daemon wrote all the task wrote, as
    ``docker wait`` returns once dockerd copied the container's streams, so a ``logs``
    right after shows the end. Bounded (:data:`ctrexec.logs.client.SETTLE_TIMEOUT`): a
    daemon that is stuck costs the wait that long, and then what it had not written
    reaches the log when it does (a dead one is started again, and reads what waited).
    """
    with contextlib.suppress(CtrexecError):  # the exit stands, whatever the log does
        record = containers.get(client, task_id)
        if uses_daemon(config_of(record)):
            where = logmodes.daemon_dir(state_dir)
            logdaemon_client.settle(record.labels.get(lbl.LOG_PATH, ""), where=where)
