"""An event stream for schedulers: ctrexec's task events, filtered, across containerd restarts.

:class:`TaskEvents` is what :meth:`ctrexec.Executor.events` returns. It is live when it
is returned (containerd has registered it), so a caller subscribes first and lists
second, and misses nothing in between. When the stream breaks (containerd restarts,
the socket goes away) it reconnects with a bounded backoff and then yields one
:class:`~ctrexec.containerd.events.EventsMissed`: events of the outage are lost, so
the caller lists again, exactly as at the start. containerd has no replay, so there
is no ``since``.

Only tasks of ctrexec's own containers are reported (the ``io.ctrexec.managed``
label); the records' labels are listed once per connection and kept current from
containerd's container events, so filtering by group or label costs no call per event.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Collection, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar, TypedDict, Unpack

import attrs

from ctrexec import labels as lbl
from ctrexec.containerd import containers, events, tasks
from ctrexec.containerd.client import Client
from ctrexec.containerd.events import (
    Event,
    EventsMissed,
    ExecExited,
    RecordChanged,
    Subscription,
    TaskDeleted,
    TaskEvent,
    TaskExited,
    TaskOOM,
    TaskStarted,
)
from ctrexec.containerd.tasks import ExitStatus
from ctrexec.errors import Canceled, CtrexecError, InvalidArgument, NotFound, Unavailable
from ctrexec.tasks import info as taskinfo

#: The first wait before a reconnect, and the longest (it doubles in between).
RECONNECT_DELAY = 0.1
MAX_RECONNECT_DELAY = 2.0
#: docker's event names, accepted as the same filter as ctrexec's own.
DOCKER_ALIASES = {
    "die": "exit",
    "unpause": "resume",
    "exec_start": "exec-start",
    "exec_die": "exec-exit",
    "destroy": "delete",
}


def parse_kinds(names: Collection[str]) -> frozenset[str]:
    """Event kinds from user words (``exit``, docker's ``die``...); a bad one is refused."""
    out = set()
    for name in names:
        kind = DOCKER_ALIASES.get(name, name)
        if kind not in events.KINDS or kind == EventsMissed.kind:
            known = ", ".join(k for k in events.KINDS if k != EventsMissed.kind)
            raise InvalidArgument(f"unknown event type {name!r} (expected one of: {known})")
        out.add(kind)
    return frozenset(out)


@attrs.frozen
class EventFilter:
    """Which task events a stream yields: every given criterion must hold (docker's
    rule: values of one criterion are alternatives, labels must all match).

    ``labels`` maps a key to the value it must have, or to None for "has the key".
    EventsMissed is never filtered out: a caller must always hear of a break.
    """

    tasks: frozenset[str] | None = None
    groups: frozenset[str] | None = None
    labels: Mapping[str, str | None] = attrs.field(factory=dict)
    kinds: frozenset[str] | None = None

    @classmethod
    def of(
        cls,
        *,
        tasks: Collection[str] | None = None,
        groups: Collection[str] | None = None,
        labels: Mapping[str, str | None] | None = None,
        types: Collection[str] | None = None,
    ) -> EventFilter:
        return cls(
            tasks=frozenset(tasks) if tasks is not None else None,
            groups=frozenset(groups) if groups is not None else None,
            labels=dict(labels or {}),
            kinds=parse_kinds(types) if types is not None else None,
        )

    def wants_task(self, task_id: str) -> bool:
        """The check that needs no labels, made before any are looked up."""
        return self.tasks is None or task_id in self.tasks

    def matches(self, event: TaskEvent, record_labels: Mapping[str, str]) -> bool:
        if record_labels.get(lbl.MANAGED) != "true" or not self.wants_task(event.task_id):
            return False
        if self.kinds is not None and event.kind not in self.kinds:
            return False
        if self.groups is not None and record_labels.get(lbl.GROUP) not in self.groups:
            return False
        return all(
            key in record_labels and (want is None or record_labels[key] == want)
            for key, want in self.labels.items()
        )


class ExitLedger:
    """What a stream remembers between events: OOM events not yet followed by their
    exit, the last exit of each process, so no exit is yielded twice (a shim whose
    report to a dying containerd went unanswered sends it again), and the tasks
    started or exited but not yet heard deleted.

    containerd 2.x's shim publishes ``/tasks/delete`` itself, and a shim shut down
    right after the delete may exit before the event leaves it. A task's delete is
    certain once its record is deleted or a new task of the record starts, so the
    stream yields it then, ``inferred``; containerd's own event, should it still
    come, is then dropped by its pid.
    """

    def __init__(self) -> None:
        self._oom: set[str] = set()
        self._exits: dict[str, dict[str, datetime | None]] = {}
        self._undeleted: dict[str, TaskDeleted] = {}
        self._inferred: dict[str, int] = {}

    def note_oom(self, task_id: str) -> None:
        self._oom.add(task_id)

    def take_oom(self, task_id: str) -> bool:
        """Whether an OOM event came for the task since its last exit (and forget it)."""
        seen = task_id in self._oom
        self._oom.discard(task_id)
        return seen

    def first_time(self, task_id: str, exec_id: str, exited_at: datetime | None) -> bool:
        """Record an exit; False when this very exit was recorded already."""
        known = self._exits.setdefault(task_id, {})
        if exited_at is not None and known.get(exec_id) == exited_at:
            return False
        known[exec_id] = exited_at
        return True

    def note_task(self, event: TaskStarted | TaskExited) -> None:
        """A task of the record lives, or lived: its delete is still to come."""
        exit_status = event.exit if isinstance(event, TaskExited) else None
        self.note_listed(event.task_id, event.namespace, event.pid, exit_status, event.group)

    def note_listed(
        self,
        task_id: str,
        namespace: str,
        pid: int,
        exit_status: ExitStatus | None,
        group: str | None = None,
    ) -> None:
        self._undeleted[task_id] = TaskDeleted(
            task_id=task_id, namespace=namespace, group=group, pid=pid, exit=exit_status,
            inferred=True,
        )  # fmt: skip

    def undeleted(self) -> dict[str, ExitStatus | None]:
        """The tasks not heard deleted, with the exit heard of each (None: still running)."""
        return {task_id: d.exit for task_id, d in self._undeleted.items()}

    def infer_delete(self, task_id: str, at: datetime | None) -> TaskDeleted | None:
        """The delete of the task still undeleted, now that it must have happened."""
        pending = self._undeleted.pop(task_id, None)
        if pending is None:
            return None
        self.forget(task_id)
        self._inferred[task_id] = pending.pid
        return attrs.evolve(pending, at=at)

    def heard_delete(self, event: TaskDeleted) -> bool:
        """Record containerd's delete; False when it was already inferred."""
        if self._inferred.get(event.task_id) == event.pid:
            del self._inferred[event.task_id]
            return False
        self.forget(event.task_id)
        return True

    def forget(self, task_id: str) -> None:
        """The task was deleted: its processes' exits cannot come again."""
        self._exits.pop(task_id, None)
        self._oom.discard(task_id)
        self._undeleted.pop(task_id, None)


@attrs.frozen(kw_only=True)
class RecordDeleted(TaskEvent):
    """The container record itself was deleted (only in a stream opened with
    ``deletions=True``, such as the supervisor's: the files a record deleted outside
    ctrexec leaves are found through it). ``labels`` are the record's as last seen."""

    kind: ClassVar[str] = "destroy"
    labels: Mapping[str, str] = attrs.field(factory=dict)


class EventOptions(TypedDict, total=False):
    """What :meth:`ctrexec.Executor.events` takes: the filter (see :class:`EventFilter`;
    ``types`` are event kinds such as ``"exit"``), the reconnect policy, and
    ``deletions``: yield a :class:`RecordDeleted` for each record of ours deleted."""

    tasks: Collection[str] | None
    groups: Collection[str] | None
    labels: Mapping[str, str | None] | None
    types: Collection[str] | None
    reconnect_delay: float
    max_reconnect_delay: float
    max_outage: float | None
    deletions: bool


class TaskEvents(Iterator[Event]):
    """Typed events of ctrexec's tasks in one namespace; iterate it, cancel it to stop.

    Iterate from one thread; :meth:`cancel` (or leaving a ``with`` block) from any
    thread ends the iteration, also during a reconnect. Raises only when the first
    subscription fails, or when ``max_outage`` seconds pass without containerd.
    """

    def __init__(
        self,
        client: Client,
        event_filter: EventFilter | None = None,
        *,
        reconnect_delay: float = RECONNECT_DELAY,
        max_reconnect_delay: float = MAX_RECONNECT_DELAY,
        max_outage: float | None = None,
        deletions: bool = False,
    ) -> None:
        self._client = client
        self._deletions = deletions
        self.filter = event_filter or EventFilter()
        self._delays = (reconnect_delay, max(reconnect_delay, max_reconnect_delay))
        self._max_outage = max_outage
        self._cancelled = threading.Event()
        self._guard = threading.Lock()
        self._sub: Subscription | None = None
        self._queue: deque[Event] = deque()
        #: Labels of the records seen; None for records that are not ctrexec's.
        self._records: dict[str, Mapping[str, str] | None] = {}
        self._ledger = ExitLedger()
        #: Set when the stream broke; yielded (with the time it is live again) after it.
        self._missed: EventsMissed | None = None
        self._connect()

    @classmethod
    def of(cls, client: Client, **options: Unpack[EventOptions]) -> TaskEvents:
        """A stream with the filter and the reconnect policy given as keywords."""
        which = EventFilter.of(
            tasks=options.get("tasks"),
            groups=options.get("groups"),
            labels=options.get("labels"),
            types=options.get("types"),
        )
        return cls(
            client,
            which,
            reconnect_delay=options.get("reconnect_delay", RECONNECT_DELAY),
            max_reconnect_delay=options.get("max_reconnect_delay", MAX_RECONNECT_DELAY),
            max_outage=options.get("max_outage"),
            deletions=options.get("deletions", False),
        )

    def __iter__(self) -> TaskEvents:
        return self

    def __enter__(self) -> TaskEvents:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()

    def cancel(self) -> None:
        """End the iteration (from any thread); what is queued is dropped."""
        self._cancelled.set()
        with self._guard:
            sub = self._sub
        if sub is not None:
            sub.cancel()

    close = cancel

    def __next__(self) -> Event:
        while True:
            if self._cancelled.is_set():
                raise StopIteration
            if self._queue:
                return self._queue.popleft()
            with self._guard:
                sub = self._sub
            if sub is None:
                self._reconnect()
                continue
            try:
                self._queue.extend(self._accept(next(sub)))
            except StopIteration:
                self._broken("containerd ended the event stream")
            except CtrexecError as exc:
                if isinstance(exc, Canceled) and self._cancelled.is_set():
                    raise StopIteration from None
                self._broken(str(exc))

    # -- connection -------------------------------------------------------------------

    def _connect(self) -> None:
        """Subscribe, wait until live, then list the records: the order that loses nothing."""
        sub = Subscription(self._client, [*events.TASK_TOPICS, *events.CONTAINER_TOPICS])
        with self._guard:
            self._sub = sub
        if self._cancelled.is_set():
            sub.cancel()
        try:
            early = sub.sync()
            self._records = {
                r.id: r.labels
                for r in containers.list_containers(
                    self._client, containers.label_filter(lbl.MANAGED, "true")
                )
            }
            self._list_tasks()
            heard = [e for env in early for e in self._accept(env)]
        except BaseException:
            with self._guard:
                self._sub = None
            sub.cancel()
            raise
        if self._missed is not None:
            self._queue.append(attrs.evolve(self._missed, at=datetime.now(UTC)))
            self._missed = None
        self._queue.extend(heard)

    def _list_tasks(self) -> None:
        """Know every task of ours; after an outage, keep the end of each run whose task
        containerd deleted as it started again (1.7 and later reap a shim with no
        process left), so the list a caller makes after EventsMissed shows it exited:
        with the exit heard before, else as lost (:func:`ctrexec.tasks.info.report_gone`).
        """
        listed = {t.container_id: t for t in tasks.list_tasks(self._client)}
        if self._missed is not None:
            for task_id, heard in self._ledger.undeleted().items():
                if task_id not in listed and task_id in self._records:
                    at = self._missed.since or datetime.now(UTC)
                    taskinfo.report_gone(self._client, task_id, at=at, heard=heard)
                    self._ledger.forget(task_id)
        for task_id, state in listed.items():
            if self._records.get(task_id) is not None:
                self._ledger.note_listed(task_id, self._client.namespace, state.pid, state.exit)

    def _broken(self, reason: str) -> None:
        with self._guard:
            sub, self._sub = self._sub, None
        if sub is not None:
            sub.cancel()
        now = datetime.now(UTC)
        self._missed = EventsMissed(
            namespace=self._client.namespace, since=now, at=now, reason=reason
        )

    def _reconnect(self) -> None:
        """Subscribe again until it works, waiting a doubling, capped delay between tries."""
        began = datetime.now(UTC)
        delay = self._delays[0]
        while not self._cancelled.is_set():
            try:
                self._connect()
                return
            except CtrexecError as exc:
                if self._cancelled.is_set():
                    return
                if self._client._connection.closed:
                    raise
                if (
                    self._max_outage is not None
                    and (datetime.now(UTC) - began).total_seconds() > self._max_outage
                ):
                    raise Unavailable(f"no event stream for {self._max_outage:g}s: {exc}") from exc
            self._cancelled.wait(delay)
            delay = min(delay * 2, self._delays[1])

    # -- events -----------------------------------------------------------------------

    def _accept(self, env: Any) -> list[TaskEvent]:
        """Decode one envelope: the events of ours in it that pass the filter (an
        inferred delete may come first)."""
        decoded = events.decode(env)
        if isinstance(decoded, RecordChanged):
            return self._record_changed(decoded)
        if decoded is None or not self.filter.wants_task(decoded.task_id):
            return []
        record_labels = self._labels_of(decoded.task_id)
        if record_labels is None:
            return []
        out: list[TaskEvent | None] = []
        if isinstance(decoded, TaskStarted):
            out.append(self._ledger.infer_delete(decoded.task_id, decoded.at))
        out.append(self._enrich(decoded, record_labels))
        return [e for e in out if e is not None and self.filter.matches(e, record_labels)]

    def _record_changed(self, change: RecordChanged) -> list[TaskEvent]:
        if change.deleted or change.labels is None:
            known = self._records.pop(change.container_id, None)  # looked up again if needed
            if not change.deleted or known is None:
                return []
            now = datetime.now(UTC)
            out: list[TaskEvent] = []
            if (deleted := self._ledger.infer_delete(change.container_id, now)) is not None:
                out.append(deleted)
            if self._deletions:
                out.append(
                    RecordDeleted(
                        task_id=change.container_id,
                        namespace=self._client.namespace,
                        at=now,
                        group=known.get(lbl.GROUP),
                        labels=dict(known),
                    )
                )
            return [e for e in out if self.filter.matches(e, known)]
        managed = change.labels.get(lbl.MANAGED) == "true"
        self._records[change.container_id] = change.labels if managed else None
        return []

    def _labels_of(self, container_id: str) -> Mapping[str, str] | None:
        if container_id not in self._records:
            try:
                labels = containers.get(self._client, container_id).labels
            except NotFound:
                labels = {}  # gone already: its labels, the proof it was ours, too
            self._records[container_id] = labels if labels.get(lbl.MANAGED) == "true" else None
        return self._records[container_id]

    def _enrich(self, event: TaskEvent, record_labels: Mapping[str, str]) -> TaskEvent | None:
        """Add the group and the OOM fact; None for an exit or a delete already yielded."""
        event = attrs.evolve(event, group=record_labels.get(lbl.GROUP))
        if isinstance(event, TaskOOM):
            self._ledger.note_oom(event.task_id)
        elif isinstance(event, TaskDeleted):
            if not self._ledger.heard_delete(event):
                return None
        elif isinstance(event, TaskStarted):
            self._ledger.note_task(event)
        elif isinstance(event, ExecExited):
            if not self._ledger.first_time(event.task_id, event.exec_id, event.exit.exited_at):
                return None
        elif isinstance(event, TaskExited):
            if not self._ledger.first_time(event.task_id, "", event.exit.exited_at):
                return None
            event = self._with_oom(event)
            self._ledger.note_task(event)
        return event

    def _with_oom(self, event: TaskExited) -> TaskExited:
        oom = self._ledger.take_oom(event.task_id)
        if event.exit.exit_code != tasks.SIGKILL_EXIT_CODE:
            return event
        status = (
            attrs.evolve(event.exit, oom_killed=True)
            if oom
            else taskinfo.with_oom(self._client, {event.task_id: event.exit})[event.task_id]
        )
        return attrs.evolve(event, exit=status)
