"""The pure parts of issue 20's address guard: host-local's reservation files, ARP
probe frames, and finding an attachment's NAT rules by chain name and comment."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest

from ctrexec.errors import CNIError
from ctrexec.net import arp, cni, dad, ipamstore, iptables, networks, reach
from ctrexec.net.networks import Networks, parse_port

TARGET = ipaddress.IPv4Address("10.231.77.9")
OWN = bytes.fromhex("0a0000000001")
OTHER = bytes.fromhex("0a0000000002")


# ------------------------------------------------------------------ reservations


def test_reservation_text_is_host_locals() -> None:
    # host-local 1.1.1 (disk backend): "<id>\r\n<ifname>", the id trimmed.
    assert ipamstore.reservation_text(" web ", "eth0") == "web\r\neth0"
    assert ipamstore.parse_reservation("web\r\neth0") == ("web", "eth0")
    assert ipamstore.parse_reservation("web\n") == ("web", None)  # pre-0.7 files


def test_pools_from_ranges_and_old_subnet() -> None:
    plugins = [
        {"type": "bridge", "ipam": {"type": "host-local", "dataDir": "/x",
                                    "ranges": [[{"subnet": "10.231.77.0/24"}]]}},
        {"type": "ptp", "ipam": {"type": "host-local", "subnet": "10.231.78.0/24"}},
        {"type": "macvlan", "ipam": {"type": "dhcp"}},
        {"type": "portmap"},
    ]  # fmt: skip
    pools = ipamstore.host_local_pools("net1", plugins)
    assert [p.directory for p in pools] == [Path("/x/net1"), Path("/var/lib/cni/networks/net1")]
    assert pools[0].holds(TARGET) and not pools[1].holds(TARGET)


def test_reconcile_reserves_lost_live_addresses_only(tmp_path: Path) -> None:
    pool = ipamstore.Pool(tmp_path / "net1", (ipaddress.ip_network("10.231.77.0/24"),))
    pool.directory.mkdir()
    (pool.directory / "10.231.77.3").write_text("kept\r\neth0")
    live = {
        TARGET: "a",
        ipaddress.ip_address("10.231.77.3"): "b",  # has a file: left as it is
        ipaddress.ip_address("10.231.77.4"): "me",  # the group being ADDed
        ipaddress.ip_address("10.9.9.9"): "c",  # not this pool's
    }
    made = ipamstore.reconcile(pool, live, ifname="eth0", skip="me")
    assert made == [TARGET]
    assert (pool.directory / str(TARGET)).read_bytes() == b"a\r\neth0"
    assert (pool.directory / "10.231.77.3").read_bytes() == b"kept\r\neth0"
    assert sorted(p.name for p in pool.directory.iterdir()) == [
        "10.231.77.3",
        "10.231.77.9",
        "lock",
    ]
    assert ipamstore.reconcile(pool, live, ifname="eth0", skip="me") == []


def test_release_own_leaves_other_holders(tmp_path: Path) -> None:
    pool = ipamstore.Pool(tmp_path, (ipaddress.ip_network("10.231.77.0/24"),))
    (tmp_path / "10.231.77.2").write_text("web\r\neth0")
    (tmp_path / "10.231.77.3").write_text("other\r\neth0")
    ipamstore.release_own(pool, ["10.231.77.2", "10.231.77.3", "bogus", "10.9.9.9"], "web")
    assert [p.name for p in tmp_path.iterdir()] == ["10.231.77.3"]


# --------------------------------------------------------------------------- ARP


def test_probe_frame_is_an_rfc5227_probe() -> None:
    frame = arp.probe_frame(OWN, TARGET)
    assert frame[:6] == b"\xff" * 6 and frame[6:12] == OWN and frame[12:14] == b"\x08\x06"
    packet = arp.parse_frame(frame)
    assert packet == arp.ArpPacket(arp.ARP_REQUEST, OWN, ipaddress.IPv4Address(0), TARGET)
    assert frame[32:38] == bytes(6)  # target hardware address zero


def test_announcement_frame_is_an_rfc5227_announcement() -> None:
    """Sender and target address both the group's, from its MAC: what a Linux
    neighbour takes as gratuitous and overrides its entry with."""
    frame = arp.announcement_frame(OWN, TARGET)
    assert frame[:6] == b"\xff" * 6 and frame[6:12] == OWN and frame[12:14] == b"\x08\x06"
    assert arp.parse_frame(frame) == arp.ArpPacket(arp.ARP_REQUEST, OWN, TARGET, TARGET)
    assert frame[32:38] == bytes(6)
    # our own announcement, looped back to our probe, is not a conflict
    assert arp.conflicting_mac(arp.parse_frame(frame), OWN, TARGET) is None


def test_echo_request_checksums_and_reply_matching() -> None:
    request = reach._request(0x1234, 7)
    assert reach._checksum(request) == 0  # a valid ICMP checksum sums to all ones
    ip_header = bytes([0x45]) + bytes(19)
    reply_ = bytes([0]) + request[1:]
    assert reach._is_reply(ip_header + reply_, 0x1234, str(TARGET), TARGET)
    assert not reach._is_reply(ip_header + reply_, 0x4321, str(TARGET), TARGET)
    assert not reach._is_reply(ip_header + request, 0x1234, str(TARGET), TARGET)
    assert not reach._is_reply(ip_header + reply_, 0x1234, "10.0.0.1", TARGET)


def test_an_entry_on_the_old_mac_is_forgotten_and_the_new_one_confirmed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    entries = [reach.Entry("0a:00:00:00:00:01", 0x02), reach.Entry("0a:00:00:00:00:02", 0x02)]
    forgotten: list[str] = []
    monkeypatch.setattr(reach, "host_entry", lambda bridge, address: entries.pop(0))
    monkeypatch.setattr(reach, "forget", lambda bridge, address: forgotten.append(bridge))
    monkeypatch.setattr(reach, "echo", lambda address, timeout: True)
    assert reach.confirm("cxt0", TARGET, "0A:00:00:00:00:02") is None
    assert forgotten == ["cxt0"]


def test_an_entry_left_on_the_old_mac_is_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        reach, "host_entry", lambda bridge, address: reach.Entry("0a:00:00:00:00:01", 0x04)
    )
    monkeypatch.setattr(reach, "forget", lambda bridge, address: None)
    monkeypatch.setattr(reach, "echo", lambda address, timeout: False)
    why = reach.confirm("cxt0", TARGET, "0a:00:00:00:00:02")
    assert why is not None and "did not answer" in why and "0a:00:00:00:00:01" in why


def test_without_an_echo_only_an_entry_on_another_mac_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No CAP_NET_RAW for the echo: no entry yet (the first packet asks) is success."""
    old = reach.Entry("0a:00:00:00:00:01", 0x02)
    entries: list[reach.Entry | None] = [None, None, old, old]
    monkeypatch.setattr(reach, "host_entry", lambda bridge, address: entries.pop(0))
    monkeypatch.setattr(reach, "forget", lambda bridge, address: None)
    monkeypatch.setattr(reach, "echo", lambda address, timeout: None)
    assert reach.confirm("cxt0", TARGET, "0a:00:00:00:00:02") is None
    assert reach.confirm("cxt0", TARGET, "0a:00:00:00:00:02") is not None


def reply(sender: bytes, ip: ipaddress.IPv4Address) -> bytes:
    body = arp.probe_frame(sender, TARGET)
    return body[:21] + b"\x02" + body[22:28] + ip.packed + body[32:] + bytes(18)  # padded


def test_a_reply_from_another_mac_is_a_conflict() -> None:
    assert arp.conflicting_mac(arp.parse_frame(reply(OTHER, TARGET)), OWN, TARGET) == OTHER
    # Our own kernel answering our hairpinned probe, and unrelated ARP, are not.
    assert arp.conflicting_mac(arp.parse_frame(reply(OWN, TARGET)), OWN, TARGET) is None
    unrelated = reply(OTHER, ipaddress.IPv4Address("10.231.77.50"))
    assert arp.conflicting_mac(arp.parse_frame(unrelated), OWN, TARGET) is None
    # Another host probing for the same address at the same time.
    assert arp.conflicting_mac(arp.parse_frame(arp.probe_frame(OTHER, TARGET)), OWN, TARGET)


def test_parse_frame_refuses_other_frames() -> None:
    frame = arp.probe_frame(OWN, TARGET)
    assert arp.parse_frame(frame[:30]) is None
    assert arp.parse_frame(frame[:12] + b"\x08\x00" + frame[14:]) is None
    assert (
        arp.format_mac(OTHER)
        == "0a:00:00:00:00:02"
        == arp.format_mac(arp.parse_mac("0a:0:0:0:0:2"))
    )


def test_conflict_message_names_both_holders() -> None:
    assert dad.conflict_message("10.231.77.9", "b", "a", "0a:00:00:00:00:02") == (
        "address conflict: 10.231.77.9 given to group b is already held by group a"
        " (MAC 0a:00:00:00:00:02)"
    )
    assert "held by MAC 0a:00:00:00:00:02, not a ctrexec group" in dad.conflict_message(
        "10.231.77.9", "b", None, "0a:00:00:00:00:02"
    )


# ---------------------------------------------------------------------- iptables


def test_chain_names_are_cnis() -> None:
    # utils.FormatChainName("ctrexec", "web"): "CNI-" + sha512 hex, 28 characters.
    assert iptables.chain_name("ctrexec", "web") == "CNI-25204c81e4583812cd6ecaf7"
    assert len(iptables.chain_name("n", "o", "DN-")) == 28
    assert iptables.chain_name("n", "o", "DN-").startswith("CNI-DN-")


def test_attachment_rules_by_comment_and_target() -> None:
    masq, dnat = iptables.chain_name("net1", "web"), iptables.chain_name("net1", "web", "DN-")
    other = iptables.chain_name("net1", "api")
    text = "\n".join([
        "-P POSTROUTING ACCEPT",
        f"-N {masq}",
        f"-N {dnat}",
        "-N CNI-HOSTPORT-DNAT",
        f'-A POSTROUTING -s 10.231.77.2/32 -m comment --comment "name: \\"net1\\" id: \\"web\\"" -j {masq}',
        f'-A POSTROUTING -s 10.231.77.7/32 -m comment --comment "name: \\"net1\\" id: \\"web\\"" -j {masq}',
        f'-A POSTROUTING -s 10.231.77.3/32 -m comment --comment "name: \\"net1\\" id: \\"api\\"" -j {other}',
        f'-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \\"net1\\" id: \\"web\\"" -m multiport --dports 28080 -j {dnat}',
        f"-A {dnat} -p tcp --dport 28080 -j DNAT --to-destination 10.231.77.2:80",
        f'-A {masq} -d 10.231.77.0/24 -m comment --comment "name: \\"net1\\" id: \\"web\\"" -j ACCEPT',
    ])  # fmt: skip
    chains, rules = iptables.parse_rules(text)
    assert masq in chains and dnat in chains and "POSTROUTING" in chains
    found = iptables.attachment_rules(rules, "net1", "web")
    assert [(r.chain, r.target) for r in found] == [
        ("POSTROUTING", masq), ("POSTROUTING", masq), ("CNI-HOSTPORT-DNAT", dnat)
    ]  # fmt: skip
    assert found[0].delete_args()[:4] == ["-D", "POSTROUTING", "-s", "10.231.77.2/32"]
    assert found[0].comment == 'name: "net1" id: "web"'


# ------------------------------------------------------------ DEL without the cache


class FailingOnceCNI(cni.CNI):
    """No cached ADD; the first DEL fails as the bridge plugin's does on a busy chain."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(conf_dir=tmp_path / "conf", cache_dir=tmp_path / "cache")
        self.calls: list[object] = []

    def attachment(
        self, network: str, container_id: str, ifname: str = "eth0"
    ) -> cni.CNIAttachment | None:
        return None

    def delete(self, network: Any, container_id: str, *_: Any, **kw: Any) -> None:
        self.calls.append(("DEL", getattr(network, "name", network), tuple(kw["port_mappings"])))
        if len(self.calls) == 1:
            raise CNIError("CNI plugin bridge DEL: CHAIN_DEL failed (Device or resource busy)")


def test_teardown_without_the_cache_rebuilds_the_del_and_clears_nat_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FailingOnceCNI(tmp_path)
    nets = Networks(cni=fake, network="cxtnet", bridge="cxtbr1", subnet="10.231.77.0/24",
                    ipam_dir=tmp_path / "ipam", routes=lambda: [])  # fmt: skip
    monkeypatch.setattr(
        networks._iptables, "remove_attachment", lambda n, o: fake.calls.append(("NAT", n, o))
    )
    store = tmp_path / "ipam" / "cxtnet"
    store.mkdir(parents=True)
    (store / "10.231.77.2").write_bytes(b"web\r\neth0")
    (store / "10.231.77.3").write_bytes(b"api\r\neth0")
    port = parse_port("28080:80")
    nets.teardown("web", None, "bridge", ports=[port], addresses=["10.231.77.2", "10.231.77.3"])
    assert fake.calls == [
        ("DEL", "cxtnet", (port,)),  # the conflist and the records' ports
        ("NAT", "cxtnet", "web"),  # the stale references, then the DEL again
        ("DEL", "cxtnet", (port,)),
        ("NAT", "cxtnet", "web"),  # whatever the plugins could not find
    ]
    assert [p.name for p in store.iterdir()] == ["10.231.77.3"]  # another holder's stays


def test_port_holders_from_portmaps_jumps() -> None:
    text = "\n".join([
        '-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \\"net1\\" id: \\"web\\""'
        " -m multiport --dports 28080,28000:28001 -j CNI-DN-x",
        '-A CNI-HOSTPORT-DNAT -p udp -m comment --comment "dnat name: \\"net1\\" id: \\"dns\\""'
        " -m multiport --dports 5353 -j CNI-DN-y",
        '-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \\"net2\\" id: \\"o\\""'
        " -m multiport --dports 9999 -j CNI-DN-z",
    ])  # fmt: skip
    _, rules = iptables.parse_rules(text)
    assert iptables.port_holders(rules, "net1") == {
        ("tcp", 28080): "web", ("tcp", 28000): "web", ("tcp", 28001): "web",
        ("udp", 5353): "dns",
    }  # fmt: skip
