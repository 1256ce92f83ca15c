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
  It also **blocks on a full disk**: the shim's copy stops at ENOSPC, so the task
  blocks in its next write (``anon_pipe_write``), still running, and stays so after
  space is freed. No ctrexec process is in the path to change that; ``doctor`` warns
  of a nearly full disk under a ``file`` task instead (:mod:`ctrexec.doctor.logdisk`).

On a full disk ``json-file`` (both transports) drops what the disk refuses, counts it,
and marks the gap with a marker entry once the disk takes writes again
(:class:`~ctrexec.logs.driver.LogWriter`); no mode stops a task for its disk.
- ``none``: output goes to ``/dev/null`` (the shim's null I/O); ``logs`` says so.

All three outlive the ctrexec process that started the task: the shim owns the I/O.

This module is the vocabulary only: names, options and their checks. It imports only
``defaults``, ``errors`` and (for a size) ``oci``, so the CLI's parser can load it.
What a given task's config makes of it (its stdio, whether it has a log) is
:mod:`ctrexec.tasks.output`; reading a log back, per driver, is
:func:`ctrexec.logs.reader.read_logs`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ctrexec.defaults import DEFAULT_LOG_MAX_FILES, DEFAULT_LOG_MAX_SIZE
from ctrexec.errors import InvalidArgument

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path  # not at run time: the CLI's parser loads this module

JSON_FILE = "json-file"
FILE = "file"
NONE = "none"
#: ``ctrexec.LOG_DRIVERS``: the names a TaskConfig's ``log_driver`` takes, the default
#: first, so a front end can offer them without loading the config's modules.
DRIVERS = (JSON_FILE, FILE, NONE)
DEFAULT_DRIVER = JSON_FILE


class _Configured(Protocol):
    @property
    def log_driver(self) -> str: ...


def driver_of(config: _Configured | None) -> str:
    """The driver a task logs with: its config's, else :data:`DEFAULT_DRIVER`.

    A record with no config of ctrexec's (made by another client) was given no
    driver, so its stdio is what ctrexec's default would have made; one place decides
    that, so starting, reading and inspecting a task never disagree on its log.
    """
    return config.log_driver if config is not None else DEFAULT_DRIVER


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
    rotates, so other drivers take no option at all. Public (``ctrexec.parse_log_opts``):
    a scheduler given docker's logging options gets the CLI's checks and words, and
    passes the three to TaskConfig's ``log_max_size``, ``log_max_files`` and
    ``log_transport``.
    """
    check_driver(driver)
    found: dict[str, int] = {
        "max-size": DEFAULT_LOG_MAX_SIZE,
        "max-file": DEFAULT_LOG_MAX_FILES,
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
    if not path.startswith("/") or "\0" in path:
        raise InvalidArgument(f"expected an absolute path, got {path!r}")


def daemon_dir(state_dir: Path | None) -> Path | None:
    """The shared log daemon's directory under an Executor's ``state_dir`` (None: the
    default, :func:`ctrexec.logs.client.state_dir`)."""
    return None if state_dir is None else state_dir / "logd"
