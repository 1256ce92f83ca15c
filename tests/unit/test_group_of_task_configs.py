"""A group made from TaskConfigs (GroupSpec.of) is the group its file makes: same
members, same configs, same digest, refused with the file's words. No daemon."""

from __future__ import annotations

from typing import Any

import pytest

from ctrexec import GroupSpec, InvalidArgument, TaskConfig, parse_group

pytestmark = pytest.mark.unit

FILE: dict[str, Any] = {
    "name": "web",
    "network": "bridge",
    "ports": ["8080:80/tcp"],
    "task": [
        {"name": "app", "image": "busybox", "command": ["sleep", "1"], "env": {"A": "1"}},
        {"name": "db", "image": "busybox:1.36", "hostname": "dbhost",
         "restart": {"policy": "on-failure"}, "stop_signal": 9},
    ],
}  # fmt: skip


def _typed() -> GroupSpec:
    return GroupSpec.of(
        "web",
        [
            TaskConfig(name="app", image="busybox", command=["sleep", "1"], env={"A": "1"}),
            TaskConfig(
                name="db",
                image="busybox:1.36",
                hostname="dbhost",
                restart={"policy": "on-failure"},
                stop_signal="9",
            ),
        ],
        ports=["8080:80/tcp"],
    )


def test_a_group_of_task_configs_is_the_group_its_file_makes() -> None:
    from_file, typed = parse_group(FILE), _typed()
    assert [c.name for c in typed.task_configs()] == ["web-app", "web-db"]
    assert typed.task_configs() == from_file.task_configs()
    assert typed == from_file
    # up compares this digest with the members' label: equal means nothing is recreated
    assert typed.digest() == from_file.digest()


def test_the_members_join_the_group_and_a_task_hostname_wins() -> None:
    app, db = _typed().task_configs()
    spec = _typed()
    assert (app.netns, app.group, app.hostname) == (spec.netns_path, "web", "web")
    assert db.hostname == "dbhost"


def test_a_simple_file_hashes_as_it_did_when_tasks_were_tables() -> None:
    """Groups up before tasks were TaskConfigs are not seen as changed."""
    one = {"name": "g", "task": [{"name": "a", "image": "busybox"}]}
    assert parse_group(one).digest() == "b2cd75e4693966da"
    two = dict(
        FILE, task=[FILE["task"][0], {"name": "db", "image": "busybox:1.36", "hostname": "dbhost"}]
    )
    assert parse_group(two).digest() == "36a49bca6ef430ec"


def test_an_edited_task_changes_the_digest() -> None:
    edited = GroupSpec.of("web", [*_typed().tasks[:1], TaskConfig(name="db", image="busybox")])
    assert edited.digest() != _typed().digest()


@pytest.mark.parametrize(
    ("task", "words"),
    [
        (
            TaskConfig(name="app", image="busybox", netns="/run/netns/mine"),
            "group web: task app: netns = '/run/netns/mine': the group's tasks share its"
            " network namespace: set the group's network instead",
        ),
        (
            TaskConfig(name="app", image="busybox", group="other"),
            "group web: task app: group = 'other': a task belongs to the group it is listed in",
        ),
        (
            TaskConfig(name="app", image="busybox", privileged=True),
            "group web: task app: privileged = True: a group's task cannot set it",
        ),
    ],
)
def test_a_task_setting_what_the_group_owns_is_refused(task: TaskConfig, words: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        GroupSpec.of("web", [task])
    assert str(caught.value).startswith(words)


def test_refusals_say_what_the_file_would() -> None:
    app = TaskConfig(name="app", image="busybox")
    cases: list[tuple[Any, str]] = [
        (lambda: GroupSpec.of("web", [app, app]), "task app: name = 'app': another task"),
        (lambda: GroupSpec.of("web", []), "at least one task is required"),
        (lambda: GroupSpec.of("web", [app], network="host", ports=["80:80"]), "ports = "),
        (lambda: GroupSpec.of("web", [app], network="nope"), "network = 'nope'"),
        (lambda: GroupSpec.of("web", [{"name": "app"}]), "task 1: expected a TaskConfig"),  # type: ignore[list-item]
    ]
    for make, words in cases:
        with pytest.raises(InvalidArgument) as caught:
            make()
        assert str(caught.value).startswith("group web: ") and words in str(caught.value)
    data = dict(FILE, network="host")
    with pytest.raises(InvalidArgument) as caught:
        parse_group(data, source="group file g.toml")
    with pytest.raises(InvalidArgument) as typed:
        GroupSpec.of("web", _typed().tasks, network="host", ports=FILE["ports"])
    assert str(typed.value).removeprefix("group web: ") == str(caught.value).removeprefix(
        "group file g.toml: "
    )
