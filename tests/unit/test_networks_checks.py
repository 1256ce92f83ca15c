"""Network modes, port specs, subnet overlap and port conflicts -- no root, no plugin.

``Networks`` is driven through an in-memory CNI stand-in (``FakeCNI``) that records
what would have been run, so the checks that must happen *before* any ADD can be
seen to happen before it. Sockets bound here stay on 127.0.0.1.
"""

from __future__ import annotations

import ipaddress
import json
import socket
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from ctrexec.errors import AlreadyExists, FailedPrecondition, InvalidArgument
from ctrexec.net import cni, health, networks, ports
from ctrexec.net.cni import PortMapping
from ctrexec.net.networks import HostRoute, NetworkMode, Networks, parse_mode, parse_port

pytestmark = pytest.mark.unit

# ------------------------------------------------------------------------ modes


@pytest.mark.parametrize(
    ("text", "kind", "network"),
    [
        ("none", "none", None),
        ("host", "host", None),
        ("bridge", "bridge", None),
        ("cni:mynet", "cni", "mynet"),
        ("cni:my-net.v2_x", "cni", "my-net.v2_x"),
    ],
)
def test_parse_mode_good(text: str, kind: str, network: str | None) -> None:
    mode = parse_mode(text)
    assert (mode.kind, mode.network) == (kind, network)
    assert str(mode) == text
    assert parse_mode(str(mode)) == mode
    assert mode.uses_cni == (kind in ("bridge", "cni"))


@pytest.mark.parametrize(
    "text",
    ["", "Bridge", " bridge", "bridge ", "cni", "cni:", "cni:a/b", "cni:../x", "cni:-x",
     "cni/mynet", "container:web", "default", "host:x"],
)  # fmt: skip
def test_parse_mode_bad(text: str) -> None:
    with pytest.raises(InvalidArgument):
        parse_mode(text)


def test_parse_mode_hints_nomad_spelling() -> None:
    with pytest.raises(InvalidArgument, match="cni:mynet"):
        parse_mode("cni/mynet")


def test_parse_mode_rejects_non_strings() -> None:
    with pytest.raises(InvalidArgument):
        parse_mode(None)  # type: ignore[arg-type]


def test_default_mode_is_bridge() -> None:
    assert networks.DEFAULT_MODE == networks.BRIDGE == NetworkMode("bridge")


# ------------------------------------------------------------------------ ports


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8080:80", PortMapping(8080, 80, "tcp", "")),
        ("8080:80/tcp", PortMapping(8080, 80, "tcp", "")),
        ("53:5353/udp", PortMapping(53, 5353, "udp", "")),
        ("1:65535", PortMapping(1, 65535, "tcp", "")),
        ("65535:1/udp", PortMapping(65535, 1, "udp", "")),
        ("127.0.0.1:8080:80", PortMapping(8080, 80, "tcp", "127.0.0.1")),
        ("0.0.0.0:8080:80/udp", PortMapping(8080, 80, "udp", "0.0.0.0")),
        (":8080:80", PortMapping(8080, 80, "tcp", "")),
        ("[::1]:8080:80", PortMapping(8080, 80, "tcp", "::1")),
        ("[2001:DB8:0::1]:443:8443/tcp", PortMapping(443, 8443, "tcp", "2001:db8::1")),
        ("08080:0080", PortMapping(8080, 80, "tcp", "")),
    ],
)
def test_parse_port_good(text: str, expected: PortMapping) -> None:
    assert parse_port(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "", "80", "8080", "0:80", "80:0", "65536:80", "80:65536", "99999:80", "-1:80",
        "+80:80", "8080:80/sctp", "8080:80/TCP", "8080:80/", "8080:80/tcp/udp",
        "8080-8090:80-90", "a:80", "80:b", "8080 :80", " 8080:80", "8080:80 ",
        "1.2.3:8080:80", "localhost:8080:80", "::1:8080:80", "[::1:8080:80",
        "[::1]8080:80", "1.2.3.4:5:6:7", "8080:80:90", "\u0668080:80", "8080::80",
    ],
)  # fmt: skip
def test_parse_port_bad(text: str) -> None:
    with pytest.raises(InvalidArgument):
        parse_port(text)


def test_parse_port_messages_are_one_line() -> None:
    with pytest.raises(InvalidArgument, match=r"1\.\.65535") as err:
        parse_port("0:80")
    assert "\n" not in str(err.value)
    with pytest.raises(InvalidArgument, match="brackets"):
        parse_port("::1:8080:80")


def test_describe() -> None:
    assert ports.describe(PortMapping(8080, 80)) == "8080/tcp"
    assert ports.describe(PortMapping(53, 53, "udp", "127.0.0.1")) == "127.0.0.1:53/udp"
    assert ports.describe(PortMapping(1, 2, "tcp", "::1")) == "[::1]:1/tcp"


@pytest.mark.parametrize(
    ("a", "b", "clash"),
    [
        ("8080:80", "8080:81", True),
        ("8080:80", "8081:80", False),
        ("8080:80/tcp", "8080:80/udp", False),
        ("127.0.0.1:8080:80", "8080:80", True),
        ("127.0.0.1:8080:80", "127.0.0.2:8080:80", False),
        ("127.0.0.1:8080:80", "127.0.0.1:8080:90", True),
        ("0.0.0.0:8080:80", "127.0.0.1:8080:80", True),
        ("0.0.0.0:8080:80", "[::1]:8080:80", False),
        ("[::]:8080:80", "[::1]:8080:80", True),
        ("8080:80", "[::1]:8080:80", True),
        ("127.0.0.1:8080:80", "[::1]:8080:80", False),
    ],
)
def test_overlaps(a: str, b: str, clash: bool) -> None:
    pa, pb = parse_port(a), parse_port(b)
    assert ports.overlaps(pa, pb) is clash
    assert ports.overlaps(pb, pa) is clash


def test_check_unique() -> None:
    ports.check_unique([parse_port("80:80"), parse_port("80:80/udp"), parse_port("81:80")])
    with pytest.raises(InvalidArgument, match="8080/tcp is given twice"):
        ports.check_unique([parse_port("8080:80"), parse_port("127.0.0.1:8080:81")])


# -------------------------------------------------------------- cached attachments


def fake_cached(
    owner: str, mappings: Sequence[PortMapping] = (), *, network: str = "ctrexec"
) -> cni.CNIAttachment:
    conf = cni.bridge_conflist(network, "cxtbr0", "10.231.200.0/24")
    caps: dict[str, Any] = {}
    if mappings:
        caps["portMappings"] = [m.to_json() for m in mappings]
    return cni.CNIAttachment(
        network=network,
        container_id=owner,
        ifname="eth0",
        netns=f"/run/netns/cxt-{owner}",
        config=conf,
        result=None,
        cni_args="",
        capability_args=caps,
    )


def test_mapped_ports_reads_capability_args() -> None:
    cached = [
        fake_cached("web", [parse_port("8080:80"), parse_port("127.0.0.1:53:53/udp")]),
        fake_cached("db"),
        fake_cached("odd", network="other"),
    ]
    found = ports.mapped_ports(cached)
    assert [(m.owner, ports.describe(m.mapping)) for m in found] == [
        ("web", "8080/tcp"),
        ("web", "127.0.0.1:53/udp"),
    ]


def test_mapped_ports_skips_garbage_entries() -> None:
    garbage = [{"hostPort": 0, "containerPort": 1}, "x", {"hostPort": 9}, {"hostPort": 9000,
               "containerPort": 90, "protocol": "udp"}]  # fmt: skip
    bad = attrs.evolve(fake_cached("web"), capability_args={"portMappings": garbage})
    assert [m.mapping for m in ports.mapped_ports([bad])] == [PortMapping(9000, 90, "udp")]
    odd = attrs.evolve(fake_cached("web"), capability_args={"portMappings": "nope"})
    assert ports.mapped_ports([odd]) == []


def test_check_taken_names_the_group() -> None:
    taken = ports.mapped_ports([fake_cached("web", [parse_port("8080:80")])])
    with pytest.raises(AlreadyExists, match=r"^port 8080/tcp is already mapped by group web$"):
        ports.check_taken([parse_port("8080:9090")], taken)
    with pytest.raises(AlreadyExists):
        ports.check_taken([parse_port("127.0.0.1:8080:1")], taken)
    ports.check_taken([parse_port("8080:80/udp"), parse_port("8081:80")], taken)
    ports.check_taken([parse_port("8080:80")], [])


# ------------------------------------------------------------------ host sockets


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s


def test_host_port_in_use(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    with pytest.raises(AlreadyExists, match=rf"^port {port}/tcp is in use on the host$"):
        ports.check_host_free([PortMapping(port, 80)])
    with pytest.raises(AlreadyExists):
        ports.check_host_free([PortMapping(port, 80, host_ip="127.0.0.1")])
    ports.check_host_free([PortMapping(port, 80, "udp")])  # other protocol: free


def test_host_udp_port_in_use() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with pytest.raises(AlreadyExists, match=f"port {port}/udp is in use on the host"):
            ports.check_host_free([PortMapping(port, 53, "udp")])


def test_host_port_free_and_probe_closed() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ports.check_host_free([PortMapping(port, 80)])
    ports.check_host_free([PortMapping(port, 80)])  # the probe did not keep it
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


# ------------------------------------------------------------------------ routes

PROC_ROUTE = """\
Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0
eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0
cxtbr0\t00C8E70A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
"""

PROC_IPV6_ROUTE = (
    "fd000000000000000000000000000000 08 00000000000000000000000000000000 00 "
    "00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n"
    "ff000000000000000000000000000000 08 00000000000000000000000000000000 00 "
    "00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n"
)


def test_parse_proc_route() -> None:
    routes = networks.parse_proc_route(PROC_ROUTE)
    assert [(str(r.dst), r.ifname) for r in routes] == [
        ("0.0.0.0/0", "eth0"),
        ("192.0.2.0/24", "eth0"),
        ("172.17.0.0/16", "docker0"),
        ("10.231.200.0/24", "cxtbr0"),
    ]


def test_parse_proc_ipv6_route_skips_multicast() -> None:
    routes = networks.parse_proc_ipv6_route(PROC_IPV6_ROUTE)
    assert [(str(r.dst), r.ifname) for r in routes] == [("fd00::/8", "eth0")]


def test_host_routes_reads_this_host() -> None:
    assert all(isinstance(r, HostRoute) for r in networks.host_routes())


def route(dst: str, ifname: str) -> HostRoute:
    return HostRoute(dst=ipaddress.ip_network(dst), ifname=ifname)


@pytest.mark.parametrize(
    ("subnet", "clash"),
    [
        ("10.89.0.0/24", None),
        ("192.0.2.0/25", "192.0.2.0/24"),
        ("192.0.0.0/16", "192.0.2.0/24"),
        ("172.17.5.0/24", "172.17.0.0/16"),
        ("10.231.200.0/24", None),  # our own bridge's route
        ("10.231.200.0/25", "10.231.200.0/24"),  # our bridge, but another subnet
        ("fd12::/64", "fd00::/8"),
        ("fe80::/64", None),
    ],
)
def test_find_overlap(subnet: str, clash: str | None) -> None:
    table = networks.parse_proc_route(PROC_ROUTE) + networks.parse_proc_ipv6_route(PROC_IPV6_ROUTE)
    found = networks.find_overlap(ipaddress.ip_network(subnet), table, "cxtbr0")
    assert (None if found is None else str(found.dst)) == clash


def test_same_subnet_on_another_bridge_overlaps() -> None:
    table = [route("10.231.200.0/24", "cxtother0")]
    net = ipaddress.ip_network("10.231.200.0/24")
    assert networks.find_overlap(net, table, "cxtbr0") == table[0]


def test_check_subnet_message(tmp_path: Path) -> None:
    n = Networks(
        cache_dir=tmp_path / "cache",
        subnet="10.0.0.0/24",
        routes=lambda: [route("10.0.0.0/8", "eth0")],
    )
    with pytest.raises(
        InvalidArgument, match=r"^subnet 10.0.0.0/24 overlaps host route 10.0.0.0/8 via eth0$"
    ):
        n.check_subnet()


@pytest.mark.parametrize(
    "kw",
    [{"subnet": "10.0.0.1/24"}, {"subnet": "nope"}, {"subnet": "10.0.0.0/31"},
     {"bridge": "a" * 16}, {"bridge": "a/b"}, {"network": "a/b"}],
)  # fmt: skip
def test_constructor_validates(kw: dict[str, str], tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument):
        Networks(cache_dir=tmp_path, **kw)  # type: ignore[arg-type]


def test_constructor_refuses_dirs_beside_a_cni_object(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument):
        Networks(cni=cni.CNI(cache_dir=tmp_path), cache_dir=tmp_path)


# ----------------------------------------------------------- setup, no plugins


class FakeCNI(cni.CNI):
    """Records ADD/DEL in memory; attachments come from ``self.cached``."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(
            conf_dir=tmp_path / "conf", cache_dir=tmp_path / "cache", verify_netns=False
        )
        self.calls: list[tuple[str, str]] = []
        self.cached: dict[tuple[str, str], cni.CNIAttachment] = {}

    def validate(self, network: str | cni.NetworkConfigList) -> cni.NetworkConfigList:
        conf = self._conflist(network)
        for plugin in conf.plugins:
            if plugin["type"] not in ("bridge", "portmap", "loopback"):
                raise InvalidArgument(f"CNI plugin {plugin['type']!r} is not installed")
        return conf

    def add(  # type: ignore[override]
        self,
        network: cni.NetworkConfigList,
        container_id: str,
        netns_path: str,
        ifname: str = "eth0",
        *,
        port_mappings: Sequence[PortMapping] = (),
        **_: Any,
    ) -> cni.CNIResult:
        self.calls.append(("ADD", container_id))
        if (network.name, container_id) in self.cached:
            raise AlreadyExists("duplicate")
        raw = {
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "eth0", "sandbox": netns_path}],
            "ips": [{"address": "10.231.201.2/24", "gateway": "10.231.201.1", "interface": 0}],
        }
        att = fake_cached(container_id, port_mappings, network=network.name)
        result = cni.parse_result(raw)
        self.cached[(network.name, container_id)] = attrs.evolve(
            att, netns=netns_path, config=network, result=result
        )
        return result

    def delete(self, network: Any, container_id: str, *_: Any, **__: Any) -> None:
        name = network if isinstance(network, str) else network.name
        self.calls.append(("DEL", container_id))
        self.cached.pop((name, container_id), None)

    def attachment(
        self, network: str, container_id: str, ifname: str = "eth0"
    ) -> cni.CNIAttachment | None:
        return self.cached.get((network, container_id))

    def attachments(self) -> list[cni.CNIAttachment]:
        return list(self.cached.values())


@pytest.fixture
def fake(tmp_path: Path) -> FakeCNI:
    return FakeCNI(tmp_path)


@pytest.fixture
def nets(fake: FakeCNI) -> Networks:
    return Networks(cni=fake, network="cxtnet", bridge="cxtbr1", subnet="10.231.201.0/24",
                    routes=lambda: [])  # fmt: skip


def write_conflist(fake: FakeCNI, name: str, plugins: list[Mapping[str, Any]]) -> None:
    fake.conf_dir.mkdir(parents=True, exist_ok=True)
    data = {"cniVersion": "1.0.0", "name": name, "plugins": plugins}
    (fake.conf_dir / f"{name}.conflist").write_text(json.dumps(data))


def test_none_and_host_run_no_plugin(nets: Networks, fake: FakeCNI) -> None:
    for mode in ("none", "host"):
        att = nets.setup("web", "/run/netns/cxt-web", mode)
        assert (att.mode, att.network, att.ips, att.interface) == (mode, None, (), None)
        assert att.addresses() == []
        nets.teardown("web", None, mode)
        assert nets.attachment("web", mode) is None
    assert fake.calls == []


@pytest.mark.parametrize("mode", ["none", "host"])
def test_ports_need_a_cni_mode(nets: Networks, mode: str) -> None:
    with pytest.raises(InvalidArgument, match="ports need network mode"):
        nets.setup("web", "/run/netns/cxt-web", mode, [parse_port("8080:80")])


def test_bridge_setup_returns_attachment(nets: Networks, fake: FakeCNI) -> None:
    att = nets.setup("web", "/run/netns/cxt-web", "bridge", [parse_port("28080:80")])
    assert att.ips == ("10.231.201.2/24",)
    assert att.addresses() == ["10.231.201.2"]
    assert (att.mode, att.network, att.gateway, att.interface) == (
        "bridge",
        "cxtnet",
        "10.231.201.1",
        "eth0",
    )
    assert att.ports == (PortMapping(28080, 80),)
    assert nets.attachment("web", "bridge") == att
    assert nets.attachments() == [att]
    assert fake.calls == [("ADD", "web")]


def test_stale_cache_is_deleted_before_add(nets: Networks, fake: FakeCNI) -> None:
    nets.setup("web", "/run/netns/cxt-web", "bridge")
    # The fake namespace does not exist, so the record counts as stale.
    nets.setup("web", "/run/netns/cxt-web", "bridge")
    assert fake.calls == [("ADD", "web"), ("DEL", "web"), ("ADD", "web")]


def test_port_taken_by_another_group_stops_before_add(nets: Networks, fake: FakeCNI) -> None:
    nets.setup("web", "/run/netns/cxt-web", "bridge", [parse_port("28080:80")])
    with pytest.raises(AlreadyExists, match=r"^port 28080/tcp is already mapped by group web$"):
        nets.setup("api", "/run/netns/cxt-api", "bridge", [parse_port("28080:8080")])
    assert fake.calls == [("ADD", "web")]
    # Its own ports do not count against a group re-attaching.
    nets.setup("web", "/run/netns/cxt-web", "bridge", [parse_port("28080:80")])


def test_port_taken_in_another_network_counts(nets: Networks, fake: FakeCNI) -> None:
    fake.cached[("usernet", "db")] = fake_cached("db", [parse_port("25432:5432")], network="x")
    with pytest.raises(AlreadyExists, match="group db"):
        nets.setup("web", "/run/netns/cxt-web", "bridge", [parse_port("25432:5432")])
    assert fake.calls == []


def test_host_port_busy_stops_before_add(
    nets: Networks, fake: FakeCNI, listener: socket.socket
) -> None:
    port = listener.getsockname()[1]
    with pytest.raises(AlreadyExists, match="in use on the host"):
        nets.setup("web", "/run/netns/cxt-web", "bridge", [PortMapping(port, 80)])
    assert fake.calls == []


def test_subnet_overlap_stops_before_add(fake: FakeCNI) -> None:
    nets = Networks(cni=fake, network="cxtnet", bridge="cxtbr1", subnet="10.231.201.0/24",
                    routes=lambda: [route("10.231.0.0/16", "eth1")])  # fmt: skip
    with pytest.raises(InvalidArgument, match=r"overlaps host route 10\.231\.0\.0/16 via eth1"):
        nets.setup("web", "/run/netns/cxt-web", "bridge")
    assert fake.calls == []


def test_duplicate_ports_in_one_request(nets: Networks, fake: FakeCNI) -> None:
    with pytest.raises(InvalidArgument, match="given twice"):
        nets.setup("web", "/run/netns/cxt-web", "bridge", [parse_port("1:1"), parse_port("1:2")])
    assert fake.calls == []


def test_cni_mode_missing_conflist(nets: Networks, fake: FakeCNI) -> None:
    with pytest.raises(InvalidArgument, match="no CNI network 'cxtmissing'"):
        nets.setup("web", "/run/netns/cxt-web", "cni:cxtmissing")
    nets.teardown("web", None, "cni:cxtmissing")  # nothing to do, no error
    assert fake.calls == []


def test_cni_mode_own_network_name_refused(nets: Networks) -> None:
    with pytest.raises(InvalidArgument, match="use bridge"):
        nets.setup("web", "/run/netns/cxt-web", "cni:cxtnet")


def test_cni_mode_ports_need_portmap(nets: Networks, fake: FakeCNI) -> None:
    write_conflist(fake, "cxtuser", [{"type": "bridge", "bridge": "cxtbr9"}])
    with pytest.raises(InvalidArgument, match="no portmap plugin"):
        nets.setup("web", "/run/netns/cxt-web", "cni:cxtuser", [parse_port("28080:80")])
    assert fake.calls == []
    att = nets.setup("web", "/run/netns/cxt-web", "cni:cxtuser")
    assert (att.mode, att.network) == ("cni:cxtuser", "cxtuser")
    assert [a.mode for a in nets.attachments()] == ["cni:cxtuser"]
    nets.teardown("web", None, "cni:cxtuser")
    assert fake.calls == [("ADD", "web"), ("DEL", "web")]


def test_cni_mode_with_portmap(nets: Networks, fake: FakeCNI) -> None:
    write_conflist(
        fake,
        "cxtuser",
        [{"type": "bridge"}, {"type": "portmap", "capabilities": {"portMappings": True}}],
    )
    att = nets.setup("web", "/run/netns/cxt-web", "cni:cxtuser", [parse_port("28081:80")])
    assert att.ports == (PortMapping(28081, 80),)


def test_cni_mode_plugin_not_installed(nets: Networks, fake: FakeCNI) -> None:
    write_conflist(fake, "cxtuser", [{"type": "cxt-not-installed"}])
    with pytest.raises(InvalidArgument, match="cxt-not-installed"):
        nets.setup("web", "/run/netns/cxt-web", "cni:cxtuser")
    assert fake.calls == []


@pytest.mark.parametrize("owner", ["", "a/b", "-x", "a b"])
def test_bad_owner(nets: Networks, owner: str) -> None:
    with pytest.raises(InvalidArgument):
        nets.setup(owner, "/run/netns/cxt-web", "none")
    with pytest.raises(InvalidArgument):
        nets.teardown(owner, None, "bridge")


def test_teardown_bridge_is_idempotent(nets: Networks, fake: FakeCNI) -> None:
    nets.setup("web", "/run/netns/cxt-web", "bridge")
    nets.teardown("web", None, "bridge")
    nets.teardown("web", None, "bridge")
    assert nets.attachments() == []


def test_port_change_on_live_attachment_is_refused(
    nets: Networks, fake: FakeCNI, monkeypatch: pytest.MonkeyPatch
) -> None:
    nets.setup("web", "/run/netns/cxt-web", "bridge", [parse_port("28080:80")])
    sound = health.Health(problems=(), own=True)  # the namespace is "alive"
    monkeypatch.setattr(health, "assess", lambda cached: sound)
    assert nets.setup("web", "/run/netns/cxt-web", "bridge", [parse_port("28080:80")]).ips
    with pytest.raises(FailedPrecondition, match="tear it down"):
        nets.setup("web", "/run/netns/cxt-web", "bridge", [parse_port("28081:80")])
    assert fake.calls == [("ADD", "web")]
