"""docker's wording of ages, templates and filters, without a daemon."""

from __future__ import annotations

import pytest

from ctrexec.errors import InvalidArgument
from ctrexec.psformat import human_duration, inspect_lookup, parse_filters, render


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


def test_render_fields_json_and_refusals() -> None:
    data = {"pid": 7, "status": "running", "exit": {"code": 3}, "oom_killed": False}
    look = inspect_lookup(data)
    assert render("{{.State.Pid}}/{{ .status }}/{{.exit.code}}", look) == "7/running/3"
    assert render("{{json .exit}} {{.State.OOMKilled}}", look) == '{"code": 3} false'
    with pytest.raises(InvalidArgument, match=r"no field \.Nope"):
        render("{{.Nope}}", look)
    with pytest.raises(InvalidArgument, match="only"):
        render("{{if .pid}}x{{end}}", look)


def test_parse_filters() -> None:
    assert parse_filters(["status=running", "status=paused", "label=a=b"]) == {
        "status": ["running", "paused"],
        "label": ["a=b"],
    }
    with pytest.raises(InvalidArgument, match="invalid filter 'colour=red'"):
        parse_filters(["colour=red"])
    with pytest.raises(InvalidArgument):
        parse_filters(["status"])


def test_ps_ids_cut_to_12_unless_no_trunc() -> None:
    from ctrexec.containerd.tasks import Status
    from ctrexec.psformat import ps_lines
    from ctrexec.taskconfig import TaskConfig, TaskInfo

    config = TaskConfig(name="ctrexec-0123456789abcdef", image="busybox", command=("echo",) * 8)
    info = TaskInfo(
        id=config.name, image="busybox", status=Status.CREATED, pid=0, exit=None,
        netns_path=None, netns_mode="none", group=None, log_path="", labels={},
        created_at=None, config=config,
    )  # fmt: skip
    assert ps_lines([info], "{{.ID}}") == ["ctrexec-0123"]
    assert ps_lines([info], "{{.ID}}", trunc=False) == ["ctrexec-0123456789abcdef"]
    assert ps_lines([info], "{{.Command}}") == ['"echo echo echo echo…"']
    assert ps_lines([info], "{{.Command}}", trunc=False) == [f'"{" ".join(["echo"] * 8)}"']
