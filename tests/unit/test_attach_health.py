"""The attachment health check's judgement and the re-ADD that asks for an address back.

Pure logic over snapshots and cached records made here; the real links, bridge and
host-local are exercised by tests/chaos/test_integrity_attach.py.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import pytest

from ctrexec.errors import CNIError, FailedPrecondition
from ctrexec.net import health, reattach
from ctrexec.net.cni import CNIAttachment, PortMapping
from ctrexec.net.cniconf import bridge_conflist, parse_result

BRIDGE = "cxt0"
ETH0 = health.Link(index=2, name="eth0", kind="veth", peer_index=7, peer_nsid=0)
HOST_END = health.Link(index=7, name="vethaaaa", kind="veth", master=5, peer_index=2, peer_nsid=3)
BR = health.Link(index=5, name=BRIDGE, kind="bridge")


def _snap(
    iface: health.Link | None = ETH0,
    addresses: Sequence[str] = ("10.99.0.2/24",),
    host: Sequence[health.Link] = (BR, HOST_END),
    nsid: int | None = 3,
) -> health.Snapshot:
    return health.Snapshot(
        ns_name="cx-web",
        ifname="eth0",
        iface=iface,
        addresses=frozenset(ipaddress.ip_interface(a) for a in addresses),
        host_links=tuple(host),
        nsid=nsid,
    )


def _cached(
    host_end: str = "vethaaaa", plugins: Sequence[Mapping[str, Any]] | None = None
) -> CNIAttachment:
    conf = bridge_conflist("cxtnet", BRIDGE, "10.99.0.0/24", ports=True, ipam_dir="/tmp/x")
    if plugins is not None:
        conf = attrs.evolve(conf, plugins=tuple(plugins))
    result = parse_result(
        {
            "cniVersion": "1.0.0",
            "interfaces": [
                {"name": BRIDGE, "mac": "aa:00:00:00:00:01"},
                {"name": host_end, "mac": "aa:00:00:00:00:02"},
                {"name": "eth0", "mac": "aa:00:00:00:00:03", "sandbox": "/run/netns/cx-web"},
            ],
            "ips": [{"address": "10.99.0.2/24", "gateway": "10.99.0.1", "interface": 2}],
        }
    )
    return CNIAttachment(
        network="cxtnet",
        container_id="web",
        ifname="eth0",
        netns="/run/netns/cx-web",
        config=conf,
        result=result,
        cni_args="",
        capability_args={},
    )


WANT = ["10.99.0.2/24"]


def test_a_sound_attachment_has_no_problems() -> None:
    assert health.judge(_snap(), WANT, BRIDGE) == []


def test_eth0_gone_is_the_one_problem() -> None:
    assert health.judge(_snap(iface=None, addresses=()), WANT, BRIDGE) == [
        "eth0 is gone from cx-web"
    ]


def test_eth0_without_its_address() -> None:
    assert health.judge(_snap(addresses=("10.99.0.9/24",)), WANT, BRIDGE) == [
        "eth0 in cx-web lacks its address 10.99.0.2/24"
    ]


def test_the_host_end_gone() -> None:
    assert health.judge(_snap(host=(BR,)), WANT, BRIDGE) == [
        "the host end of eth0 in cx-web is gone"
    ]


def test_a_veth_of_another_namespace_is_not_the_host_end() -> None:
    other = attrs.evolve(HOST_END, peer_nsid=4)
    assert health.host_end(_snap(host=(BR, other))) is None
    assert health.host_end(_snap(nsid=None)) is None
    assert health.host_end(_snap()) == HOST_END


def test_the_bridge_gone() -> None:
    loose = attrs.evolve(HOST_END, master=None)
    assert health.judge(_snap(host=(loose,)), WANT, BRIDGE) == [
        "bridge cxt0 is gone (vethaaaa, the host end of eth0 in cx-web, is on no bridge)"
    ]


def test_a_new_bridge_without_the_old_port() -> None:
    new_bridge = attrs.evolve(BR, index=9)
    assert health.judge(_snap(host=(new_bridge, HOST_END)), WANT, BRIDGE) == [
        "vethaaaa, the host end of eth0 in cx-web, is not on bridge cxt0"
    ]


def test_a_bridge_or_host_end_down() -> None:
    assert health.judge(_snap(host=(attrs.evolve(BR, up=False), HOST_END)), WANT, BRIDGE) == [
        "bridge cxt0 is down"
    ]
    assert health.judge(_snap(host=(BR, attrs.evolve(HOST_END, up=False))), WANT, BRIDGE) == [
        "vethaaaa, the host end of eth0 in cx-web, is down"
    ]


def test_no_host_end_to_check_without_a_veth_or_a_bridge() -> None:
    macvlan = attrs.evolve(ETH0, kind="macvlan")
    assert health.judge(_snap(iface=macvlan, host=()), WANT, BRIDGE) == []
    assert health.judge(_snap(host=()), WANT, None) == []


def test_bridge_of_reads_the_conflist() -> None:
    assert health.bridge_of(_cached()) == BRIDGE
    assert health.bridge_of(_cached(plugins=[{"type": "bridge"}])) == "cni0"
    assert health.bridge_of(_cached(plugins=[{"type": "macvlan"}])) is None


def test_addresses_are_the_own_interfaces() -> None:
    assert health.addresses(_cached()) == ["10.99.0.2/24"]


def test_owns_unless_the_old_host_end_lives_on_elsewhere() -> None:
    cached = _cached()
    assert health.owns(_snap(), cached, BRIDGE)  # eth0 holds the address
    gone = _snap(iface=None, addresses=(), host=(BR,))
    assert health.owns(gone, cached, BRIDGE)  # nothing holds the old veth
    elsewhere = attrs.evolve(HOST_END, peer_nsid=4)
    remade = _snap(iface=None, addresses=(), host=(BR, elsewhere))
    assert not health.owns(remade, cached, BRIDGE)  # the old namespace still has it


@attrs.define
class _Records:
    cached: CNIAttachment | None

    def network_of(self, mode: Any) -> str | None:
        return None if mode in ("none", "host") else "cxtnet"

    @property
    def ifname(self) -> str:
        return "eth0"

    def record(self, owner: str, mode: Any) -> CNIAttachment | None:
        return self.cached

    def bridge_of(self, mode: Any) -> str | None:
        return BRIDGE


def test_problems_say_not_attached_and_what_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = health.Health(problems=("eth0 is gone from cx-web",), own=True)
    monkeypatch.setattr(health, "assess", lambda cached: broken)
    nets = _Records(_cached())
    assert health.problems(nets, "web", "/run/netns/cx-web", "bridge") == [
        "not attached: eth0 is gone from cx-web; run `ctrexec group up FILE`"
    ]
    assert health.problems(
        nets, "web", "/run/netns/cx-web", "bridge", repair="ctrexec start web"
    ) == ["not attached: eth0 is gone from cx-web; run `ctrexec start web`"]
    assert health.problems(nets, "web", "/run/netns/cx-web", "host") == []


def test_a_wiped_cache_is_judged_from_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """No CNI record (issue 36: a wiped cache): a sound eth0 is no damage; a broken
    one is named as the kernel shows it."""
    snaps = {"sound": _snap(), "gone": _snap(iface=None, addresses=())}
    snaps["bare"] = _snap(addresses=("fe80::1/64",))  # link-local only: no address
    snaps["off"] = _snap(host=(BR, attrs.evolve(HOST_END, master=None)))
    seen: list[str] = []
    monkeypatch.setattr(health, "read", lambda path, ifname: snaps[seen[-1]])
    nets = _Records(None)

    def said(case: str) -> list[str]:
        seen.append(case)
        return health.faults(nets, "web", "/run/netns/cx-web", "bridge")

    assert said("sound") == []
    assert said("gone") == ["eth0 is gone from cx-web"]
    assert said("bare") == ["eth0 in cx-web has no address"]
    assert said("off") == ["vethaaaa, the host end of eth0 in cx-web, is not on bridge cxt0"]


def test_requested_is_the_first_valid_address_bare() -> None:
    assert reattach.requested(["bogus", "10.99.0.2/24", "10.99.0.3"]) == "10.99.0.2"
    assert reattach.requested([]) is None


def test_only_host_local_is_asked() -> None:
    assert reattach.asks_host_local(_cached().config)
    assert not reattach.asks_host_local(_cached(plugins=[{"type": "macvlan"}]).config)


@attrs.frozen
class _Path:
    there: bool

    def exists(self) -> bool:
        return self.there


class _FakeCNI:
    """Refuses an ADD that asks for a taken address, as host-local does."""

    def __init__(self, taken: set[str], cache_left: bool = False) -> None:
        self.taken = taken
        self.calls: list[Mapping[str, str] | None] = []
        self.cache_left = cache_left

    def add(
        self,
        conf: Any,
        owner: str,
        netns: Any,
        ifname: str,
        *,
        args: Any = None,
        port_mappings: Sequence[PortMapping] = (),
    ) -> Any:
        self.calls.append(args)
        ip = (args or {}).get("IP")
        if ip in self.taken:
            raise CNIError(f"requested IP address {ip} is not available")
        got = ip or "10.99.0.7"
        return parse_result(
            {"cniVersion": "1.0.0", "ips": [{"address": f"{got}/24"}], "interfaces": []}
        )

    def cache_path(self, network: str, owner: str, ifname: str) -> Any:
        return _Path(self.cache_left)


def _add(fake: _FakeCNI, prefer: Sequence[str]) -> Any:
    conf = _cached().config
    return reattach.add(
        fake,
        conf,
        "web",
        "/run/netns/cx-web",
        ifname="eth0",
        ports=(),  # type: ignore[arg-type]
        prefer=prefer,
    )


def test_add_asks_for_the_preferred_address() -> None:
    fake = _FakeCNI(taken=set())
    assert [i.address for i in _add(fake, ["10.99.0.2"]).ips] == ["10.99.0.2/24"]
    assert fake.calls == [{"IP": "10.99.0.2"}]


def test_add_falls_back_to_a_fresh_address_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    fake = _FakeCNI(taken={"10.99.0.2"})
    with caplog.at_level(logging.WARNING):
        assert [i.address for i in _add(fake, ["10.99.0.2"]).ips] == ["10.99.0.7/24"]
    assert fake.calls == [{"IP": "10.99.0.2"}, None]
    assert "could not get its address 10.99.0.2 back" in caplog.text
    assert "it has 10.99.0.7 now" in caplog.text


def test_add_does_not_retry_over_an_unfinished_rollback() -> None:
    fake = _FakeCNI(taken={"10.99.0.2"}, cache_left=True)
    with pytest.raises(CNIError):
        _add(fake, ["10.99.0.2"])
    assert fake.calls == [{"IP": "10.99.0.2"}]


def test_add_without_a_preference_asks_nothing() -> None:
    fake = _FakeCNI(taken=set())
    _add(fake, [])
    assert fake.calls == [None]


def test_a_sound_attachment_keeps_its_ports_only() -> None:
    cached = _cached()
    reattach.check_same_ports(cached, ())
    with pytest.raises(FailedPrecondition, match="tear it down"):
        reattach.check_same_ports(cached, (PortMapping(28080, 80),))
