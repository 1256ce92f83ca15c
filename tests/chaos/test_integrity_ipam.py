"""Issue 20, scenarios 4 and 5: the IPAM directory or the CNI cache is wiped under a
running group, and duplicate address detection refuses a holder ctrexec cannot see.

Before: after an IPAM wipe host-local started again from the bottom and gave a new
group a live group's address (two MACs answered arping); after a cache wipe the
stale DNAT rules came first, ``group down`` failed on a busy chain, and a second one
leaked the chains and POSTROUTING rules. Each test damages the bridged group of
tests/chaos/_integrity.py, repairs as an operator would, and checks the kernel.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from _integrity import SUBNET, Bridged

#: Extra groups brought up after the IPAM wipe (the issue saw the ninth collide).
EXTRA_GROUPS = 9


def _sh(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)


def pinned_address(group: str) -> str | None:
    """The one IPv4 address on eth0 of a group's pinned namespace; None unless one."""
    out = _sh("ip", "-n", f"cx-{group}", "-4", "-o", "addr", "show", "dev", "eth0")
    ips = [line.split()[3].split("/")[0] for line in out.stdout.splitlines()]
    return ips[0] if len(ips) == 1 else None


def our_rules(*names: str, subnet: bool = True) -> list[str]:
    """The rules that name one of the groups (or, with ``subnet``, the test's subnet)."""
    prefix = SUBNET.rsplit(".", 2)[0] + "."
    return [
        r
        for r in _sh("iptables-save").stdout.splitlines()
        if (subnet and prefix in r) or any(f'id: "{n}"' in r for n in names)
    ]


@contextlib.contextmanager
def planted(bridge: str, cidr: str) -> Iterator[str]:
    """A namespace of the test's own (not a ctrexec group's) holding ``cidr`` on the
    bridge, as a hand-made container would; yields its MAC."""
    ns, host, peer = (f"cxq{secrets.token_hex(3)}{s}" for s in ("", "a", "b"))
    try:
        for argv in (
            ("ip", "netns", "add", ns),
            ("ip", "link", "add", host, "type", "veth", "peer", "name", peer),
            ("ip", "link", "set", peer, "netns", ns),
            ("ip", "link", "set", host, "master", bridge, "up"),
            ("ip", "-n", ns, "addr", "add", cidr, "dev", peer),
            ("ip", "-n", ns, "link", "set", peer, "up"),
        ):
            done = _sh(*argv)
            assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr.strip()}"
        link = _sh("ip", "-n", ns, "-o", "link", "show", "dev", peer).stdout
        found = re.search(r"link/ether (\S+)", link)
        assert found, link
        yield found.group(1).lower()
    finally:
        _sh("ip", "link", "del", host)
        _sh("ip", "netns", "del", ns)


def test_a_wiped_ipam_dir_never_hands_out_a_live_address(bridged: Bridged) -> None:
    g = bridged
    g.up()
    g.wait_sound()
    first = g.group_address()
    assert first is not None
    shutil.rmtree(g.ipam)
    extras = [g.extra(f"x{i}") for i in range(EXTRA_GROUPS)]
    for _, file in extras:
        g.up(file)
    holders = {first: [g.name]}
    for name, _ in extras:
        address = pinned_address(name)
        assert address is not None, f"group {name} has no single address"
        holders.setdefault(address, []).append(name)
    assert {a: n for a, n in holders.items() if len(n) > 1} == {}
    # The live group's address is reserved again, naming it, as host-local writes it.
    store = g.ipam / g.bridge
    assert (store / first).read_bytes() == f"{g.name}\r\neth0".encode()
    g.wait_sound()  # arping gets one MAC for the first group's address
    g.down_clean()


def test_a_wiped_cni_cache_leaves_no_stale_rule_and_down_is_complete(bridged: Bridged) -> None:
    g = bridged
    g.up()
    g.wait_sound()
    before = g.group_address()
    shutil.rmtree(g.cache)
    g.up()  # what an operator runs; the port must answer through the new rules
    g.wait_sound()
    address = g.group_address()
    assert address is not None
    assert address == before  # asked back from the namespace's eth0 before the DEL
    stale = [r for r in our_rules(g.name) if "--to-destination" in r and address not in r]
    assert stale == []
    # Without the cache, the live group's rules still say its host port is taken.
    shutil.rmtree(g.cache)
    name = f"{g.name}p"
    other = g.tmp / f"{name}.toml"
    other.write_text(g.file.read_text().replace(f'name = "{g.name}"', f'name = "{name}"', 1))
    g.extras.append(name)  # taken down after the test should it come up
    taken = g.run("group up", str(other))
    assert taken.returncode == 125, taken.stderr
    assert f"is already mapped by group {g.name}" in taken.stderr
    assert not Path(f"/run/netns/cx-{name}").exists()
    g.extras.remove(name)
    # and down must not need the cache either
    g.down_clean()
    assert our_rules(g.name) == []


def test_a_planted_holder_is_refused_by_duplicate_address_detection(bridged: Bridged) -> None:
    g = bridged
    g.up()
    g.wait_sound()
    first = g.group_address()
    assert first is not None
    # host-local hands out the address after the last one it reserved.
    after = Path(g.ipam / g.bridge / "last_reserved_ip.0").read_text().strip()
    head, last = after.rsplit(".", 1)
    target = f"{head}.{int(last) + 1}"
    name, file = g.extra("dup")
    with planted(g.bridge, f"{target}/24") as mac:
        done = g.run("group up", str(file))
        assert done.returncode == 125, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert (
            f"address conflict: {target} given to group {name} is already held by MAC {mac}"
            in lines[0]
        )
        assert "Traceback" not in done.stderr
        # Nothing of the refused group is left: namespace, cache, reservation, rules.
        assert not Path(f"/run/netns/cx-{name}").exists()
        assert sorted(p.name for p in g.cache.rglob("*.json") if name in p.name) == []
        store = g.ipam / g.bridge
        assert [p.name for p in store.glob("10.*") if name in p.read_text()] == []
        assert our_rules(name, subnet=False) == []
        g.extras.remove(name)  # it never came up: nothing to take down
    g.wait_sound()
    g.down_clean()
