"""containerd's event stream, decoded into the few events ctrexec acts on.

Events are not durable: a subscriber that reconnects must list state again rather
than trust what it heard. :class:`ctrexec.supervisor.Supervisor` does exactly that.
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs

from ctrexec import _rpc
from ctrexec._api.containerd.events import task_pb2 as task_events
from ctrexec._api.containerd.services.events.v1 import events_pb2
from ctrexec.containerd._proto import from_timestamp
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import ExitStatus

TASK_EXIT_TOPIC = "/tasks/exit"
TASK_OOM_TOPIC = "/tasks/oom"


@attrs.frozen
class TaskExitEvent:
    """A process of a task exited; ``exec_id`` is empty for the task's init process."""

    namespace: str
    container_id: str
    exec_id: str
    pid: int
    exit: ExitStatus

    @property
    def is_init(self) -> bool:
        return self.exec_id in ("", self.container_id)


@attrs.frozen
class TaskOOMEvent:
    namespace: str
    container_id: str


Event = TaskExitEvent | TaskOOMEvent


class EventStream(Iterator[Event]):
    """Task exit and OOM events of one namespace; :meth:`cancel` ends iteration."""

    def __init__(self, client: Client) -> None:
        filters = [
            f'topic=="{TASK_EXIT_TOPIC}",namespace=="{client.namespace}"',
            f'topic=="{TASK_OOM_TOPIC}",namespace=="{client.namespace}"',
        ]
        self._stream = client.rpc.server_stream(
            _rpc.EVENTS,
            "Subscribe",
            events_pb2.SubscribeRequest(filters=filters),
            events_pb2.Envelope,
            timeout=_rpc.NO_DEADLINE,
        )

    def __iter__(self) -> EventStream:
        return self

    def __next__(self) -> Event:
        while True:
            env = next(self._stream)
            event = decode(env)
            if event is not None:
                return event

    def cancel(self) -> None:
        self._stream.cancel()


def decode(env: events_pb2.Envelope) -> Event | None:
    """The event in an envelope, or None for topics ctrexec ignores."""
    if env.topic == TASK_EXIT_TOPIC:
        e = task_events.TaskExit.FromString(env.event.value)
        return TaskExitEvent(
            namespace=env.namespace,
            container_id=e.container_id,
            exec_id="" if e.id == e.container_id else e.id,
            pid=e.pid,
            exit=ExitStatus(code=e.exit_status, exited_at=from_timestamp(e.exited_at)),
        )
    if env.topic == TASK_OOM_TOPIC:
        oom = task_events.TaskOOM.FromString(env.event.value)
        return TaskOOMEvent(namespace=env.namespace, container_id=oom.container_id)
    return None
