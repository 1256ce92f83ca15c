"""Task events without a daemon: decoding containerd's envelopes, filtering, the ledger,
and ``ctrexec events``' filter flags."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from google.protobuf import any_pb2
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from ctrexec import labels as lbl
from ctrexec._api.containerd.events import container_pb2, task_pb2
from ctrexec._api.containerd.services.events.v1 import events_pb2
from ctrexec.cli.events import parse_filters
from ctrexec.containerd import events
from ctrexec.containerd.events import (
    EventsMissed,
    ExecExited,
    ExecStarted,
    RecordChanged,
    TaskDeleted,
    TaskExited,
    TaskOOM,
    TaskPaused,
    TaskResumed,
    TaskStarted,
)
from ctrexec.containerd.tasks import ExitStatus
from ctrexec.errors import InvalidArgument
from ctrexec.tasks.events import EventFilter, ExitLedger, parse_kinds

AT = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)


def _ts(at: datetime) -> Timestamp:
    ts = Timestamp()
    ts.FromDatetime(at)
    return ts


def _env(topic: str, message: Message, namespace: str = "ns") -> events_pb2.Envelope:
    name = message.DESCRIPTOR.full_name
    return events_pb2.Envelope(
        timestamp=_ts(AT),
        namespace=namespace,
        topic=topic,
        event=any_pb2.Any(type_url=name, value=message.SerializeToString()),
    )


def test_every_task_topic_decodes_to_its_type() -> None:
    cases = [
        (
            "/tasks/start",
            task_pb2.TaskStart(container_id="a", pid=7),
            TaskStarted(task_id="a", pid=7),
        ),
        ("/tasks/oom", task_pb2.TaskOOM(container_id="a"), TaskOOM(task_id="a")),
        ("/tasks/paused", task_pb2.TaskPaused(container_id="a"), TaskPaused(task_id="a")),
        ("/tasks/resumed", task_pb2.TaskResumed(container_id="a"), TaskResumed(task_id="a")),
        (
            "/tasks/exec-started",
            task_pb2.TaskExecStarted(container_id="a", exec_id="x1", pid=9),
            ExecStarted(task_id="a", exec_id="x1", pid=9),
        ),
    ]
    for topic, message, want in cases:
        got = events.decode(_env(topic, message))
        assert got == type(want)(**{**_fields(want), "namespace": "ns", "at": AT}), topic


def _fields(event: object) -> dict[str, object]:
    import attrs

    return attrs.asdict(event, recurse=False)  # type: ignore[arg-type]


def test_exit_of_init_and_of_an_exec() -> None:
    init = task_pb2.TaskExit(container_id="a", id="a", pid=7, exit_status=137, exited_at=_ts(AT))
    got = events.decode(_env("/tasks/exit", init))
    assert got == TaskExited(
        task_id="a", namespace="ns", at=AT, pid=7, exit=ExitStatus(exit_code=137, exited_at=AT)
    )
    exec_exit = task_pb2.TaskExit(container_id="a", id="x1", pid=8, exit_status=3)
    got = events.decode(_env("/tasks/exit", exec_exit))
    assert isinstance(got, ExecExited)
    assert (got.exec_id, got.exit.exit_code, got.exit.exited_at) == ("x1", 3, None)


def test_delete_of_the_task_only() -> None:
    task = task_pb2.TaskDelete(container_id="a", pid=7, exit_status=0, exited_at=_ts(AT))
    got = events.decode(_env("/tasks/delete", task))
    assert got == TaskDeleted(
        task_id="a", namespace="ns", at=AT, pid=7, exit=ExitStatus(exit_code=0, exited_at=AT)
    )
    assert (
        events.decode(_env("/tasks/delete", task_pb2.TaskDelete(container_id="a", id="x"))) is None
    )


def test_ignored_topics_and_record_changes() -> None:
    assert events.decode(_env("/tasks/create", task_pb2.TaskCreate(container_id="a"))) is None
    assert (
        events.decode(_env("/tasks/exec-added", task_pb2.TaskExecAdded(container_id="a"))) is None
    )
    update = container_pb2.ContainerUpdate(id="a", labels={"k": "v"})
    assert events.decode(_env("/containers/update", update)) == RecordChanged("a", {"k": "v"})
    created = events.decode(_env("/containers/create", container_pb2.ContainerCreate(id="a")))
    assert created == RecordChanged("a")
    gone = events.decode(_env("/containers/delete", container_pb2.ContainerDelete(id="a")))
    assert gone == RecordChanged("a", deleted=True)


def test_json_lines_carry_type_task_time_and_fields() -> None:
    event = TaskExited(
        task_id="a",
        namespace="ns",
        at=AT,
        group="web",
        pid=7,
        exit=ExitStatus(exit_code=137, exited_at=AT, oom_killed=True),
    )
    assert event.to_json() == {
        "type": "exit",
        "task": "a",
        "namespace": "ns",
        "time": AT.isoformat(),
        "group": "web",
        "pid": 7,
        "exit": {"code": 137, "exited_at": AT.isoformat(), "oom_killed": True},
    }
    missed = EventsMissed(namespace="ns", since=AT, at=AT, reason="gone")
    assert missed.to_json()["type"] == "missed"
    assert set(events.KINDS) == {
        "start",
        "exit",
        "oom",
        "pause",
        "resume",
        "exec-start",
        "exec-exit",
        "delete",
        "missed",
    }


def test_filters_by_topic_and_namespace() -> None:
    assert events.filters_for("ns", ["/tasks/exit", "/tasks/oom"]) == [
        'topic=="/tasks/exit",namespace=="ns"',
        'topic=="/tasks/oom",namespace=="ns"',
    ]


MANAGED = {lbl.MANAGED: "true"}


def test_filter_yields_only_ctrexec_tasks() -> None:
    f = EventFilter()
    assert f.matches(TaskStarted(task_id="a"), MANAGED)
    assert not f.matches(TaskStarted(task_id="a"), {})
    assert not f.matches(TaskStarted(task_id="a"), {lbl.MANAGED: "false"})


def test_filter_criteria_all_hold_values_are_alternatives() -> None:
    web = {**MANAGED, lbl.GROUP: "web", "tier": "front", "canary": ""}
    f = EventFilter.of(tasks=["a", "b"], groups=["web", "db"], types=["exit", "die", "start"])
    assert f.matches(TaskStarted(task_id="b"), web)
    assert not f.matches(TaskStarted(task_id="c"), web)
    assert not f.wants_task("c") and f.wants_task("a")
    assert not f.matches(TaskPaused(task_id="a"), web)
    assert not f.matches(TaskStarted(task_id="a"), {**MANAGED, lbl.GROUP: "cache"})
    assert not f.matches(TaskStarted(task_id="a"), MANAGED)  # no group at all
    by_label = EventFilter.of(labels={"tier": "front", "canary": None})
    assert by_label.matches(TaskOOM(task_id="a"), web)
    assert not by_label.matches(TaskOOM(task_id="a"), {**web, "tier": "back"})
    assert not by_label.matches(TaskOOM(task_id="a"), {**MANAGED, "tier": "front"})


def test_event_kinds_take_docker_names_and_refuse_unknown_ones() -> None:
    assert parse_kinds(["die", "unpause", "exec_start", "exec_die", "destroy", "oom"]) == {
        "exit",
        "resume",
        "exec-start",
        "exec-exit",
        "delete",
        "oom",
    }
    with pytest.raises(InvalidArgument, match="unknown event type 'nope'"):
        parse_kinds(["nope"])
    with pytest.raises(InvalidArgument):
        parse_kinds(["missed"])  # always delivered, not a filter


def test_ledger_yields_an_exit_once_and_remembers_oom() -> None:
    ledger = ExitLedger()
    assert ledger.first_time("a", "", AT)
    assert not ledger.first_time("a", "", AT)  # the same exit, sent again
    assert ledger.first_time("a", "x1", AT)  # an exec's exit is another
    later = AT.replace(second=9)
    assert ledger.first_time("a", "", later)  # the next run's exit
    assert ledger.first_time("a", "", None) and ledger.first_time("a", "", None)
    ledger.note_oom("a")
    assert ledger.take_oom("a") and not ledger.take_oom("a")
    ledger.note_oom("b")
    ledger.forget("b")
    assert not ledger.take_oom("b")
    ledger.forget("a")
    assert ledger.first_time("a", "", AT)


def test_cli_filters_become_event_options() -> None:
    got = parse_filters(
        ["container=a", "task=b", "group=web", "label=tier=front", "label=canary", "event=die"]
    )
    assert got == {
        "tasks": ["a", "b"],
        "groups": ["web"],
        "labels": {"tier": "front", "canary": None},
        "types": ["die"],
    }
    for bad in ("container", "container=", "since=1h"):
        with pytest.raises(InvalidArgument):
            parse_filters([bad])


def test_a_delete_containerd_never_sent_is_inferred_once() -> None:
    ledger = ExitLedger()
    gone = ExitStatus(exit_code=137, exited_at=AT)
    ledger.note_task(TaskStarted(task_id="a", namespace="ns", pid=7))
    ledger.note_task(TaskExited(task_id="a", namespace="ns", group="g", pid=7, exit=gone))
    inferred = ledger.infer_delete("a", AT)
    assert inferred == TaskDeleted(
        task_id="a", namespace="ns", at=AT, group="g", pid=7, exit=gone, inferred=True
    )
    assert ledger.infer_delete("a", AT) is None  # the record's delete after a restart's start
    late = TaskDeleted(task_id="a", namespace="ns", pid=7, exit=gone)
    assert not ledger.heard_delete(late)  # containerd's own, after all: already yielded
    assert ledger.heard_delete(late)  # a second one is a new delete (another run's pid)


def test_a_delete_heard_leaves_nothing_to_infer() -> None:
    ledger = ExitLedger()
    ledger.note_task(TaskStarted(task_id="a", pid=7))
    assert ledger.heard_delete(TaskDeleted(task_id="a", pid=7))
    assert ledger.infer_delete("a", AT) is None
    assert ledger.infer_delete("never-seen", AT) is None
