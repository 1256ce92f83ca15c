"""containerd's event stream: task events decoded into typed values, and a
subscription that knows when containerd has registered it.

Events are not durable: what containerd publishes while no subscription is
registered (before one is, or while containerd is down) is lost. So a subscriber
must learn that its subscription is live before it lists state (:meth:`Subscription.sync`),
and must list again after any break. :mod:`ctrexec.tasks.events` builds that on this module.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar

import attrs
from google.protobuf import any_pb2, empty_pb2

from ctrexec import _rpc, errors
from ctrexec._api.containerd.events import container_pb2 as container_events
from ctrexec._api.containerd.events import task_pb2 as task_events
from ctrexec._api.containerd.services.events.v1 import events_pb2
from ctrexec.containerd._proto import from_timestamp
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import ExitStatus

#: The task topics containerd 1.6 publishes that ctrexec turns into events
#: (runtime/events.go; /tasks/create, /tasks/exec-added and /tasks/checkpointed are not).
TASK_TOPICS = (
    "/tasks/start",
    "/tasks/exit",
    "/tasks/oom",
    "/tasks/paused",
    "/tasks/resumed",
    "/tasks/exec-started",
    "/tasks/delete",
)
#: Container record topics: not events of ctrexec's, but they keep a subscriber's
#: view of the records' labels current.
CONTAINER_TOPICS = ("/containers/create", "/containers/update", "/containers/delete")
#: The topic prefix of the markers a subscription publishes to itself (see sync()).
SYNC_PREFIX = "/ctrexec/sync/"
SYNC_TYPE_URL = "types.ctrexec.io/Sync"
#: How long sync() tries, and how often it publishes its marker meanwhile.
SYNC_TIMEOUT = 10.0
SYNC_INTERVAL = 0.2


@attrs.frozen(kw_only=True)
class TaskEvent:
    """Something happened to a task (a container's running side) of ctrexec's.

    ``at`` is when containerd published it; ``group`` is the task's group, when it
    has one (filled in by :class:`ctrexec.tasks.events.TaskEvents`).
    """

    kind: ClassVar[str] = ""

    task_id: str
    namespace: str = ""
    at: datetime | None = None
    group: str | None = None

    def to_json(self) -> dict[str, Any]:
        """One JSON object, as ``ctrexec events`` prints it."""
        out: dict[str, Any] = {
            "type": self.kind,
            "task": self.task_id,
            "namespace": self.namespace,
            "time": self.at.isoformat() if self.at else None,
            "group": self.group,
        }
        for field in attrs.fields(type(self)):
            if field.name in out or field.name in ("task_id", "at"):
                continue
            value = getattr(self, field.name)
            out[field.name] = value.to_json() if isinstance(value, ExitStatus) else value
        return out


@attrs.frozen(kw_only=True)
class TaskStarted(TaskEvent):
    """The task's init process started (a first start, a restart or a start by hand)."""

    kind: ClassVar[str] = "start"
    pid: int = 0


@attrs.frozen(kw_only=True)
class TaskExited(TaskEvent):
    """The task's init process exited; ``exit.oom_killed`` when the OOM killer did it."""

    kind: ClassVar[str] = "exit"
    pid: int = 0
    exit: ExitStatus


@attrs.frozen(kw_only=True)
class TaskOOM(TaskEvent):
    """The OOM killer ran in the task's cgroup (the exit, if it follows, says so too)."""

    kind: ClassVar[str] = "oom"


@attrs.frozen(kw_only=True)
class TaskPaused(TaskEvent):
    kind: ClassVar[str] = "pause"


@attrs.frozen(kw_only=True)
class TaskResumed(TaskEvent):
    kind: ClassVar[str] = "resume"


@attrs.frozen(kw_only=True)
class ExecStarted(TaskEvent):
    """An exec'd process started in the task."""

    kind: ClassVar[str] = "exec-start"
    exec_id: str
    pid: int = 0


@attrs.frozen(kw_only=True)
class ExecExited(TaskEvent):
    kind: ClassVar[str] = "exec-exit"
    exec_id: str
    pid: int = 0
    exit: ExitStatus


@attrs.frozen(kw_only=True)
class TaskDeleted(TaskEvent):
    """The task was deleted: its exit status is gone, the container record may stay.

    ``inferred`` when containerd's own event never came and the stream tells the
    delete from what must follow it (see :class:`ctrexec.tasks.events.ExitLedger`).
    """

    kind: ClassVar[str] = "delete"
    pid: int = 0
    exit: ExitStatus | None = None
    inferred: bool = False


@attrs.frozen(kw_only=True)
class EventsMissed:
    """The stream broke at ``since`` and is live again at ``at``: events in between
    are lost. List the tasks again, as at the start, instead of trusting the stream."""

    kind: ClassVar[str] = "missed"

    namespace: str
    since: datetime | None
    at: datetime
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.kind,
            "namespace": self.namespace,
            "since": self.since.isoformat() if self.since else None,
            "time": self.at.isoformat(),
            "reason": self.reason,
        }


Event = TaskEvent | EventsMissed
#: Every event class by its ``kind``.
KINDS: dict[str, type[TaskEvent] | type[EventsMissed]] = {
    cls.kind: cls
    for cls in (
        TaskStarted,
        TaskExited,
        TaskOOM,
        TaskPaused,
        TaskResumed,
        ExecStarted,
        ExecExited,
        TaskDeleted,
        EventsMissed,
    )
}


@attrs.frozen
class RecordChanged:
    """A container record was created, updated (with its new labels) or deleted."""

    container_id: str
    labels: Mapping[str, str] | None = None
    deleted: bool = False


def _exit_of(code: int, ts: Any) -> ExitStatus:
    return ExitStatus(exit_code=int(code), exited_at=from_timestamp(ts))


def _decode_task(topic: str, value: bytes, base: dict[str, Any]) -> TaskEvent | None:
    if topic == "/tasks/start":
        start = task_events.TaskStart.FromString(value)
        return TaskStarted(task_id=start.container_id, pid=start.pid, **base)
    if topic == "/tasks/exit":
        e = task_events.TaskExit.FromString(value)
        status = _exit_of(e.exit_status, e.exited_at)
        if e.id in ("", e.container_id):
            return TaskExited(task_id=e.container_id, pid=e.pid, exit=status, **base)
        return ExecExited(task_id=e.container_id, exec_id=e.id, pid=e.pid, exit=status, **base)
    if topic == "/tasks/delete":
        d = task_events.TaskDelete.FromString(value)
        if d.id not in ("", d.container_id):
            return None  # an exec's; containerd 1.6 publishes none, a later one might
        status = _exit_of(d.exit_status, d.exited_at)
        return TaskDeleted(task_id=d.container_id, pid=d.pid, exit=status, **base)
    if topic == "/tasks/exec-started":
        x = task_events.TaskExecStarted.FromString(value)
        return ExecStarted(task_id=x.container_id, exec_id=x.exec_id, pid=x.pid, **base)
    simple: dict[str, tuple[Any, type[TaskEvent]]] = {
        "/tasks/oom": (task_events.TaskOOM, TaskOOM),
        "/tasks/paused": (task_events.TaskPaused, TaskPaused),
        "/tasks/resumed": (task_events.TaskResumed, TaskResumed),
    }
    if topic in simple:
        message, cls = simple[topic]
        return cls(task_id=message.FromString(value).container_id, **base)
    return None


def decode(env: events_pb2.Envelope) -> TaskEvent | RecordChanged | None:
    """The event in an envelope; None for topics ctrexec does not act on."""
    if env.topic.startswith("/containers/"):
        if env.topic == "/containers/update":
            u = container_events.ContainerUpdate.FromString(env.event.value)
            return RecordChanged(container_id=u.id, labels=dict(u.labels))
        if env.topic == "/containers/create":
            return RecordChanged(
                container_id=container_events.ContainerCreate.FromString(env.event.value).id
            )
        if env.topic == "/containers/delete":
            gone = container_events.ContainerDelete.FromString(env.event.value)
            return RecordChanged(container_id=gone.id, deleted=True)
        return None
    base = {"namespace": env.namespace, "at": from_timestamp(env.timestamp)}
    return _decode_task(env.topic, env.event.value, base)


def filters_for(namespace: str, topics: Sequence[str]) -> list[str]:
    """containerd filter expressions for ``topics`` in one namespace (any may match)."""
    return [f'topic=="{t}",namespace=="{namespace}"' for t in topics]


class Subscription(Iterator[events_pb2.Envelope]):
    """One Events.Subscribe call, with its own marker topic; :meth:`cancel` ends it.

    gRPC starts a stream without waiting for the server to register it, so events
    published just after ``Subscribe`` returns may be lost. :meth:`sync` publishes a
    marker that only this subscription listens for, until it hears it: from then on
    nothing published is missed, and a list made afterwards is safe to trust.
    """

    def __init__(self, client: Client, topics: Sequence[str]) -> None:
        self._client = client
        self.marker = f"{SYNC_PREFIX}{secrets.token_hex(8)}"
        self._stream = client._connection.server_stream(
            _rpc.EVENTS,
            "Subscribe",
            events_pb2.SubscribeRequest(
                filters=filters_for(client.namespace, [*topics, self.marker])
            ),
            events_pb2.Envelope,
            timeout=_rpc.NO_DEADLINE,
        )

    def __iter__(self) -> Subscription:
        return self

    def __next__(self) -> events_pb2.Envelope:
        while True:
            env = next(self._stream)
            if not env.topic.startswith(SYNC_PREFIX):
                return env

    def cancel(self) -> None:
        self._stream.cancel()

    def sync(
        self, timeout: float = SYNC_TIMEOUT, interval: float = SYNC_INTERVAL
    ) -> list[events_pb2.Envelope]:
        """Block until the subscription is registered; the events heard before that.

        Raises Unavailable (or what the stream raised) when it cannot be made live
        within ``timeout``; the subscription is then cancelled.
        """
        heard, expired = threading.Event(), threading.Event()
        publisher = threading.Thread(
            target=self._publish_until,
            args=(heard, expired, time.monotonic() + timeout, interval),
            name="ctrexec-events-sync",
            daemon=True,
        )
        publisher.start()
        early: list[events_pb2.Envelope] = []
        try:
            for env in self._stream:
                if env.topic == self.marker:
                    return early
                if not env.topic.startswith(SYNC_PREFIX):
                    early.append(env)
            raise errors.Unavailable("containerd ended the event stream before it was live")
        except errors.Canceled as exc:
            if expired.is_set():  # cancelled by the publisher: no marker in time
                raise errors.Unavailable(
                    f"the event stream was not live within {timeout:g}s"
                ) from exc
            raise
        finally:
            heard.set()
            publisher.join()

    def _publish_until(
        self, heard: threading.Event, expired: threading.Event, deadline: float, interval: float
    ) -> None:
        # A marker published before containerd registered the stream is lost: repeat.
        while not heard.is_set():
            if time.monotonic() > deadline:
                expired.set()
                self._stream.cancel()
                return
            with contextlib.suppress(errors.CtrexecError):  # away or busy: the deadline decides
                publish(self._client, self.marker, timeout=max(interval, 1.0))
            heard.wait(interval)


def publish(client: Client, topic: str, *, timeout: float = 5.0) -> None:
    """Publish an empty event on ``topic`` in the client's namespace."""
    client._call(
        _rpc.EVENTS,
        "Publish",
        events_pb2.PublishRequest(
            topic=topic, event=any_pb2.Any(type_url=SYNC_TYPE_URL, value=b"")
        ),
        empty_pb2.Empty,
        timeout=timeout,
    )
