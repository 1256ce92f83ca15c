"""The Nomad driver's config path: hclspec trees, the cty-msgpack decoder, the
mapping of Nomad's TaskConfig onto ctrexec's, and the hclog line format."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import msgpack
import pytest

from ctrexec import labels as lbl
from ctrexec._api.nomad.drivers import driver_pb2 as dpb
from ctrexec.errors import InvalidArgument, InvalidField
from ctrexec.ids import is_valid_id
from ctrexec.nomad import hclog, hclspec
from ctrexec.nomad.config import PLUGIN_SCHEMA, TASK_SCHEMA, PluginConfig, parse_duration
from ctrexec.nomad.taskmap import (
    DriverState,
    alloc_addresses,
    container_id,
    owner_labels,
    to_task_config,
)


def _walk(spec, path=""):  # type: ignore[no-untyped-def]
    """The rules Nomad's hclspecutils/dec.go applies to a spec tree."""
    kind = spec.WhichOneof("block")
    if kind == "object":
        for k, v in spec.object.attributes.items():
            yield from _walk(v, f"{path}.{k}")
    elif kind == "default":
        assert spec.default.primary.Attr.name, f"{path}: a Default's Attr must name itself"
        assert spec.default.default.literal.value
        json.loads(spec.default.default.literal.value)
        yield path
    elif kind == "Attr":
        assert spec.Attr.type, f"{path}: empty type"
        assert spec.Attr.type != "any"
        yield path
    elif kind in ("block_value", "block_list"):
        yield from _walk(getattr(spec, kind).nested, path)
    else:
        raise AssertionError(f"{path}: unexpected {kind}")


@pytest.mark.parametrize("schema", [PLUGIN_SCHEMA, TASK_SCHEMA])
def test_schemas_are_well_formed_hclspec(schema: hclspec.Schema) -> None:
    assert list(_walk(hclspec.to_proto(schema)))


def _cty(**values: object) -> bytes:
    """As cty encodes: every attribute present, nil when absent, keys sorted."""
    full = {e.name: None for e in PLUGIN_SCHEMA} | values
    return msgpack.packb(dict(sorted(full.items())))


def test_plugin_config_defaults_apply_to_nil_and_to_absent_keys() -> None:
    for payload in (_cty(), msgpack.packb({}), b""):
        cfg = PluginConfig.from_decoded(hclspec.decode(PLUGIN_SCHEMA, payload))
        assert cfg.namespace == "nomad"
        assert cfg.stats_interval == 1.0
        assert cfg.allow_privileged is False
        assert "chown" in cfg.allow_caps


def test_wrong_types_name_their_key() -> None:
    with pytest.raises(InvalidField) as err:
        hclspec.decode(PLUGIN_SCHEMA, _cty(allow_privileged="yes"))
    assert err.value.field == "allow_privileged"
    with pytest.raises(InvalidField):
        hclspec.decode(PLUGIN_SCHEMA, b"\xc1")
    with pytest.raises(InvalidField) as err:
        hclspec.decode(TASK_SCHEMA, msgpack.packb({"mount": [{"target": "/x"}], "image": "i"}))
    assert err.value.field == "mount[0].source"


def test_a_wrong_password_type_is_refused_without_the_value() -> None:
    data = msgpack.packb({"image": "i", "auth": {"username": "u", "password": ["sac-pw"]}})
    with pytest.raises(InvalidField) as err:
        hclspec.decode(TASK_SCHEMA, data)
    assert err.value.field == "auth.password"
    assert "sac-pw" not in str(err.value)


def test_durations() -> None:
    assert parse_duration("d", "1m30s") == 90.0
    assert parse_duration("d", "500ms") == 0.5
    for bad in ("", "5", "soon", "1s2"):
        with pytest.raises(InvalidField):
            parse_duration("d", bad)


def _plugin(**kw: object) -> PluginConfig:
    return PluginConfig.from_decoded(hclspec.decode(PLUGIN_SCHEMA, msgpack.packb(kw)))


def _task(netns: str | None = None) -> dpb.TaskConfig:
    tc = dpb.TaskConfig(
        id="0b5e7c1a-9a3d-4a61-9d33-1f5a3c2e8d10/web/ab12cd34",
        name="web",
        alloc_id="0b5e7c1a-9a3d-4a61-9d33-1f5a3c2e8d10",
        alloc_dir="/var/nomad/alloc/0b5e7c1a",
        env={"NOMAD_TASK_NAME": "web"},
        user="nobody",
    )
    tc.resources.linux_resources.cpu_shares = 500
    tc.resources.linux_resources.memory_limit_bytes = 256 * 1024 * 1024
    tc.mounts.add(host_path="/srv/data", task_path="/data", readonly=True)
    if netns:
        tc.network_isolation_spec.mode = dpb.NetworkIsolationSpec.GROUP
        tc.network_isolation_spec.path = netns
    return tc


def _opts(**kw: object) -> dict[str, object]:
    return hclspec.decode(TASK_SCHEMA, msgpack.packb({"image": "busybox", **kw}))


def test_task_maps_onto_taskconfig() -> None:
    cfg = to_task_config(
        _task("/var/run/netns/0b5e7c1a-9a3d-4a61-9d33-1f5a3c2e8d10"),
        _opts(command="httpd", args=["-f"], shm_size=1048576),
        _plugin(),
    )
    assert cfg.netns == "/var/run/netns/0b5e7c1a-9a3d-4a61-9d33-1f5a3c2e8d10"
    assert cfg.command == ("httpd", "-f")
    assert cfg.user == "nobody"
    assert (cfg.cpu_shares, cfg.memory) == (500, 256 * 1024 * 1024)
    assert cfg.volumes[:3] == (
        "/var/nomad/alloc/0b5e7c1a/alloc:/alloc",
        "/var/nomad/alloc/0b5e7c1a/web/local:/local",
        "/var/nomad/alloc/0b5e7c1a/web/secrets:/secrets",
    )
    assert "/srv/data:/data:ro" in cfg.volumes
    assert cfg.tmpfs == ("/dev/shm:nosuid,noexec,nodev,mode=1777,size=1048576",)
    assert to_task_config(_task(), _opts(), _plugin()).netns == "host"


def test_extra_hosts_and_the_alloc_address_reach_the_hosts_file() -> None:
    task = _task("/var/run/netns/0b5e7c1a")
    task.network_isolation_spec.hostsConfig.address = "172.26.64.5"
    task.network_isolation_spec.hostsConfig.hostname = "web-host"
    cfg = to_task_config(task, _opts(extra_hosts=["db:10.1.2.3"]), _plugin())
    assert (cfg.extra_hosts, cfg.hostname) == (("db:10.1.2.3",), "web-host")
    assert alloc_addresses(task) == ("172.26.64.5",)  # no netlink: hostsConfig says
    assert owner_labels(task, alloc_addresses(task))[lbl.ADDRESSES] == "172.26.64.5"
    assert lbl.ADDRESSES not in owner_labels(_task())


def test_without_hostsconfig_the_alloc_shares_its_short_id_as_hostname() -> None:
    """What a real agent sends a driver that does not create the network: a GROUP
    spec with empty labels and no hostsConfig."""
    group = to_task_config(_task("/var/run/netns/0b5e7c1a"), _opts(), _plugin())
    assert group.hostname == "0b5e7c1a"
    assert to_task_config(_task(), _opts(), _plugin()).hostname is None  # host: its own
    assert alloc_addresses(_task()) == ()  # host network: no alloc address


@pytest.mark.parametrize(
    ("opts", "field"),
    [
        ({"privileged": True}, "privileged"),
        ({"cap_add": ["sys_admin"]}, "cap_add"),
        ({"extra_hosts": ["a:host-gateway"]}, "extra_hosts"),
        ({"host_network": True}, "host_network"),
    ],
)
def test_task_options_the_plugin_does_not_allow(opts: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidField) as err:
        to_task_config(_task("/var/run/netns/x"), _opts(**opts), _plugin())
    assert err.value.field == field


def test_pull_options_follow_force_pull_and_the_auth_block() -> None:
    from ctrexec.nomad.taskmap import pull_options

    assert pull_options(_opts()) == {"policy": "missing"}
    forced = pull_options(_opts(force_pull=True, auth={"username": "u", "password": "p"}))
    assert forced["policy"] == "always"
    assert (forced["credentials"].username, forced["credentials"].secret) == ("u", "p")


def test_the_groups_dns_block_becomes_the_tasks_resolver() -> None:
    task = _task("/var/run/netns/x")
    task.dns.servers.extend(["10.0.0.53"])
    task.dns.searches.extend(["svc.test"])
    task.dns.options.extend(["ndots:2"])
    cfg = to_task_config(task, _opts(), _plugin())
    assert (cfg.dns, cfg.dns_search, cfg.dns_options) == (
        ("10.0.0.53",),
        ("svc.test",),
        ("ndots:2",),
    )
    assert to_task_config(_task("/var/run/netns/x"), _opts(), _plugin()).dns == ()


def test_a_dns_block_part_left_out_comes_from_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nomad's GenerateDNSMount: servers, searches and options each default to the
    host's; the host's loopback servers are unreachable from the alloc's namespace."""
    from ctrexec.net import hostfiles

    host = "nameserver 127.0.0.53\nnameserver 192.0.2.1\nsearch host.test\noptions rotate\n"
    monkeypatch.setattr(hostfiles, "read_host_file", lambda _p: host)
    task = _task("/var/run/netns/x")
    task.dns.searches.extend(["svc.test"])
    cfg = to_task_config(task, _opts(), _plugin())
    assert (cfg.dns, cfg.dns_search, cfg.dns_options) == (
        ("192.0.2.1",),
        ("svc.test",),
        ("rotate",),
    )
    monkeypatch.setattr(hostfiles, "read_host_file", lambda _p: "nameserver 127.0.0.53\n")
    assert to_task_config(task, _opts(), _plugin()).dns == ()  # no server: the host's file


def test_pull_credentials_come_from_the_plugin_when_the_task_has_none(tmp_path: Path) -> None:
    from ctrexec.nomad.taskmap import pull_options

    plugin = _plugin(auth={"config": str(tmp_path / "docker.json"), "helper": ""})
    assert pull_options(_opts(), plugin)["docker_config"] == tmp_path / "docker.json"
    given = pull_options(_opts(auth={"username": "u", "password": "p"}), plugin)
    assert "docker_config" not in given and given["credentials"].username == "u"


def test_memory_max_makes_memory_the_reservation() -> None:
    task = _task()
    task.resources.allocated_resources.memory.memory_mb = 128
    cfg = to_task_config(task, _opts(), _plugin())  # limit 256 MiB: memory_max
    assert (cfg.memory, cfg.memory_reservation) == (256 << 20, 128 << 20)
    task.resources.allocated_resources.memory.memory_mb = 256  # no memory_max
    assert to_task_config(task, _opts(), _plugin()).memory_reservation is None


_BRIDGE = "/var/run/netns/x"


@pytest.mark.parametrize(
    ("netns", "opts", "field", "allow"),
    [
        (_BRIDGE, {"privileged": True}, "privileged", {"allow_privileged": True}),
        (_BRIDGE, {"cap_add": ["net_admin"]}, "cap_add", {"allow_caps": ["net_admin"]}),
        (_BRIDGE, {"volumes": ["/srv:/srv"]}, "volumes", {"volumes_enabled": True}),
        (_BRIDGE, {"mount": [{"source": "/tmp", "target": "/t"}]}, "volumes", {}),
        (_BRIDGE, {"volumes": ["/:/host"]}, "volumes", {"allow_root_mount": True}),
        (_BRIDGE, {"volumes": ["/proc/1/root:/h:ro"]}, "volumes", {"allow_root_mount": True}),
        (
            _BRIDGE,
            {"mount": [{"source": "/..", "target": "/h"}]},
            "mount[0].source",
            {"allow_root_mount": True},
        ),
        (
            _BRIDGE,
            {"device": [{"host_path": "/dev/fuse"}]},
            "device",
            {"allow_devices": True},
        ),
        (None, {"host_network": True}, "host_network", {"allow_host_network": True}),
        (
            None,
            {"sysctl": {"net.ipv4.ip_forward": "1"}},
            "sysctl.net.ipv4.ip_forward",
            {"allow_host_sysctls": True},
        ),
    ],
)
def test_what_a_job_takes_of_the_host_needs_the_plugin_config(
    netns: str | None, opts: dict[str, object], field: str, allow: dict[str, object]
) -> None:
    """Refused by default (volumes: with volumes_enabled = false), allowed by the
    plugin config's option, and the refusal names the field in one line."""
    strict = {"volumes_enabled": False} if "volumes" in field else {}
    with pytest.raises(InvalidField) as err:
        to_task_config(_task(netns), _opts(**opts), _plugin(**strict))
    assert err.value.field == field
    assert "\n" not in str(err.value)
    to_task_config(_task(netns), _opts(**opts), _plugin(**allow))


def test_only_a_network_namespaces_own_sysctls_are_allowed() -> None:
    cfg = to_task_config(_task(_BRIDGE), _opts(sysctl={"net.core.somaxconn": "512"}), _plugin())
    assert cfg.sysctls == {"net.core.somaxconn": "512"}
    for netns in (_BRIDGE, None):  # the host's whatever the plugin config says
        with pytest.raises(InvalidField) as err:
            to_task_config(
                _task(netns), _opts(sysctl={"kernel.shmmax": "1"}), _plugin(allow_host_sysctls=True)
            )
        assert err.value.field == "sysctls"


def test_allowed_by_plugin_config() -> None:
    plugin = _plugin(allow_privileged=True, allow_caps=["all"])
    cfg = to_task_config(_task(), _opts(privileged=True, cap_add=["sys_admin"]), plugin)
    assert cfg.privileged


def test_container_ids_are_valid_stable_and_distinct() -> None:
    a = container_id("0b5e7c1a-9a3d-4a61-9d33-1f5a3c2e8d10/web/ab12cd34")
    b = container_id("0b5e7c1a-9a3d-4a61-9d33-1f5a3c2e8d10/web/ab12cd35")
    long = container_id("x" * 36 + "/" + "t" * 200 + "/r")
    assert a == container_id("0b5e7c1a-9a3d-4a61-9d33-1f5a3c2e8d10/web/ab12cd34")
    assert a != b
    assert all(is_valid_id(i) for i in (a, b, long, container_id("//")))


def test_driver_state_round_trips_and_refuses_garbage() -> None:
    from datetime import UTC, datetime

    s = DriverState(container_id="c", namespace="nomad", started_at=datetime.now(UTC))
    assert DriverState.decode(s.encode()) == s
    with pytest.raises(InvalidArgument):
        DriverState.decode(b"\x81\xa1a\x01")


def test_hclog_lines() -> None:
    out = io.StringIO()
    hclog.install(stream=out)
    try:
        logging.getLogger("ctrexec.nomad").warning("x %s", "y", extra={"task_id": "t"})
    finally:
        logging.getLogger().handlers.clear()
    entry = json.loads(out.getvalue())
    assert (entry["@level"], entry["@message"], entry["task_id"]) == ("warn", "x y", "t")
    assert entry["@timestamp"][19] == "." and len(entry["@timestamp"].split(".")[1]) >= 7


def test_hclog_survives_a_broken_pipe() -> None:
    class Broken(io.StringIO):
        def write(self, _s: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    err = io.StringIO()
    hclog.install(stream=Broken())
    try:
        import contextlib

        with contextlib.redirect_stderr(err):
            logging.getLogger("t").error("lost")
    finally:
        logging.getLogger().handlers.clear()
    assert err.getvalue() == ""


ALLOC = "0b5e7c1a-9a3d-4a61-9d33-1f5a3c2e8d10"


def _cgroup_task(path: str) -> dpb.TaskConfig:
    task = _task("/var/run/netns/x")
    task.resources.linux_resources.cpuset_cgroup = path
    return task


@pytest.mark.parametrize(
    ("given", "cgroup", "cpuset"),
    [
        ("/sys/fs/cgroup/cpuset/nomad/share", f"/nomad/{ALLOC}.web", "/nomad/share"),
        (
            f"/sys/fs/cgroup/cpuset/nomad/reserve/{ALLOC}.web",
            f"/nomad/{ALLOC}.web",
            f"/nomad/reserve/{ALLOC}.web",
        ),
    ],
)
def test_cgroup_v1_places_the_task_as_nomads_exec_driver(
    monkeypatch: pytest.MonkeyPatch, given: str, cgroup: str, cpuset: str
) -> None:
    """v1: the cpuset hierarchy's share or reserve cgroup for the init process,
    <parent>/<alloc>.<task> in every other hierarchy."""
    from ctrexec.nomad import taskmap

    monkeypatch.setattr(taskmap, "cgroup_v2_only", lambda: False)
    cfg = to_task_config(_cgroup_task(given), _opts(), _plugin())
    assert (cfg.cgroup, cfg.cpuset_cgroup) == (cgroup, cpuset)


def test_cgroup_v2_places_the_task_in_the_scope_nomad_made(monkeypatch: pytest.MonkeyPatch) -> None:
    from ctrexec.nomad import taskmap

    monkeypatch.setattr(taskmap, "cgroup_v2_only", lambda: True)
    scope = f"/nomad.slice/share.slice/{ALLOC}.web.scope"
    cfg = to_task_config(_cgroup_task("/sys/fs/cgroup" + scope), _opts(), _plugin())
    assert (cfg.cgroup, cfg.cpuset_cgroup) == (scope, None)
    assert to_task_config(_task(), _opts(), _plugin()).cgroup is None  # not sent: ctrexec's


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("/sys/fs/cgroup/cpuset/nomad/../../../etc", "'..'"),
        ("/sys/fs/cgroup/../cgroup/cpuset/nomad/share", "'..'"),
        ("nomad/share", "absolute"),
        ("/etc/cpuset/nomad/share", "not under /sys/fs/cgroup"),
        ("/sys/fs/cgroup/memory/nomad/share", "not in the cpuset hierarchy"),
        ("/sys/fs/cgroup/cpuset/nomad/reserve/other.task", "neither"),
    ],
)
def test_a_cgroup_path_that_escapes_or_is_not_nomads_is_refused(
    monkeypatch: pytest.MonkeyPatch, given: str, says: str
) -> None:
    from ctrexec.nomad import taskmap

    monkeypatch.setattr(taskmap, "cgroup_v2_only", lambda: False)
    with pytest.raises(InvalidArgument) as err:
        to_task_config(_cgroup_task(given), _opts(), _plugin())
    assert says in str(err.value) and "\n" not in str(err.value)
