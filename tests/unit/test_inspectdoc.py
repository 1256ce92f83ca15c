"""inspect's document: docker's shape and spellings, built from a TaskInfo (pure)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import attrs

from ctrexec.cli.views.inspect import ZERO_TIME, document, rfc3339
from ctrexec.cli.views.ps import execute, parse_template
from ctrexec.containerd.tasks import ExitStatus, Status
from ctrexec.labels import IMAGE_ENTRYPOINT_ARGS
from ctrexec.net.cniconf import PortMapping
from ctrexec.net.nsinfo import Address
from ctrexec.tasks.config import RestartPolicy, TaskConfig
from ctrexec.tasks.reports import TaskInfo

T0 = datetime(2026, 3, 4, 5, 6, 7, 123400, tzinfo=UTC)


def _info(**over: Any) -> TaskInfo:
    cfg = TaskConfig(
        name="web", image="img:1", command=("sleep", "30"), env={"A": "1"}, user="1000",
        labels={"tier": "web"}, volumes=("/srv:/data:ro",), memory="64m", cpus=1.5,
        restart=RestartPolicy(policy="on-failure", max_attempts=3), workdir="/app",
    )  # fmt: skip
    base = TaskInfo(
        id="web", image="img:1", status=Status.RUNNING, pid=4242, exit=None,
        netns_path="/run/netns/cx-web", netns_mode="path", group="cx-web", log_path="/l",
        labels={"io.ctrexec.network.mode": "bridge"}, created_at=T0, config=cfg, run=1,
        started_at=T0 + timedelta(seconds=1),
        ports=(PortMapping(host_port=8080, container_port=80),),
        addresses=(Address("eth0", 4, "10.89.0.5", 24),
                   Address("eth0", 6, "fe80::1", 64), Address("eth0", 6, "fd00::5", 64)),
        args=("sleep", "30"), env=("PATH=/bin", "A=1"), workdir="/app", hostname="web",
    )  # fmt: skip
    return attrs.evolve(base, **over)


def test_a_running_container() -> None:
    doc = document(_info())
    assert doc["Id"] == "web" and doc["Name"] == "/web"
    assert doc["Created"] == "2026-03-04T05:06:07.1234Z"
    assert doc["State"] == {
        "Status": "running", "Running": True, "Paused": False, "Restarting": False,
        "OOMKilled": False, "Pid": 4242, "ExitCode": 0,
        "StartedAt": "2026-03-04T05:06:08.1234Z", "FinishedAt": ZERO_TIME, "Error": "",
    }  # fmt: skip
    assert (doc["Path"], doc["Args"]) == ("sleep", ["30"])
    cfg = doc["Config"]
    assert (cfg["Cmd"], cfg["Entrypoint"], cfg["Env"]) == (
        ["sleep", "30"],
        None,
        ["PATH=/bin", "A=1"],
    )
    assert (cfg["User"], cfg["WorkingDir"], cfg["Hostname"], cfg["Image"]) == (
        "1000",
        "/app",
        "web",
        "img:1",
    )
    assert cfg["Labels"] == {"tier": "web"}
    host = doc["HostConfig"]
    assert host["Memory"] == 64 * 1024 * 1024 and host["NanoCpus"] == 1_500_000_000
    assert host["RestartPolicy"] == {"Name": "on-failure", "MaximumRetryCount": 3}
    assert host["Binds"] == ["/srv:/data:ro"]
    assert host["PortBindings"] == {"80/tcp": [{"HostIp": "", "HostPort": "8080"}]}
    net = doc["NetworkSettings"]
    assert (net["IPAddress"], net["IPPrefixLen"], net["GlobalIPv6Address"]) == (
        "10.89.0.5",
        24,
        "fd00::5",
    )
    assert net["Ports"] == {"80/tcp": [{"HostIp": "0.0.0.0", "HostPort": "8080"}]}
    assert net["Networks"]["bridge"]["IPAddress"] == "10.89.0.5"
    assert doc["Ctrexec"]["pid"] == 4242 and doc["Ctrexec"]["netns_path"] == "/run/netns/cx-web"
    json.dumps(doc)  # all of it is JSON


def test_an_exited_and_a_created_container() -> None:
    done = document(_info(status=Status.STOPPED, exit=ExitStatus(3, T0 + timedelta(seconds=9))))
    assert done["State"]["Status"] == "exited" and done["State"]["Running"] is False
    assert (done["State"]["ExitCode"], done["State"]["Pid"]) == (3, 0)
    assert done["State"]["FinishedAt"] == "2026-03-04T05:06:16.1234Z"
    assert done["Ctrexec"]["pid"] is None  # a stopped task's pid is nobody's
    new = document(_info(status=Status.CREATED, pid=0, started_at=None, addresses=None))
    assert new["State"]["Status"] == "created" and new["State"]["StartedAt"] == ZERO_TIME
    assert new["NetworkSettings"]["IPAddress"] == "" and new["NetworkSettings"]["Networks"] == {}
    paused = document(_info(status=Status.PAUSED))["State"]
    assert (paused["Status"], paused["Running"], paused["Paused"]) == ("paused", True, True)


def test_entrypoint_and_cmd_split_where_the_config_says() -> None:
    cfg = TaskConfig(name="e", image="i", entrypoint=("/bin/sh", "-c"), command=("echo hi",))
    doc = document(_info(config=cfg, args=("/bin/sh", "-c", "echo hi")))
    assert (doc["Config"]["Entrypoint"], doc["Config"]["Cmd"]) == (["/bin/sh", "-c"], ["echo hi"])
    bare = document(_info(config=TaskConfig(name="e", image="i"), args=("nginx",), workdir="/"))
    assert (bare["Config"]["Entrypoint"], bare["Config"]["Cmd"]) == (None, ["nginx"])
    image_entry = {IMAGE_ENTRYPOINT_ARGS: "1"}  # what create writes: the image's Entrypoint
    argv = ("/entry.sh", "nginx", "-g", "daemon off;")
    split = document(_info(config=TaskConfig(name="e", image="i"), args=argv, labels=image_entry))
    assert split["Config"]["Entrypoint"] == ["/entry.sh"]
    assert split["Config"]["Cmd"] == ["nginx", "-g", "daemon off;"]
    assert bare["Config"]["WorkingDir"] == ""  # docker's for an image with no WORKDIR
    unset = document(_info(config=TaskConfig(name="e", image="i")))["HostConfig"]
    assert (unset["Memory"], unset["NanoCpus"], unset["Binds"]) == (0, 0, None)
    assert unset["RestartPolicy"] == {"Name": "no", "MaximumRetryCount": 0}


def test_rfc3339_is_go_s() -> None:
    assert rfc3339(None) == "0001-01-01T00:00:00Z"
    assert rfc3339(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2026-01-02T03:04:05Z"
    east = timezone(timedelta(hours=2))
    assert rfc3339(datetime(2026, 1, 2, 3, 4, 5, 500000, tzinfo=east)) == "2026-01-02T01:04:05.5Z"


def test_docker_users_templates_on_the_document() -> None:
    doc = document(_info())

    def fmt(text: str) -> str:
        return execute(parse_template(text), doc)

    assert fmt("{{.State.Pid}} {{.State.Status}} {{.State.ExitCode}}") == "4242 running 0"
    assert fmt("{{range .Config.Env}}{{println .}}{{end}}") == "PATH=/bin\nA=1\n"
    assert fmt('{{index .Config.Labels "tier"}}|{{index .Config.Labels "nope"}}') == "web|"
    assert json.loads(fmt("{{json .State}}"))["Pid"] == 4242
    assert fmt("{{.NetworkSettings.IPAddress}}") == "10.89.0.5"
    assert (
        fmt("{{range $p, $b := .HostConfig.PortBindings}}{{$p}} {{(index $b 0).HostPort}}{{end}}")
        == "80/tcp 8080"
    )
    assert fmt("{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}") == "10.89.0.5"
    assert fmt("{{.Name}} {{.HostConfig.RestartPolicy.Name}}") == "/web on-failure"
