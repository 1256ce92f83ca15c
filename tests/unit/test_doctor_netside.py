"""The pure rules of doctor's network checks: whose namespace, which port is half-made,
whose NAT rules, which reservation files, which groups share an address."""

from __future__ import annotations

import ipaddress
import secrets
import socket
from pathlib import Path
from typing import Any

import pytest

from ctrexec import labels as lbl
from ctrexec.doctor import integrity, netside, netstate
from ctrexec.doctor.findings import Scope
from ctrexec.errors import NotFound
from ctrexec.net import holders, ipamstore, iptables, netns, nsinfo


class _Attrs:
    def __init__(self, **attrs: Any) -> None:
        self.attrs = attrs

    def get_attr(self, name: str) -> Any:
        return self.attrs.get(name)


class _Link(_Attrs):
    """A netlink link message as pyroute2 gives it: attributes and an index."""

    def __init__(self, index: int, name: str, kind: str, **attrs: Any) -> None:
        super().__init__(IFLA_IFNAME=name, IFLA_LINKINFO=_Attrs(IFLA_INFO_KIND=kind), **attrs)
        self.index = index

    def __getitem__(self, key: str) -> int:
        assert key == "index"
        return self.index


def test_only_the_group_prefix_or_a_marker_makes_a_namespace_ctrexecs() -> None:
    assert netside.ours("cx-web", "/run/netns/cx-web")
    stranger = f"dnet-{secrets.token_hex(4)}"
    assert not netside.ours(stranger, f"/run/netns/{stranger}")


def test_a_record_names_its_path_label_and_its_groups_pin() -> None:
    named = netside.named_by(
        [{lbl.NETNS_PATH: "/run/netns/mine", "other": "x"}, {lbl.GROUP: "web"}, {}]
    )
    assert named == {"/run/netns/mine", "/run/netns/cx-web"}


def test_a_half_made_pair_is_a_veth_on_the_bridge_with_its_peer_on_the_host() -> None:
    links = [
        _Link(1, "br", "bridge"),
        _Link(2, "v1", "veth", IFLA_MASTER=1, IFLA_LINK=3),
        _Link(3, "v1p", "veth", IFLA_LINK=2),
        _Link(4, "v2", "veth", IFLA_MASTER=1, IFLA_LINK=2, IFLA_LINK_NETNSID=5),  # peer away
        _Link(5, "tap0", "tun", IFLA_MASTER=1),  # not a veth
        _Link(6, "other", "bridge"),
        _Link(7, "v3", "veth", IFLA_MASTER=6, IFLA_LINK=8),  # another bridge's
    ]
    assert netside.half_made(links, "br") == [("v1", "v1p")]
    assert netside.half_made(links, "gone") == []
    assert netside.half_made([_Link(1, "br", "dummy"), *links[1:]], "br") == []


SAVED = """\
-P POSTROUTING ACCEPT
-N CNI-abc
-A POSTROUTING -s 10.0.0.5/32 -m comment --comment "name: \\"net\\" id: \\"gone\\"" -j CNI-abc
-A POSTROUTING -s 10.0.0.6/32 -m comment --comment "name: \\"other\\" id: \\"theirs\\"" -j X
-A CNI-abc -m comment --comment "name: \\"net\\" id: \\"inside\\"" -j MASQUERADE
-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \\"net\\" id: \\"web\\"" \
-m multiport --dports 8080 -j CNI-DN-1
"""


def test_nat_rules_belong_to_the_owners_their_comments_name_on_the_network() -> None:
    _, rules = iptables.parse_rules(SAVED)
    assert iptables.owners(rules, "net") == {"gone", "web"}
    assert iptables.owners(rules, "other") == {"theirs"}


def test_a_pools_reservations_are_its_address_files_alone(tmp_path: Path) -> None:
    pool = ipamstore.Pool(tmp_path, (ipaddress.ip_network("10.0.0.0/24"),))
    (tmp_path / "10.0.0.5").write_text(ipamstore.reservation_text("web", "eth0"))
    (tmp_path / "10.0.0.6").write_text("old")  # before 0.7: the id alone
    for other in ("lock", "last_reserved_ip.0", "192.168.0.1"):
        (tmp_path / other).write_text("x")
    found = netstate.reservations(pool)
    assert [(p.name, holder) for p, holder in found] == [("10.0.0.5", "web"), ("10.0.0.6", "old")]


def _info(path: str, *addresses: str) -> nsinfo.NetNSInfo:
    found = tuple(nsinfo.Address("eth0", socket.AF_INET, a, 24) for a in addresses)
    return nsinfo.NetNSInfo(path=path, inode=1, interfaces=(), addresses=found, routes=())


def test_every_group_namespace_carrying_an_address_is_named(monkeypatch: Any) -> None:
    spaces = {"cx-a": ["10.0.0.5"], "cx-b": ["10.0.0.5", "10.0.0.6"], "other": ["10.0.0.5"]}

    def inspect(path: str) -> nsinfo.NetNSInfo:
        if path.endswith("gone"):
            raise NotFound("removed while we scan")
        return _info(path, *spaces[Path(path).name])

    names = [*spaces, "cx-gone"]
    monkeypatch.setattr(
        netns, "list_namespaces", lambda: [netns.NetNS(n, f"/run/netns/{n}") for n in names]
    )
    monkeypatch.setattr(nsinfo, "inspect", inspect)
    five, six = ipaddress.ip_address("10.0.0.5"), ipaddress.ip_address("10.0.0.6")
    assert holders.all_holders("eth0") == {five: ["a", "b"], six: ["b"]}
    assert holders.live_addresses("eth0") == {five: "a", six: "b"}


class _Records:
    def __init__(self, given: dict[str, list[str]]) -> None:
        self.given = given

    def record(self, owner: str, mode: str) -> list[str] | None:
        return self.given.get(owner)


@pytest.mark.parametrize(
    ("cached", "movers"),
    [({"b": ["10.0.0.5/24"], "a": ["10.0.0.9/24"]}, ["a"]), ({}, ["b"])],
)
def test_the_group_cni_did_not_give_the_address_is_the_one_to_move(
    monkeypatch: Any, cached: dict[str, list[str]], movers: list[str]
) -> None:
    monkeypatch.setattr(integrity.nethealth, "addresses", lambda c: c)
    scope = Scope(object(), networks=_Records(cached), now=0.0)  # type: ignore[arg-type]
    found = integrity.twice(scope, "10.0.0.5", ["a", "b"])
    assert not found.garbage and found.where == "10.0.0.5"
    assert found.fix.startswith(", ".join(f"ctrexec group down {g}" for g in movers) + ",")
