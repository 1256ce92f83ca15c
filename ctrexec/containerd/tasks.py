"""Tasks and processes: the running side of a container.

In containerd's vocabulary a Container is a record, a Task is its running init
process, and a Process is anything that runs in it (an exec'd process included).
These functions are thin, typed wrappers over the Tasks service; policy (stop
timeouts, restarts) lives in the executor.
"""

from __future__ import annotations

import contextlib
import enum
import json
import signal as signals
import time
import warnings
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import attrs
from google.protobuf import any_pb2, empty_pb2

from ctrexec import _rpc, defaults, errors
from ctrexec._api.containerd.services.tasks.v1 import tasks_pb2
from ctrexec._api.containerd.types import mount_pb2
from ctrexec._api.containerd.types.task import task_pb2
from ctrexec.containerd import runcerrors
from ctrexec.containerd._proto import from_timestamp
from ctrexec.containerd.client import Client

PROCESS_SPEC_TYPE_URL = "types.containerd.io/opencontainers/runtime-spec/1/Process"


class Status(enum.Enum):
    """A process's state, as containerd reports it."""

    UNKNOWN = "unknown"
    CREATED = "created"
    RUNNING = "running"
    STOPPED = "stopped"
    PAUSED = "paused"
    PAUSING = "pausing"

    @classmethod
    def from_proto(cls, value: int) -> Status:
        known = {int(v): k for k, v in task_pb2.Status.items()}
        name = known.get(value, "UNKNOWN")
        return cls[name] if name in cls.__members__ else cls.UNKNOWN


#: The code of a process killed by SIGKILL, which is how the OOM killer kills.
SIGKILL_EXIT_CODE = 128 + signals.SIGKILL


@attrs.frozen(init=False)
class ExitStatus:
    """How a process ended. ``exit_code`` is the shell-style code: 128+N for signal N.

    ``oom_killed`` is docker's ``State.OOMKilled``: the task died of SIGKILL and the
    kernel's OOM killer ran in its cgroup. containerd's exit carries no such fact;
    the executor adds it from the cgroup's counters (see ``Executor.inspect``).

    ``exit_code`` is the name :class:`ExecResult` and ``TaskInfo`` use too; the old
    ``code`` (attribute and keyword) still works for one release, with a
    DeprecationWarning.
    """

    exit_code: int
    exited_at: datetime | None = None
    oom_killed: bool = False

    def __init__(
        self,
        exit_code: int | None = None,
        exited_at: datetime | None = None,
        oom_killed: bool = False,
        *,
        code: int | None = None,
    ) -> None:
        if code is not None:
            warnings.warn(_CODE_RENAMED, DeprecationWarning, stacklevel=2)
            if exit_code is not None:
                raise TypeError("ExitStatus takes exit_code or code, not both")
            exit_code = code
        if exit_code is None:
            raise TypeError("ExitStatus needs exit_code")
        self.__attrs_init__(exit_code, exited_at, oom_killed)

    @property
    def code(self) -> int:
        """Deprecated: :attr:`exit_code`, the name every exit code has in ctrexec."""
        warnings.warn(_CODE_RENAMED, DeprecationWarning, stacklevel=2)
        return self.exit_code

    @property
    def signal(self) -> int | None:
        """The killing signal, when the code says the process died of one."""
        return self.exit_code - 128 if 128 < self.exit_code < 128 + 65 else None

    def to_json(self) -> dict[str, Any]:
        # "code" is the stored form (state written by earlier releases reads the same).
        return {
            "code": self.exit_code,
            "exited_at": self.exited_at.isoformat() if self.exited_at else None,
            "oom_killed": self.oom_killed,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ExitStatus:
        at = data.get("exited_at")
        return cls(
            exit_code=int(data["code"]),
            exited_at=datetime.fromisoformat(at) if at else None,
            oom_killed=bool(data.get("oom_killed", False)),
        )


_CODE_RENAMED = "ExitStatus.code is deprecated: use ExitStatus.exit_code"


#: Why a state is UNKNOWN when containerd gave it with no reason (up to 2.1, Get and
#: List say UNKNOWN, pid 0, when the shim did not answer State within containerd's 2 s).
SHIM_SILENT = "its shim did not answer containerd in time"


@attrs.frozen
class ProcessState:
    """A snapshot of one task or process.

    ``status`` UNKNOWN means the task exists but its state could not be read now (its
    shim is slow or stopped): it is neither running for sure nor gone, and ``reason``
    says why. Callers must not take it for "no task" or "exited".
    """

    container_id: str
    exec_id: str
    pid: int
    status: Status
    exit: ExitStatus | None
    reason: str | None = None

    @property
    def unknown(self) -> bool:
        return self.status is Status.UNKNOWN


def unknown_state(container_id: str, reason: str, exec_id: str = "") -> ProcessState:
    """The state of a task whose shim did not answer: there, but in no known state."""
    return ProcessState(container_id, exec_id, 0, Status.UNKNOWN, None, reason)


def _state(container_id: str, exec_id: str, p: task_pb2.Process) -> ProcessState:
    status = Status.from_proto(p.status)
    return ProcessState(
        container_id=container_id,
        exec_id=exec_id,
        pid=int(p.pid),
        status=status,
        exit=_exit(p.exit_status, p.exited_at) if status is Status.STOPPED else None,
        reason=SHIM_SILENT if status is Status.UNKNOWN else None,
    )


@attrs.frozen
class Stdio:
    """Where the shim connects a process's streams: fifo paths or file://, binary:// URIs."""

    stdin: str = ""
    stdout: str = ""
    stderr: str = ""
    terminal: bool = False


def _exit(code: int, ts: Any) -> ExitStatus:
    # containerd reports 255 for a process it could not reap properly; keep it.
    return ExitStatus(exit_code=int(code), exited_at=from_timestamp(ts))


def create(
    client: Client,
    container_id: str,
    *,
    rootfs: Sequence[mount_pb2.Mount],
    stdio: Stdio,
    options: any_pb2.Any | None = None,
) -> int:
    """Create the task (runc create): the init process exists but has not run yet."""
    req = tasks_pb2.CreateTaskRequest(
        container_id=container_id,
        rootfs=list(rootfs),
        stdin=stdio.stdin,
        stdout=stdio.stdout,
        stderr=stdio.stderr,
        terminal=stdio.terminal,
    )
    if options is not None:
        req.options.CopyFrom(options)
    resp = client._call(_rpc.TASKS, "Create", req, tasks_pb2.CreateTaskResponse, timeout=60.0)
    return int(resp.pid)


def arm_wait(
    client: Client, container_id: str, exec_id: str = "", *, wait_for_ready: bool = False
) -> _rpc.Pending[Any]:
    """Send Wait now, before Start, so an exit that comes at once is never missed.

    ``wait_for_ready``: sent while containerd is away, the call waits for it to return.
    """
    return client._connection.unary_future(
        _rpc.TASKS,
        "Wait",
        tasks_pb2.WaitRequest(container_id=container_id, exec_id=exec_id),
        tasks_pb2.WaitResponse,
        namespace=client.namespace,
        timeout=_rpc.NO_DEADLINE,
        wait_for_ready=wait_for_ready,
    )


def collect(pending: _rpc.Pending[Any], timeout: float | None = None) -> ExitStatus:
    """The exit status from an armed Wait."""
    resp = pending.result(timeout)
    return _exit(resp.exit_status, resp.exited_at)


def start(client: Client, container_id: str, exec_id: str = "") -> int:
    resp = client._call(
        _rpc.TASKS,
        "Start",
        tasks_pb2.StartRequest(container_id=container_id, exec_id=exec_id),
        tasks_pb2.StartResponse,
        timeout=60.0,
    )
    return int(resp.pid)


def get(
    client: Client,
    container_id: str,
    exec_id: str = "",
    *,
    timeout: float = defaults.TASK_STATE_TIMEOUT,
) -> ProcessState:
    """The process's state; NotFound without one, DeadlineExceeded when no answer came
    within ``timeout`` (containerd from 2.3 answers so itself for a slow shim)."""
    resp = client._call(
        _rpc.TASKS,
        "Get",
        tasks_pb2.GetRequest(container_id=container_id, exec_id=exec_id),
        tasks_pb2.GetResponse,
        timeout=timeout,
    )
    return _state(container_id, exec_id, resp.process)


def find(
    client: Client, container_id: str, *, timeout: float = defaults.TASK_STATE_TIMEOUT
) -> ProcessState | None:
    """The task's state, or None when the container has no task; an UNKNOWN state
    (:func:`unknown_state`) when its shim did not answer within ``timeout``."""
    try:
        return get(client, container_id, timeout=timeout)
    except errors.NotFound:
        return None
    except errors.DeadlineExceeded as exc:
        return unknown_state(container_id, _silent(exc))


def _silent(exc: errors.DeadlineExceeded) -> str:
    return f"{SHIM_SILENT} ({exc})"


def list_tasks(
    client: Client, *, timeout: float = defaults.TASK_LIST_TIMEOUT
) -> list[ProcessState]:
    """Every task containerd lists. From 2.3 it leaves out a task whose shim does not
    answer (see :func:`states_of`); up to 2.1 it lists it as UNKNOWN, after waiting 2 s
    for each such task, so a List that does not end within ``timeout`` says why.

    One answer is enough, unlike the containers' listing (issue 40): an entry is an id
    (76 characters at most) and its stdio paths, ~400 B with a 76-character id and two
    150-character log FIFO paths, ~600 B with a stdin FIFO too, so 5,000 tasks are
    ~3 MiB of the 16 MiB a message may hold (Tasks has no ListStream)."""
    try:
        resp = client._call(
            _rpc.TASKS,
            "List",
            tasks_pb2.ListTasksRequest(),
            tasks_pb2.ListTasksResponse,
            timeout=timeout,
        )
    except errors.DeadlineExceeded as exc:
        raise errors.DeadlineExceeded(
            f"containerd did not list its tasks within {timeout:g}s: it asks each task's "
            f"shim for its state, and a shim is not answering ({exc})"
        ) from exc
    return [_state(p.id, "", p) for p in resp.tasks]


def states_of(
    client: Client,
    container_ids: Iterable[str],
    *,
    timeout: float = defaults.TASK_STATE_TIMEOUT,
) -> dict[str, ProcessState]:
    """The tasks of ``container_ids`` that exist, by id: one List, plus a Get for each id
    it left out (sent at once, answered within ``timeout``). A Get of a container with
    no task answers NotFound with no shim asked; one that does not answer in time makes
    an UNKNOWN state, for containerd 2.3 lists no task whose shim is slow. When List has
    every id, that is the one call."""
    listed = {t.container_id: t for t in list_tasks(client)}
    missing = [cid for cid in dict.fromkeys(container_ids) if cid not in listed]
    pending = {
        cid: client._connection.unary_future(
            _rpc.TASKS,
            "Get",
            tasks_pb2.GetRequest(container_id=cid),
            tasks_pb2.GetResponse,
            namespace=client.namespace,
            timeout=timeout,
        )
        for cid in missing
    }
    out = {cid: listed[cid] for cid in dict.fromkeys(container_ids) if cid in listed}
    for cid, call in pending.items():
        try:
            out[cid] = _state(cid, "", call.result(timeout + 1.0).process)
        except errors.NotFound:
            continue
        except errors.DeadlineExceeded as exc:
            out[cid] = unknown_state(cid, _silent(exc))
    return out


def kill(
    client: Client, container_id: str, sig: int, *, exec_id: str = "", all_processes: bool = False
) -> None:
    """Send a signal. A task that already stopped is not an error."""
    with contextlib.suppress(errors.NotFound):
        client._call(
            _rpc.TASKS,
            "Kill",
            tasks_pb2.KillRequest(
                container_id=container_id, exec_id=exec_id, signal=sig, all=all_processes
            ),
            empty_pb2.Empty,
        )


def delete(client: Client, container_id: str) -> ExitStatus | None:
    """Delete a stopped task and return its exit; None when there was no task."""
    resp = client._call_or_none(
        _rpc.TASKS,
        "Delete",
        tasks_pb2.DeleteTaskRequest(container_id=container_id),
        tasks_pb2.DeleteResponse,
        timeout=60.0,
    )
    return None if resp is None else _exit(resp.exit_status, resp.exited_at)


def force_delete(client: Client, container_id: str, *, timeout: float = 10.0) -> ExitStatus | None:
    """SIGKILL every process of the task, wait for it to stop, then delete it."""
    state = find(client, container_id)
    if state is None:
        # Delete anyway: a shim can outlive a Tasks.Create that containerd died in
        # (containerd#6860, 1.6): Get answers NotFound, Create AlreadyExists, and
        # only Delete shuts that shim down.
        return delete(client, container_id)
    if state.status is Status.PAUSED:
        with contextlib.suppress(errors.CtrexecError):
            resume(client, container_id)
    if state.status is not Status.STOPPED:
        pending = arm_wait(client, container_id)
        kill(client, container_id, signals.SIGKILL, all_processes=True)
        try:
            collect(pending, timeout)
        except errors.NotFound:
            return None
        finally:
            pending.cancel()
    return delete(client, container_id)


def exec_process(
    client: Client,
    container_id: str,
    exec_id: str,
    process_spec: dict[str, Any],
    stdio: Stdio,
) -> None:
    """Register an exec'd process; it runs once :func:`start` is called with its id."""
    spec = any_pb2.Any(type_url=PROCESS_SPEC_TYPE_URL, value=json.dumps(process_spec).encode())
    client._call(
        _rpc.TASKS,
        "Exec",
        tasks_pb2.ExecProcessRequest(
            container_id=container_id,
            exec_id=exec_id,
            stdin=stdio.stdin,
            stdout=stdio.stdout,
            stderr=stdio.stderr,
            terminal=stdio.terminal,
            spec=spec,
        ),
        empty_pb2.Empty,
        timeout=60.0,
    )


def delete_process(client: Client, container_id: str, exec_id: str) -> ExitStatus | None:
    resp = client._call_or_none(
        _rpc.TASKS,
        "DeleteProcess",
        tasks_pb2.DeleteProcessRequest(container_id=container_id, exec_id=exec_id),
        tasks_pb2.DeleteResponse,
    )
    return None if resp is None else _exit(resp.exit_status, resp.exited_at)


def pause(client: Client, container_id: str) -> None:
    client._call(
        _rpc.TASKS,
        "Pause",
        tasks_pb2.PauseTaskRequest(container_id=container_id),
        empty_pb2.Empty,
    )


def resume(client: Client, container_id: str) -> None:
    client._call(
        _rpc.TASKS,
        "Resume",
        tasks_pb2.ResumeTaskRequest(container_id=container_id),
        empty_pb2.Empty,
    )


def metrics(client: Client, container_id: str) -> any_pb2.Any | None:
    """The raw cgroup metrics Any for one task (decode with :mod:`ctrexec.containerd.stats`)."""
    return metrics_of(client, [container_id]).get(container_id)


def metrics_of(client: Client, container_ids: Sequence[str]) -> dict[str, any_pb2.Any]:
    """Raw cgroup metrics of several tasks in one call (stopped ones too, until deleted)."""
    if not container_ids:
        return {}
    resp = client._call(
        _rpc.TASKS,
        "Metrics",
        tasks_pb2.MetricsRequest(filters=[f"id=={cid}" for cid in container_ids]),
        tasks_pb2.MetricsResponse,
    )
    wanted = set(container_ids)
    return {m.id: m.data for m in resp.metrics if m.id in wanted}


def metrics_future(client: Client, container_id: str) -> _rpc.Pending[Any]:
    """:func:`metrics` as a call in flight, for callers that must not block (read the
    answer with :func:`metrics_from`)."""
    return client._connection.unary_future(
        _rpc.TASKS,
        "Metrics",
        tasks_pb2.MetricsRequest(filters=[f"id=={container_id}"]),
        tasks_pb2.MetricsResponse,
        namespace=client.namespace,
    )


def metrics_from(pending: _rpc.Pending[Any], container_id: str) -> any_pb2.Any | None:
    """The metrics of one task from an answered :func:`metrics_future`."""
    resp = pending.result()
    return next((m.data for m in resp.metrics if m.id == container_id), None)


def wait_until(predicate: Any, timeout: float, interval: float = 0.02) -> bool:
    """Poll ``predicate`` until true or ``timeout``; for states no event announces."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def command_error(exc: errors.CtrexecError) -> errors.CtrexecError:
    """Turn runc's 'not found' / 'permission denied' into docker's 126/127 errors, a
    working directory or mount runc refused into the user's words
    (:mod:`runcerrors`), and any other create failure into runc's reason without
    containerd's and runc's wrapping (the caller chains the original)."""
    text = str(exc)
    if "failed to start shim" in text:  # containerd's shim, not the task's command
        return exc
    translated = runcerrors.translate(exc)
    if translated is not None:
        return translated
    if "executable file not found" in text or "no such file or directory" in text:
        return errors.CommandNotFound(f"command not found: {_runc_reason(text)}")
    if "permission denied" in text:
        return errors.CommandNotExecutable(f"command cannot be executed: {_runc_reason(text)}")
    detail = runcerrors.runc_detail(text)
    if detail is not None and type(exc).__init__ is Exception.__init__:
        return type(exc)(f"cannot create the container's process: {detail}")
    return exc


def _runc_reason(text: str) -> str:
    marker = "exec: "
    return text[text.rfind(marker) + len(marker) :] if marker in text else text


def resize_pty(
    client: Client, container_id: str, width: int, height: int, exec_id: str = ""
) -> None:
    """Set the terminal size of a process started with ``terminal``; the kernel then
    sends it SIGWINCH."""
    client._call(
        _rpc.TASKS,
        "ResizePty",
        tasks_pb2.ResizePtyRequest(
            container_id=container_id, exec_id=exec_id, width=width, height=height
        ),
        empty_pb2.Empty,
    )


def close_io(client: Client, container_id: str, exec_id: str = "") -> None:
    """Close the shim's own write end of the process's stdin FIFO.

    The shim holds both ends of that FIFO, so a client that closes its end does not
    end the process's input; this does, once no client end is left open either.
    """
    client._call(
        _rpc.TASKS,
        "CloseIO",
        tasks_pb2.CloseIORequest(container_id=container_id, exec_id=exec_id, stdin=True),
        empty_pb2.Empty,
    )
