"""A group's namespace pin against its running members' namespaces, and what is said
of it (issue 20, scenarios 1 and 6): pure logic, over a stand-in for ``stat``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from ctrexec import labels as lbl
from ctrexec.cli.views import inspect as inspectdoc
from ctrexec.cli.views import ps
from ctrexec.containerd.tasks import ExitStatus, Status
from ctrexec.errors import Conflict
from ctrexec.groups.supervisor import HOST_RESTARTED, LOST_AFTER, TASK_LOST, lost_reason
from ctrexec.net import grouppin
from ctrexec.tasks import health, runs
from ctrexec.tasks.fields import Problem
from ctrexec.tasks.reports import TaskInfo

NSFS = 4
PIN = "/run/netns/cx-web"
NOW = datetime(2026, 12, 2, 4, 0, tzinfo=UTC)


def _stat(files: dict[str, tuple[int, int]]) -> Callable[[str], grouppin.NsId | None]:
    table = {"/proc/self/ns/net": (NSFS, 1), **files}
    return table.get


def test_a_pin_that_holds_the_members_namespace_is_sound() -> None:
    stat = _stat({PIN: (NSFS, 10), "/proc/5/ns/net": (NSFS, 10), "/proc/6/ns/net": (NSFS, 10)})
    found = grouppin.check(PIN, {"web-srv": 5, "web-cli": 6}, stat)
    assert found.sound and not found.lost and not found.split
    assert grouppin.repin("cx-web", found, {"web-srv": 5, "web-cli": 6}) is None


def test_a_plain_file_or_none_at_the_pin_is_a_lost_pin() -> None:
    running = {"/proc/5/ns/net": (NSFS, 10)}
    for pin in ({PIN: (25, 77)}, {}):  # a tmpfs file left unmounted; nothing
        found = grouppin.check(PIN, {"web-srv": 5}, _stat({**running, **pin}))
        assert found.lost and not found.split
        assert found.living_member() == "web-srv"


def test_members_in_two_namespaces_are_a_split_named_and_refused() -> None:
    stat = _stat({PIN: (NSFS, 11), "/proc/5/ns/net": (NSFS, 11), "/proc/6/ns/net": (NSFS, 10)})
    found = grouppin.check(PIN, {"web-srv": 5, "web-cli": 6}, stat)
    assert found.split and found.living_member() is None
    assert found.describe_split() == (
        "web-cli in namespace 10; web-srv in namespace 11 (the pinned one)"
    )
    with pytest.raises(Conflict, match="web-cli in namespace 10"):
        grouppin.repin("cx-web", found, {"web-srv": 5, "web-cli": 6})


def test_a_pin_holding_another_namespace_than_the_members_is_a_split() -> None:
    stat = _stat({PIN: (NSFS, 11), "/proc/6/ns/net": (NSFS, 10)})
    found = grouppin.check(PIN, {"web-cli": 6}, stat)
    assert found.split
    assert "the pin /run/netns/cx-web holds namespace 11" in found.describe_split()


def test_a_member_that_exited_meanwhile_is_left_out() -> None:
    found = grouppin.check(PIN, {"web-srv": 5}, _stat({}))
    assert found.lost and dict(found.members) == {} and not found.split


def _member(name: str, pid: int, status: Status = Status.RUNNING, **labels: str) -> TaskInfo:
    return TaskInfo(
        id=name, image="img", status=status, pid=pid, exit=None, netns_path=PIN,
        netns_mode="path", group="web", log_path="", created_at=NOW, config=None,
        labels={lbl.GROUP: "web", lbl.NETNS_PATH: PIN, lbl.NETNS_MODE: "path", **labels},
    )  # fmt: skip


def test_every_member_reports_a_lost_pin_with_the_command_that_repairs_it() -> None:
    infos = [_member("web-cli", 6), _member("web-srv", 0, Status.STOPPED)]
    out = health.annotate(infos, stat_id=_stat({"/proc/6/ns/net": (NSFS, 10)}))
    assert [[p.what for p in i.problems] for i in out] == [[health.PIN_LOST]] * 2
    assert out[0].problems[0].repair == "run ctrexec start web-cli to pin it again"
    assert ps.status_text(out[0], NOW).endswith(" (namespace pin lost)")
    assert ps.problem_lines(out) == [f"warning: group web: {out[0].problems[0]}"]
    assert "namespace pin lost" in inspectdoc.state_of(out[0])["Error"]
    assert inspectdoc.document(out[0])["Ctrexec"]["problems"][0]["problem"] == health.PIN_LOST


def test_a_group_with_no_member_running_has_nothing_to_say() -> None:
    """Its namespace is gone with its tasks; the next start makes it again."""
    out = health.annotate([_member("web-srv", 0, Status.STOPPED)], stat_id=_stat({}))
    assert out[0].problems == ()


def test_a_split_says_which_members_to_start_again() -> None:
    stat = _stat({PIN: (NSFS, 11), "/proc/5/ns/net": (NSFS, 11), "/proc/6/ns/net": (NSFS, 10)})
    out = health.annotate([_member("web-cli", 6), _member("web-srv", 5)], stat_id=stat)
    problem = out[0].problems[0]
    assert problem.what == health.SPLIT
    assert problem.repair == "run ctrexec stop web-cli, then ctrexec start web-cli"


def test_a_stranger_at_the_pin_goes_first_the_members_stay_where_they_are() -> None:
    """Every member in one namespace, the pin on another: restarting a member would move
    it into the stranger's; the repair removes the stranger's pin and pins theirs, and
    doctor gives the same command (one owner: health.split_repair)."""
    stat = _stat({PIN: (NSFS, 12), "/proc/5/ns/net": (NSFS, 11), "/proc/6/ns/net": (NSFS, 11)})
    out = health.annotate([_member("web-cli", 6), _member("web-srv", 5)], stat_id=stat)
    problem = out[0].problems[0]
    assert problem.what == health.SPLIT
    name = PIN.rsplit("/", 1)[-1]
    assert problem.repair.startswith(f"run ip netns del {name}, then ctrexec start web-cli to ")
    assert out[1].problems[0].repair == problem.repair


def test_tasks_outside_a_group_namespace_are_not_checked() -> None:
    own = _member("x", 6)
    for labels in ({lbl.NETNS_PATH: "/run/netns/mine"}, {lbl.NETNS_MODE: "none"}):
        info = _member("x", 6, **labels)
        assert health.pin_of(info.labels) is None
        assert health.annotate([info], stat_id=_stat({}))[0].problems == ()
    assert health.pin_of(own.labels) == PIN


def test_problem_text() -> None:
    assert str(Problem("a", "b", "run c")) == "a (b); run c"
    assert str(Problem("a")) == "a"


def test_a_lost_run_is_reported_exited_with_its_reason_until_the_next_start() -> None:
    labels = runs.first_run(NOW)
    update = runs.lost_run(labels, at=NOW, reason="host restarted")
    labels = {**labels, **update}
    assert runs.kept_exit(labels) == ExitStatus(runs.LOST_EXIT_CODE, NOW)
    assert runs.exit_reason(labels) == "host restarted"
    after = runs.next_run(labels, started_at=NOW, replaced_pid=0, replaced_exit=None)
    assert after[lbl.EXIT_REASON] is None
    labels = {k: v for k, v in {**labels, **after}.items() if v is not None}
    assert runs.exit_reason(labels) is None


def test_ps_says_why_a_run_ended_with_no_exit_seen() -> None:
    info = TaskInfo(
        id="a", image="img", status=Status.STOPPED, pid=0, exit=ExitStatus(255, NOW),
        netns_path=None, netns_mode="none", group=None, log_path="", labels={},
        created_at=NOW, config=None, exit_reason="host restarted",
    )  # fmt: skip
    later = NOW + timedelta(minutes=3)
    assert ps.status_text(info, later) == "Exited (255) 3 minutes ago (host restarted)"
    assert inspectdoc.state_of(info)["Error"] == "host restarted"


def _created(started: datetime | None, pid: int = 0) -> TaskInfo:
    return TaskInfo(
        id="a", image="img", status=Status.CREATED, pid=pid, exit=None, netns_path=None,
        netns_mode="none", group=None, log_path="", labels={}, created_at=NOW, config=None,
        started_at=started,
    )  # fmt: skip


def test_lost_reason() -> None:
    booted = NOW
    assert lost_reason(_created(NOW - timedelta(hours=1)), booted, NOW) == HOST_RESTARTED
    just = NOW + timedelta(seconds=1)
    assert lost_reason(_created(just), booted, just) is None  # a start may be under way
    assert lost_reason(_created(just), booted, just + timedelta(seconds=LOST_AFTER)) == TASK_LOST
    assert lost_reason(_created(None), booted, NOW) is None  # created, never started
    assert lost_reason(_created(NOW - timedelta(hours=1), pid=9), booted, NOW) is None


def test_a_group_task_in_a_namespace_of_its_own_is_no_split() -> None:
    """``--group`` alone shares the shim: such a task's namespace is not the group's."""
    stat = _stat({PIN: (NSFS, 10), "/proc/5/ns/net": (NSFS, 10), "/proc/6/ns/net": (NSFS, 99)})
    own = _member("web-own", 6, **{lbl.NETNS_PATH: "/run/netns/mine"})
    out = health.annotate([_member("web-srv", 5), own], stat_id=stat)
    assert [i.problems for i in out] == [(), ()]
