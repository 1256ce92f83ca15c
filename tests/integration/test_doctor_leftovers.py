"""doctor and gc on the host's network side: one real leftover of each kind, and the
look-alikes that are not garbage, planted side by side.

The leftovers: a pinned ``cx-`` namespace ctrexec made that nothing names or uses; a
half-made veth pair on the test's bridge; a group's namespace removed behind ctrexec's
back (its CNI result, its address and its masquerade rule stay); a host-local
reservation nothing holds; the NAT rules of an attachment that is gone. The
look-alikes, all left alone: another tool's namespace, one with a process inside, one
younger than the grace period, one whose group has a record (in another containerd
namespace, with a rule too), a veth on another bridge, a veth whose peer lives in a
namespace, an address a live namespace carries, a reservation younger than the grace,
another network's rules.

doctor and ``gc --dry-run`` go through the CLI (read-only). The removing gc is the
library's with the network checks narrowed to this test's tag: a host-wide gc would
judge every ``cx-`` namespace on the machine against this session's containerd alone.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from _cli import cli_argv
from _nethelpers import NET_MARKS

from ctrexec import labels as lbl
from ctrexec import owners
from ctrexec.containerd import containers
from ctrexec.containerd.client import Client
from ctrexec.doctor import checks, netside, netstate
from ctrexec.doctor.findings import Check, Finding, Scope
from ctrexec.errors import NotFound
from ctrexec.net import ipamstore, iptables, netns, nsmarks, settings
from ctrexec.net.networks import Networks
from ctrexec.owners import Owner

pytestmark = NET_MARKS

SUBNET = "10.231.212.0/24"
#: Older than doctor's grace period (300 s).
OLD = 3600.0


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    if check:
        assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr.strip()}"
    return done


def _age(path: Path) -> None:
    past = os.stat(path).st_mtime - OLD
    os.utime(path, (past, past))


def _masquerade(network: str, owner: str, source: str) -> None:
    """The rules the bridge plugin's ipMasq leaves for (network, owner)."""
    chain = iptables.chain_name(network, owner)
    _sh("iptables", "-w", "-t", "nat", "-N", chain)
    _sh("iptables", "-w", "-t", "nat", "-A", chain, "-d", SUBNET, "-j", "ACCEPT")
    comment = iptables.masq_comment(network, owner)
    _sh("iptables", "-w", "-t", "nat", "-A", "POSTROUTING", "-s", source,
        "-m", "comment", "--comment", comment, "-j", chain)  # fmt: skip


@attrs.define
class Planted:
    tag: str
    env: dict[str, str]
    nets: Networks
    garbage: dict[str, str] = attrs.Factory(dict)  # where -> kind
    spared: dict[str, str] = attrs.Factory(dict)  # where -> kind: listed, not garbage
    freed: list[str] = attrs.Factory(list)  # what goes with a garbage object
    kept: list[str] = attrs.Factory(list)  # what must outlive gc
    procs: list[subprocess.Popen[bytes]] = attrs.Factory(list)
    records: Client | None = None  # another containerd namespace, with a record in it

    @property
    def bridge(self) -> str:
        return f"dnet{self.tag}"

    def ns(self, suffix: str) -> str:
        return f"cx-dnet{self.tag}{suffix}"

    def owner(self, suffix: str) -> str:
        return f"dnet{self.tag}{suffix}"


def _namespaces(p: Planted, client: Client) -> None:
    for suffix in ("n", "p", "y"):
        netns.create(p.ns(suffix), owner=Owner(client.address, client.namespace, p.owner(suffix)))
    # ownership is recorded, not inferred: a pin with no owner recorded (an older
    # ctrexec's) is listed as spared; another containerd's is not listed at all
    netns.create(p.ns("u"))
    netns.create(p.ns("x"), owner=Owner("/elsewhere/containerd.sock", client.namespace, "x"))
    for suffix in ("n", "p", "u", "x"):
        _age(nsmarks.MARK_DIR / p.ns(suffix))
    p.spared[f"/run/netns/{p.ns('u')}"] = netside.NETNS
    p.kept += [f"/run/netns/{p.ns(s)}" for s in ("u", "x")]
    stale = Path(f"/run/netns/{p.ns('f')}")  # what a create killed before its mount leaves
    stale.touch()
    _age(stale)
    p.garbage[str(stale)] = netside.NETNS
    _sh("ip", "netns", "add", f"dnet{p.tag}o")  # another tool's
    inside = ["ip", "netns", "exec", p.ns("p"), "sleep", "600"]
    p.procs.append(subprocess.Popen(inside))  # a process inside
    p.garbage[f"/run/netns/{p.ns('n')}"] = netside.NETNS
    p.kept += [f"/run/netns/{p.ns(s)}" for s in ("p", "y")] + [f"/run/netns/dnet{p.tag}o"]
    # the busy namespace carries an address of the test's subnet on eth0
    _sh("ip", "-n", p.ns("p"), "link", "add", "eth0", "type", "veth", "peer", "name", "eth9")
    _sh("ip", "-n", p.ns("p"), "addr", "add", "10.231.212.201/24", "dev", "eth0")


def _group_gone(p: Planted, client: Client) -> None:
    """A group's namespace removed behind ctrexec's back: result, address, rule stay."""
    owner = p.owner("a")
    made = netns.create(p.ns("a"), owner=Owner(client.address, client.namespace, owner))
    attached = p.nets.setup(owner, made.path)
    netns.remove(made.path)
    result = p.nets.cni.cache_path(p.nets.network, owner, "eth0")
    _age(result)
    address = str(ipaddress.ip_interface(attached.ips[0]).ip)
    reservation = Path(p.nets.ipam_dir, p.nets.network, address)
    _age(reservation)
    p.garbage[str(result)] = netstate.CNI_RESULT
    record = p.nets.cni.owner_path(p.nets.network, owner, "eth0")
    assert owners.read(record) == Owner(client.address, client.namespace, owner)
    # the result explains them; its DEL frees them, and the owner record goes with it
    p.freed += [str(reservation), owner, str(record)]


def _links(p: Planted) -> None:
    other = f"{p.bridge}x"
    _sh("ip", "link", "add", other, "type", "bridge")
    for bridge, host, peer in ((p.bridge, f"dnv{p.tag}a", f"dnv{p.tag}b"),
                               (other, f"dnw{p.tag}a", f"dnw{p.tag}b")):  # fmt: skip
        _sh("ip", "link", "add", host, "type", "veth", "peer", "name", peer)
        _sh("ip", "link", "set", host, "master", bridge)
    live_host = f"dnv{p.tag}c"  # its peer lives in the busy namespace
    _sh("ip", "link", "add", live_host, "type", "veth", "peer", "name", "eth1",
        "netns", p.ns("p"))  # fmt: skip
    _sh("ip", "link", "set", live_host, "master", p.bridge)
    p.garbage[f"{p.bridge}/dnv{p.tag}a"] = netside.VETH
    p.kept += [f"link dnw{p.tag}a", f"link {live_host}"]


def _store(p: Planted, client: Client) -> None:
    pool = Path(p.nets.ipam_dir, p.nets.network)
    made = (
        (200, "b", True),
        (201, "p", True),
        (202, "q", False),
        (205, "z", True),
        (206, "w", True),
    )
    for last, holder, old in made:
        address = ipaddress.ip_address(f"10.231.212.{last}")
        # .201 may be reserved already: the ADD above puts back what live namespaces hold
        ipamstore.reserve(pool, address, p.owner(holder), "eth0")
        if old:
            _age(pool / str(address))
    # ownership is recorded: .200's attachment names this containerd namespace (its
    # result lost), .206's another containerd; .205's none (another tool's): spared
    record = p.nets.cni.owner_path(p.nets.network, p.owner("b"), "eth0")
    owners.write(record, Owner(client.address, client.namespace, p.owner("b")))
    elsewhere = Owner("/elsewhere/containerd.sock", client.namespace, p.owner("w"))
    owners.write(p.nets.cni.owner_path(p.nets.network, p.owner("w"), "eth0"), elsewhere)
    p.garbage[str(pool / "10.231.212.200")] = netstate.IPAM
    p.freed.append(str(record))
    p.spared[str(pool / "10.231.212.205")] = netstate.IPAM
    p.kept += [str(pool / f"10.231.212.{last}") for last in (201, 202, 205, 206)]
    _masquerade(p.nets.network, p.owner("c"), "10.231.212.203/32")
    _masquerade(p.owner("o"), p.owner("c"), "10.231.212.204/32")  # another network's
    p.garbage[p.owner("c")] = netstate.NAT_RULES


def _recorded(p: Planted, address: str) -> None:
    """A group whose only record is in another containerd namespace: its namespace
    and its rule are not garbage."""
    p.records = Client.connect(address, namespace=f"ctrexec-test-dnet{p.tag}")
    containers.create(
        p.records, p.owner("r"), image="none", spec={"ociVersion": "1.0.2"},
        snapshotter="overlayfs", snapshot_key=p.owner("r"),
        runtime=containers.Runtime("io.containerd.runc.v2"),
        labels={lbl.MANAGED: "true", lbl.GROUP: p.owner("r")},
    )  # fmt: skip
    netns.create(p.ns("r"))
    _age(nsmarks.MARK_DIR / p.ns("r"))
    _masquerade(p.nets.network, p.owner("r"), "10.231.212.205/32")
    p.kept += [f"/run/netns/{p.ns('r')}", p.owner("r")]


def _clean(p: Planted) -> None:
    if p.records is not None:
        with contextlib.suppress(NotFound):
            containers.delete(p.records, p.owner("r"))
        p.records.delete_namespace()
        p.records.close()
    for proc in p.procs:
        proc.kill()
        proc.wait(timeout=30)
    for suffix in ("a", "f", "n", "p", "r", "u", "x", "y"):
        with contextlib.suppress(NotFound):
            netns.remove(p.ns(suffix))
    _sh("ip", "netns", "del", f"dnet{p.tag}o", check=False)
    for link in (f"dnv{p.tag}a", f"dnw{p.tag}a", f"dnv{p.tag}c", f"{p.bridge}x", p.bridge):
        _sh("ip", "link", "del", link, check=False)
    for network, owner in ((p.nets.network, "a"), (p.nets.network, "c"), (p.owner("o"), "c")):
        iptables.remove_attachment(network, p.owner(owner))
    iptables.remove_attachment(p.nets.network, p.owner("r"))


@pytest.fixture
def planted(tmp_path: Path, containerd_address: str, client: Client) -> Iterator[Planted]:
    tag = secrets.token_hex(2)
    env = dict(
        os.environ,
        CTREXEC_NETWORK=f"dnet{tag}",
        CTREXEC_BRIDGE=f"dnet{tag}",
        CTREXEC_SUBNET=SUBNET,
        CTREXEC_CNI_CACHE_DIR=str(tmp_path / "cni-cache"),
        CTREXEC_IPAM_DIR=str(tmp_path / "ipam"),
    )
    p = Planted(tag=tag, env=env, nets=settings.from_env(env))
    try:
        _namespaces(p, client)
        _group_gone(p, client)
        _links(p)
        _store(p, client)
        _recorded(p, containerd_address)
        yield p
    finally:
        _clean(p)


def _cli(p: Planted, address: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = cli_argv(args[0], address, *args[1:])
    return subprocess.run(argv, env=p.env, capture_output=True, text=True, timeout=120, check=False)


def _mine(p: Planted, rows: list[dict[str, object]], *, garbage: bool = True) -> dict[str, str]:
    """The rows about this test's objects: where (a rule's: its owner) -> kind; the
    garbage ones, or (``garbage=False``) those listed as spared."""
    out = {}
    for row in rows:
        where = str(row["Where"])
        if p.tag not in where or row.get("Garbage", True) is not garbage:
            continue
        if row["Kind"] == netstate.NAT_RULES:
            where = where.rsplit('id: "', 1)[1].rstrip('"')
        out[where] = str(row["Kind"])
    return out


def _there(p: Planted) -> dict[str, bool]:
    """Whether each planted object (garbage and kept alike) is still on the host."""
    rules = "\n".join(r.comment or "" for r in iptables.list_rules())
    out = {}
    for where in [*p.garbage, *p.freed, *p.kept]:
        if where.startswith("link "):
            out[where] = Path(f"/sys/class/net/{where[5:]}").exists()
        elif "/" in where and not where.startswith("/"):
            out[where] = Path(f"/sys/class/net/{where.split('/')[1]}").exists()
        elif where.startswith("/"):
            out[where] = os.path.lexists(where)
        else:
            out[where] = iptables.masq_comment(p.nets.network, where) in rules
    out["other network's rule"] = f'name: "{p.owner("o")}"' in rules
    return out


def _narrowed(tag: str) -> tuple[Check, ...]:
    def only_mine(check: Check) -> Check:
        def find(scope: Scope) -> list[Finding]:
            return [f for f in check.find(scope) if tag in f.where or tag in f.ref]

        return attrs.evolve(check, find=find)

    ours = (netside.NAMESPACES, netside.VETHS, netstate.RESULTS, netstate.RESERVATIONS,
            netstate.RULES)  # fmt: skip
    return tuple(only_mine(c) for c in ours)


def test_each_leftover_is_found_listed_removed_and_nothing_else(
    planted: Planted, containerd_address: str, client: Client
) -> None:
    p = planted
    before = _there(p)
    assert all(before.values()), before

    found = _cli(p, containerd_address, "doctor", "--json")
    assert found.returncode == 1, found.stderr
    assert _mine(p, json.loads(found.stdout)) == p.garbage
    assert _mine(p, json.loads(found.stdout), garbage=False) == p.spared
    assert owners.UNRECORDED in found.stdout
    table = _cli(p, containerd_address, "doctor")
    assert table.returncode == 1 and f"dnv{p.tag}a" in table.stdout

    dry = _cli(p, containerd_address, "gc", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    listed = json.loads(dry.stdout)
    assert listed["DryRun"] is True and _mine(p, listed["Removed"]) == p.garbage
    assert _there(p) == before

    report = checks.gc(Scope(client, networks=p.nets), checks=_narrowed(p.tag))
    assert report.failed == []
    assert {f.kind for f in report.removed} == set(p.garbage.values())
    after = _there(p)
    assert [w for w in [*p.garbage, *p.freed] if after[w]] == []
    assert all(after[w] for w in p.kept) and after["other network's rule"], after

    again = _cli(p, containerd_address, "doctor", "--json")
    assert _mine(p, json.loads(again.stdout or "[]")) == {}, again.stdout
    assert _mine(p, json.loads(again.stdout or "[]"), garbage=False) == p.spared
