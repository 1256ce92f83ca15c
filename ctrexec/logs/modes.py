"""Log drivers a task can choose (``--log-driver``, docker's flag name), and their cost.

Why a choice: each keeps something the others drop, and costs differently. What each
driver keeps, and costs (measured in ``docs/benchmarks.md``):

- ``json-file`` (default): docker's json-file format, stdout/stderr kept apart,
  nanosecond timestamps, rotation by ``max-size`` and ``max-file``. Written by the
  shared log daemon (:mod:`ctrexec.logs.daemon`: one process for all tasks, the shim
  writes into FIFOs it holds), or with ``--log-opt transport=process`` by a log
  process per task that the shim runs (:mod:`ctrexec.logs.driver`), which keeps each
  task's logging apart from every other's at ~3.5 MiB and ~25 ms of start each.
- ``file``: containerd's ``file://`` stdio URI; the shim itself appends the task's
  output to ``task.log``, with no extra process. The runc v2 shim sends stdout *and*
  stderr to that one file (containerd 1.6 parses only the stdout URI), raw, so the
  stream split and the timestamps are gone, and nothing rotates it: its disk use is
  unbounded while the task runs, which is why it is opt-in and refuses ``max-size``.
- ``none``: output goes to ``/dev/null`` (the shim's null I/O); ``logs`` says so.

All three outlive the ctrexec process that started the task: the shim owns the I/O.
"""

from __future__ import annotations

import os
import stat
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING

from ctrexec.errors import FailedPrecondition, InvalidArgument
from ctrexec.logs import driver as logdriver

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from datetime import datetime

    from ctrexec.logs import reader as logs
    from ctrexec.tasks.config import TaskConfig

JSON_FILE = "json-file"
FILE = "file"
NONE = "none"
DRIVERS = (JSON_FILE, FILE, NONE)
DEFAULT_DRIVER = JSON_FILE

#: What each driver keeps: ``logs`` works, streams apart, timestamps, a disk bound.
FEATURES: dict[str, frozenset[str]] = {
    JSON_FILE: frozenset({"read", "streams", "timestamps", "rotation"}),
    FILE: frozenset({"read"}),
    NONE: frozenset(),
}


def check_driver(name: str) -> None:
    """Refuse a driver name that is not one of :data:`DRIVERS`."""
    if name not in DRIVERS:
        raise InvalidArgument(f"unknown log driver {name!r}; expected one of {', '.join(DRIVERS)}")


def parse_log_opts(driver: str, opts: Sequence[str]) -> tuple[int, int, str]:
    """``--log-opt KEY=VALUE`` items as ``(max_size, max_files, transport)``, refused as
    docker does.

    ``max-size`` takes docker's sizes (``10m``, ``512k``); ``max-file`` a count;
    ``transport`` is ctrexec's own (``daemon`` or ``process``). Only ``json-file``
    rotates, so other drivers take no option at all.
    """
    check_driver(driver)
    found: dict[str, int] = {
        "max-size": logdriver.DEFAULT_MAX_SIZE,
        "max-file": logdriver.DEFAULT_MAX_FILES,
    }
    transport = DAEMON
    for item in opts:
        key, sep, value = item.partition("=")
        if not sep or key not in (*found, "transport"):
            raise InvalidArgument(
                f"unknown log opt {key!r}; expected {', '.join((*found, 'transport'))}"
            )
        if "rotation" not in FEATURES[driver]:
            raise InvalidArgument(f"unknown log opt {key!r} for {driver} log driver")
        if key == "transport":
            check_transport(value)
            transport = value
            continue
        if key == "max-size":
            from ctrexec.oci.resources import parse_size  # the oci package loads attrs

            found[key] = parse_size(value)
            continue
        try:
            found[key] = int(value)
        except ValueError as exc:
            raise InvalidArgument(f"invalid max-file {value!r}: expected a count") from exc
    return found["max-size"], found["max-file"], transport


#: How a ``json-file`` task's output reaches its log: the shared daemon (default) or a
#: log process per task run by the shim (``--log-opt transport=process``).
DAEMON = "daemon"
PROCESS = "process"
TRANSPORTS = (DAEMON, PROCESS)


def check_transport(name: str) -> None:
    """Refuse a transport that is not one of :data:`TRANSPORTS`."""
    if name not in TRANSPORTS:
        raise InvalidArgument(
            f"unknown log transport {name!r}; expected one of {', '.join(TRANSPORTS)}"
        )


def check_output_path(path: str) -> None:
    """A task output path must be absolute: the shim resolves it, not the caller."""
    if not Path(path).is_absolute() or "\0" in path:
        raise InvalidArgument(f"expected an absolute path, got {path!r}")


def caller_paths(config: TaskConfig | None) -> tuple[str, str] | None:
    """The caller's output paths, when the task's output goes there instead of a log."""
    if config is None or (config.stdout_path is None and config.stderr_path is None):
        return None
    return config.stdout_path or "", config.stderr_path or ""


def check_logged(config: TaskConfig | None, name: str) -> None:
    """Refuse to read the log of a task whose output goes to the caller's paths."""
    paths = caller_paths(config)
    if paths is None:
        return
    where = " and ".join(
        f"{path} ({stream})"
        for path, stream in zip(paths, ("stdout", "stderr"), strict=True)
        if path
    )
    raise FailedPrecondition(f"container {name} writes its output to {where}; ctrexec keeps no log")


def uses_daemon(config: TaskConfig | None) -> bool:
    """Whether the task's output goes through the shared log daemon."""
    if config is None or caller_paths(config) is not None:
        return False  # a record from before the daemon: its own driver, if any
    return config.log_driver == JSON_FILE and config.log_transport == DAEMON


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


def daemon_dir(state_dir: Path | None) -> Path | None:
    """The shared log daemon's directory under an Executor's ``state_dir`` (None: the
    default, :func:`ctrexec.logs.client.state_dir`)."""
    return None if state_dir is None else state_dir / "logd"


def stdio_for(
    config: TaskConfig | None, log_path: str, *, state_dir: Path | None = None
) -> tuple[str, str, str]:
    """``(stdout, stderr, token)`` for ``Tasks.Create`` (empty: the shim's null I/O).

    For the daemon the paths are FIFOs it already holds open, and ``token`` names the
    registration, which a failed start must drop (:func:`ctrexec.logs.client.drop`).
    ``state_dir`` moves ctrexec's own files (the daemon's socket, the per-task driver's
    launcher) under it.
    """
    paths = caller_paths(config)
    if paths is not None:
        for path in paths:
            _prepare_output(path)
        return paths[0], paths[1], ""
    driver = config.log_driver if config else DEFAULT_DRIVER
    if driver == NONE:
        return "", "", ""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    if driver == FILE:
        uri = "file://" + urllib.parse.quote(os.fspath(log_path), safe="/")
        return uri, uri, ""
    max_size = config.log_max_size if config else logdriver.DEFAULT_MAX_SIZE
    max_files = config.log_max_files if config else logdriver.DEFAULT_MAX_FILES
    if uses_daemon(config):
        from ctrexec.logs import client as logdaemon_client

        where = daemon_dir(state_dir)
        token, out, err = logdaemon_client.register(log_path, max_size, max_files, where=where)
        return out, err, token
    from ctrexec.logs import reader as logs

    launcher = logs.write_launcher(state_dir / "bin") if state_dir is not None else None
    uri = logs.log_uri(log_path, max_size, max_files, driver=launcher)
    return uri, uri, ""


def read_task_logs(
    driver: str,
    path: str,
    *,
    follow: bool = False,
    since: datetime | int | None = None,
    tail: int | None = None,
    stop: Callable[[], bool] | None = None,
    poll_interval: float = 0.1,
) -> Iterator[logs.LogEntry]:
    """A task's log entries as its driver wrote them (see :func:`ctrexec.logs.reader.read_logs`).

    ``file`` entries have the stream :data:`ctrexec.logs.reader.OUTPUT` and no time; ``none``
    has nothing to read and says so, in docker's words.
    """
    check_driver(driver)
    if driver == NONE:
        raise FailedPrecondition("configured logging driver does not support reading")
    if since is not None and "timestamps" not in FEATURES[driver]:
        raise InvalidArgument(f"the {driver} log driver keeps no timestamps to filter by")
    from ctrexec.logs import reader as logs

    return logs.read_logs(
        path,
        follow=follow,
        since=since,
        tail=tail,
        stop=stop,
        poll_interval=poll_interval,
        raw=driver == FILE,
    )
