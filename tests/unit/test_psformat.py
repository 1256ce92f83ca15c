"""docker's wording of ages, templates and filters, without a daemon."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from ctrexec.cli.views.gotemplate import TemplateError
from ctrexec.cli.views.ps import human_duration, parse_filters, ps_lines, ps_template
from ctrexec.containerd.tasks import ExitStatus, Status
from ctrexec.errors import InvalidArgument
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.reports import TaskInfo


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (0.5, "Less than a second"), (1, "1 second"), (59, "59 seconds"),
        (61, "About a minute"), (180, "3 minutes"), (3700, "About an hour"),
        (5 * 3600, "5 hours"), (3 * 86400, "3 days"), (20 * 86400, "2 weeks"),
        (100 * 86400, "3 months"), (800 * 86400, "2 years"),
    ],
)  # fmt: skip
def test_human_duration(seconds: float, words: str) -> None:
    assert human_duration(seconds) == words


NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _info(name: str, status: Status, code: int | None = None) -> TaskInfo:
    return TaskInfo(
        id=name, image="img", status=status, pid=7 if status is Status.RUNNING else 0,
        exit=ExitStatus(code, NOW) if code is not None else None, netns_path=None,
        netns_mode="none", group=None, log_path="", labels={}, created_at=NOW,
        config=TaskConfig(name=name, image="img", labels={"tier": "web"}),
    )  # fmt: skip


def test_ps_templates_are_go_s() -> None:
    rows = [_info("a", Status.RUNNING), _info("b", Status.STOPPED, 3)]
    assert ps_lines(rows, "{{.Names}} {{.State}} {{.Pid}}", NOW) == ["a running 7", "b exited "]
    assert ps_lines(rows, '{{.Label "tier"}}{{if eq .State "running"}} up{{end}}', NOW) == [
        "web up",
        "web",
    ]
    assert ps_lines(rows[:1], "{{json .Names}} {{.Names | upper}}", NOW) == ['"a" A']
    whole = json.loads(ps_lines(rows[:1], "{{json .}}", NOW)[0])  # docker's ps --format json
    assert (whole["Names"], whole["State"], whole["Pid"]) == ("a", "running", 7)
    assert ps_lines(rows[:1], "json", NOW) == ps_lines(rows[:1], "{{json .}}", NOW)
    table = ps_lines(rows, r"table {{.Names}}\t{{.State}}", NOW)
    assert table == ["NAMES   STATE", "a       running", "b       exited"]


def test_ps_refuses_bad_templates_before_listing() -> None:
    with pytest.raises(InvalidArgument, match=r"unknown field \.Nope"):
        ps_template("{{.Nope}}")
    with pytest.raises(InvalidArgument, match=r"unknown field \.Nope"):
        ps_template("{{if .Names}}{{$.Nope}}{{end}}")
    ps_template("{{range .Names}}{{.Whatever}}{{end}}")  # inside range, dot is not the row
    with pytest.raises(TemplateError, match=r"^template parsing error: template: :1: unclosed"):
        ps_template("{{.Names")


def test_parse_filters() -> None:
    assert parse_filters(["status=running", "status=paused", "label=a=b"]) == {
        "status": ["running", "paused"],
        "label": ["a=b"],
    }
    with pytest.raises(InvalidArgument, match="invalid filter 'colour=red'"):
        parse_filters(["colour=red"])
    with pytest.raises(InvalidArgument):
        parse_filters(["status"])


def test_ps_ids_whole_commands_cut_unless_no_trunc() -> None:
    from ctrexec.cli.views.ps import ps_lines
    from ctrexec.containerd.tasks import Status
    from ctrexec.tasks.config import TaskConfig
    from ctrexec.tasks.reports import TaskInfo

    config = TaskConfig(name="ctrexec-0123456789abcdef", image="busybox", command=("echo",) * 8)
    info = TaskInfo(
        id=config.name, image="busybox", status=Status.CREATED, pid=0, exit=None,
        netns_path=None, netns_mode="none", group=None, log_path="", labels={},
        created_at=None, config=config,
    )  # fmt: skip
    assert ps_lines([info], "{{.ID}}") == ["ctrexec-0123456789abcdef"]
    assert ps_lines([info], "{{.ID}}", trunc=False) == ["ctrexec-0123456789abcdef"]
    assert ps_lines([info], "{{.Command}}") == ['"echo echo echo echo…"']
    assert ps_lines([info], "{{.Command}}", trunc=False) == [f'"{" ".join(["echo"] * 8)}"']
