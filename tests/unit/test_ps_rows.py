"""``ps`` reads no more than it shows (issue 40): a row made no TaskConfig and decoded
no spec, which cost a listing about a millisecond a container; ``inspect`` still
reads both, once, when it asks.

The listing is containerd's answer to Containers.List and Tasks.List, faked at the
connection; the CLI's own ``ps`` runs on it. What proves the property is a count of
the configs made (``TaskConfig.from_json``) and of the specs decoded, not a time.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, cast

import attrs
import pytest

from ctrexec import _rpc
from ctrexec import labels as lbl
from ctrexec._api.containerd.services.containers.v1 import containers_pb2
from ctrexec._api.containerd.services.tasks.v1 import tasks_pb2
from ctrexec._api.containerd.types.task import task_pb2
from ctrexec.cli import inspect as cliinspect
from ctrexec.cli import main as climain
from ctrexec.cli.views import inspect as inspectview
from ctrexec.containerd import containers
from ctrexec.containerd.client import Client
from ctrexec.tasks import info as taskinfo
from ctrexec.tasks import logkeeper
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.reports import TaskInfo


def _record(name: str, config: dict[str, Any] | None) -> containers_pb2.Container:
    spec = {"process": {"args": ["sleep", "600"], "cwd": "/srv"}, "hostname": name}
    c = containers_pb2.Container(
        id=name,
        image="docker.io/library/busybox:latest",
        labels={lbl.MANAGED: "true", "app": "web"},
        spec=containers.json_extension(containers.SPEC_TYPE_URL, spec),
        snapshotter="overlayfs",
        snapshot_key=name,
    )
    c.runtime.name = "io.containerd.runc.v2"
    if config is not None:
        ext = containers.json_extension(lbl.CONFIG_TYPE_URL, config)
        c.extensions[lbl.CONFIG_EXTENSION].CopyFrom(ext)
    c.created_at.FromSeconds(1_700_000_000)
    return c


def _config(name: str, **fields: Any) -> dict[str, Any]:
    return TaskConfig(name=name, image="busybox", **fields).to_record()


RECORDS = [
    _record(
        "web-1",
        _config(
            "web-1", command=["sleep", "600"], labels={"app": "web"}, volumes=["/srv/data:/data"]
        ),
    ),
    _record("web-2", _config("web-2", entrypoint=["/bin/sh", "-c"], command=["echo hi"])),
    _record("stopped", _config("stopped", command=["true"])),
    _record("alien", None),  # not made by ctrexec: no config
    _record("future", {**_config("future"), "made_by_a_newer_ctrexec": True}),
]
RUNNING = {"web-1", "web-2", "alien", "future"}


class _Conn:
    """containerd's answers to the two listings, as the wire sends them."""

    address = "/run/fake.sock"

    def unary(self, service: str, method: str, request: Any, rt: Any, **kw: Any) -> Any:
        assert method == "List", (service, method)
        if rt is containers_pb2.ListContainersResponse:
            return containers_pb2.ListContainersResponse(containers=RECORDS)
        procs = [
            task_pb2.Process(
                id=r.id,
                pid=100 + i,
                status=task_pb2.RUNNING if r.id in RUNNING else task_pb2.STOPPED,
            )
            for i, r in enumerate(RECORDS)
        ]
        return tasks_pb2.ListTasksResponse(tasks=procs)


@attrs.define
class _Reads:
    configs: int = 0
    specs: int = 0


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> _Reads:
    """Counts each config made and each spec decoded; no log daemon is asked about."""
    counted = _Reads()
    made = TaskConfig.from_json.__func__  # type: ignore[attr-defined]
    decoded = containers._decoded

    def from_json(cls: type[TaskConfig], data: Any) -> TaskConfig:
        counted.configs += 1
        return cast(TaskConfig, made(cls, data))

    def decode(spec: dict[str, Any] | bytes) -> dict[str, Any]:
        counted.specs += isinstance(spec, bytes)
        return decoded(spec)

    monkeypatch.setattr(TaskConfig, "from_json", classmethod(from_json))
    monkeypatch.setattr(containers, "_decoded", decode)
    monkeypatch.setattr(logkeeper, "revive", lambda *a, **kw: None)
    return counted


def _client() -> Client:
    return Client(cast(_rpc.Connection, _Conn()), namespace="ns")


def _ps(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *flags: str
) -> list[str]:
    monkeypatch.setattr(cliinspect, "connect", lambda _args: contextlib.nullcontext(_client()))
    args = climain.parse(["ps", *flags])
    assert args.func(args) == 0
    return capsys.readouterr().out.splitlines()


@pytest.mark.parametrize(
    "flags",
    [
        (),
        ("-a",),
        ("-q",),
        ("-aq",),
        ("-a", "--no-trunc"),
        ("-a", "--format", "{{.ID}} {{.Command}} {{.Labels}} {{.Mounts}} {{.Label `app`}}"),
        ("-a", "--format", "{{json .}}"),
    ],
)
def test_ps_makes_no_config_and_decodes_no_spec(
    flags: tuple[str, ...],
    reads: _Reads,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    lines = _ps(monkeypatch, capsys, *flags)
    shown = RUNNING | ({"stopped"} if "-a" in flags[:1] or "-aq" in flags else set())
    rows = [line for line in lines if not line.startswith("CONTAINER ID")]
    ids = {json.loads(r)["ID"] if r.startswith("{") else r.split()[0] for r in rows}
    assert ids == shown and len(rows) == len(shown)
    assert (reads.configs, reads.specs) == (0, 0)


def test_ps_prints_the_configs_fields(
    reads: _Reads, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The three fields ``ps`` shows of a config, read from its JSON as the config has
    them; a record with no config ctrexec can read shows none (as ``inspect``)."""
    template = "{{.ID}}|{{.Command}}|{{.Labels}}|{{.Mounts}}|{{.Label `app`}}"
    lines = _ps(monkeypatch, capsys, "-a", "--no-trunc", "--format", template)
    assert sorted(lines) == [
        'alien|""|||',
        'future|""|||',
        'stopped|"true"|||',
        'web-1|"sleep 600"|app=web|/srv/data|web',
        "web-2|\"/bin/sh -c 'echo hi'\"|||",
    ]
    assert (reads.configs, reads.specs) == (0, 0)


def test_inspect_reads_its_config_and_spec_once(reads: _Reads) -> None:
    """What a listing did not read is read when asked, once, and is what an eager
    read gives: the same config, the spec's facts, docker's document."""
    infos = {i.id: i for i in taskinfo.list_infos(_client(), all_tasks=True)}
    web = infos["web-1"]
    doc = inspectview.document(web, log_dropped=0)
    assert doc["Config"]["Hostname"] == "web-1" and doc["Path"] == "sleep"
    assert [m["Destination"] for m in doc["Mounts"]] == []  # the spec mounts nothing there
    assert web.config is not None and web.config.volumes == ("/srv/data:/data",)
    assert (web.args, web.workdir, web.hostname) == (("sleep", "600"), "/srv", "web-1")
    assert (reads.configs, reads.specs) == (1, 1)
    # An info with a problem added (attrs.evolve) keeps what its original read.
    later = attrs.evolve(web, problems=())
    assert later.config is web.config and later == web
    assert (reads.configs, reads.specs) == (1, 1)
    assert infos["future"].config is None and infos["alien"].config is None


def test_an_info_made_by_hand_lists_its_configs_fields() -> None:
    """A TaskInfo made from values (a scheduler's test double) shows its config's."""
    cfg = TaskConfig(
        name="x", image="busybox", entrypoint=["run"], command=["-v"], labels={"k": "v"}
    )
    info = TaskInfo(
        id="x",
        image="busybox",
        status=taskinfo.Status.RUNNING,
        pid=1,
        exit=None,
        netns_path=None,
        netns_mode="none",
        group=None,
        log_path="",
        labels={},
        created_at=None,
        config=cfg,
        args=("run", "-v"),
    )
    assert (info.command_line, info.config_labels, info.config_volumes) == (
        ("run", "-v"),
        {"k": "v"},
        (),
    )
    assert info.args == ("run", "-v") and "config=TaskConfig(" in repr(info)
    assert json.loads(json.dumps(info.to_json()))["config"]["labels"] == {"k": "v"}
