"""Issue 20, scenarios 2 and 3: the group's veth or its bridge is deleted under it.

Before: deleting the host end of the veth (or eth0 in cx-NAME) killed the published
port with nothing noticing, and ``group up`` re-wired it with a new address; a deleted
bridge was never repaired (a second group made a new bridge, the first group's veth
stayed off it, and ``network prune`` then refused: "still has interfaces attached").
Now ctrexec's health check (:mod:`ctrexec.net.health`) says "not attached", and
``group up`` re-attaches the group with the address it had.

Issue 36, item 5: the re-attached veth has a new MAC, and the host's neighbour entry on
the bridge stayed REACHABLE on the old one, so the published port was dead for 8-35 s
after the repair had exited 0. Now the attach announces the address and checks that the
host reaches it before it reports success. And a sound group whose CNI cache was wiped
is not called "not attached" (doctor's fix re-wired it, an outage for nothing).
"""

from __future__ import annotations

import http.client
import json
import re
import subprocess
from collections.abc import Callable

import pytest
from _chaoslib import wait_for
from _integrity import Bridged, _get, hold_stale_entries, host_neighbour

from ctrexec import labels as lbl
from ctrexec.containerd import containers
from ctrexec.net import health, settings


def _ip(*argv: str) -> str:
    done = subprocess.run(["ip", *argv], capture_output=True, text=True, check=False, timeout=30)
    assert done.returncode == 0, f"ip {' '.join(argv)}: {done.stderr.strip()}"
    return done.stdout


def host_end(g: Bridged) -> str:
    """The host-side name of the veth whose other end is eth0 in the group's namespace."""
    shown = _ip("-n", f"cx-{g.name}", "-o", "link", "show", "dev", "eth0")
    found = re.search(r"eth0@if(\d+):", shown)
    assert found is not None, shown
    for line in _ip("-o", "link", "show").splitlines():
        index, name, _ = line.split(":", 2)
        if index.strip() == found.group(1):
            return name.strip().split("@", 1)[0]
    raise AssertionError(f"no host link has index {found.group(1)}")


def ctrexec_says(g: Bridged) -> list[str]:
    """What ctrexec's own health check says of the group's attachment."""
    nets = settings.from_env(g.env)
    return health.problems(nets, g.name, g.pin, "bridge")


def address_labels(g: Bridged) -> set[str]:
    found = containers.list_containers(g.client, containers.label_filter(lbl.GROUP, g.name))
    return {c.labels.get(lbl.ADDRESSES, "") for c in found}


def port_dead(g: Bridged) -> bool:
    """Whether the published port fails: what the damage does to the group's users. (The
    fixture's problems() cannot be asked while the bridge is gone: its arping probe
    needs the bridge to attach to.)"""
    conn = http.client.HTTPConnection("127.0.0.1", g.host_port, timeout=3)
    try:
        conn.request("GET", "/")
        return conn.getresponse().status != 200
    except OSError:
        return True
    finally:
        conn.close()


def _broken(g: Bridged) -> None:
    """Wait (bounded) for the damage to show, to the group's users and in ctrexec's words."""
    wait_for(lambda: port_dead(g), "the published port to fail", timeout=30, interval=0.5)
    said = ctrexec_says(g)
    assert said and all(p.startswith("not attached: ") for p in said), said
    assert all("run `ctrexec group up FILE`" in p for p in said), said


def _repaired_with(g: Bridged, address: str) -> None:
    g.up()
    g.wait_sound()
    assert g.group_address() == address
    assert address_labels(g) == {address}
    assert ctrexec_says(g) == []


def test_a_deleted_host_veth_is_reattached_with_its_address(bridged: Bridged) -> None:
    g = bridged
    g.up()
    g.wait_sound()
    address = g.group_address()
    assert address is not None
    _ip("link", "del", host_end(g))
    _broken(g)
    _repaired_with(g, address)
    g.down_clean()


def test_a_deleted_eth0_is_reattached_with_its_address(bridged: Bridged) -> None:
    g = bridged
    g.up()
    g.wait_sound()
    address = g.group_address()
    assert address is not None
    _ip("-n", f"cx-{g.name}", "link", "del", "eth0")
    _broken(g)
    assert any("eth0 is gone from" in p for p in ctrexec_says(g))
    _repaired_with(g, address)
    g.down_clean()


def test_a_deleted_bridge_is_rejoined_with_the_address_and_pruned(bridged: Bridged) -> None:
    g = bridged
    g.up()
    g.wait_sound()
    address = g.group_address()
    assert address is not None
    old_end = host_end(g)
    _ip("link", "del", g.bridge)
    _broken(g)
    _, second = g.extra("b")
    g.up(second)  # its ADD makes the bridge again; the first group's veth is not on it
    assert any("is not on bridge" in p for p in ctrexec_says(g)), ctrexec_says(g)
    _repaired_with(g, address)
    assert host_end(g) != old_end
    assert old_end not in _ip("-o", "link", "show")  # the DEL took the detached veth
    g.down_clean()  # both groups down, then network prune: nothing left on the bridge


def test_an_address_taken_meanwhile_gives_a_new_one_and_the_files_follow(
    bridged: Bridged,
) -> None:
    """host-local refuses the address (another owner holds it now): the group gets a
    fresh one, says so, and every member's label and /etc/hosts name the new one."""
    g = bridged
    g.up()
    g.wait_sound()
    address = g.group_address()
    assert address is not None
    _ip("link", "del", host_end(g))
    _broken(g)
    held = next(g.ipam.rglob(address))
    held.write_text("someone-else\neth0")  # the DEL releases only the group's own
    try:
        up = g.run("group up", str(g.file))
        assert up.returncode == 0, up.stderr
        assert f"could not get its address {address} back" in up.stderr
        g.wait_sound()
        new = g.group_address()
        assert new is not None and new != address
        assert address_labels(g) == {new}
        for task in ("srv", "cli"):
            hosts = g.run("exec", g.member(task), "cat", "/etc/hosts").stdout
            assert new in hosts.split() and address not in hosts.split(), hosts
    finally:
        held.unlink(missing_ok=True)
    g.down_clean()


def test_start_of_a_member_reattaches_it_and_inspect_and_group_ps_said_so(
    bridged: Bridged,
) -> None:
    """No group file at hand: ``inspect`` and ``group ps`` name the damage and the
    repair, and ``ctrexec start`` of a member (running, a no-op for its task, as
    docker's) attaches the group again with its address."""
    g = bridged
    g.up()
    g.wait_sound()
    address = g.group_address()
    assert address is not None
    _ip("link", "del", host_end(g))
    _broken(g)
    member = g.member("cli")
    shown = g.run("inspect", "--format", "{{.State.Error}}", member)
    assert shown.returncode == 0, shown.stderr
    assert "not attached" in shown.stdout and f"ctrexec start {member}" in shown.stdout
    listed = g.run("group ps", g.name)
    assert listed.returncode == 0, listed.stderr
    assert "(not attached)" in listed.stdout, listed.stdout
    started = g.run("start", member)
    assert started.returncode == 0, started.stderr
    g.wait_sound()
    assert g.group_address() == address
    assert ctrexec_says(g) == []
    assert "not attached" not in g.run("group ps", g.name).stdout
    g.down_clean()


def _delete_eth0(g: Bridged) -> None:
    _ip("-n", f"cx-{g.name}", "link", "del", "eth0")


def _delete_host_end(g: Bridged) -> None:
    _ip("link", "del", host_end(g))


@pytest.mark.parametrize(
    ("damage", "repair"),
    [(_delete_eth0, "start"), (_delete_host_end, "start"), (_delete_host_end, "group up")],
    ids=["eth0-deleted-start", "veth-deleted-start", "veth-deleted-group-up"],
)
def test_after_a_rewire_the_host_sends_to_the_new_mac_and_the_port_answers(
    bridged: Bridged, damage: Callable[[Bridged], None], repair: str
) -> None:
    """The re-wire's command exits 0; then (bounded waits, no timing asserted) the host's
    neighbour entry for the group's address is on the new eth0's MAC and the published
    port answers. A second group keeps the bridge up (a bridge that loses its last port
    loses its carrier, and the host drops its entries on it, hiding the defect)."""
    g = bridged
    g.up()
    _, second = g.extra("b")
    g.up(second)
    g.wait_sound()
    hold_stale_entries(g)
    address = g.group_address()
    assert address is not None
    _, old_mac = g.eth0(g.member_pids()["srv"])
    assert old_mac is not None
    wait_for(lambda: _get(g.host_port) == "ok" and host_neighbour(g, address) == old_mac,
             "the host to reach the group at its MAC", timeout=30, interval=0.5)  # fmt: skip
    damage(g)
    done = g.run(repair, g.member("srv") if repair == "start" else str(g.file))
    assert done.returncode == 0, done.stderr
    _, new_mac = g.eth0(g.member_pids()["srv"])
    assert new_mac is not None and new_mac != old_mac
    assert g.group_address() == address
    seen: list[str | None] = []
    try:
        wait_for(lambda: seen.append(host_neighbour(g, address)) or seen[-1] == new_mac,
                 "the host's entry on the new MAC", timeout=60, interval=0.5)  # fmt: skip
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the entry is on {seen[-1]}, eth0 has {new_mac}") from None
    wait_for(lambda: _get(g.host_port) == "ok", "the published port", timeout=60, interval=0.2)
    g.wait_sound()
    g.down_clean()


def test_a_sound_group_with_its_cni_cache_wiped_is_not_called_damaged(bridged: Bridged) -> None:
    """The cache says what an ADD made; the kernel says what is there. doctor, ps and
    ctrexec's own check judge from the kernel: nothing to repair, nothing re-wired."""
    g = bridged
    g.up()
    g.wait_sound()
    cached = sorted(g.cache.rglob("*.json"))
    assert cached, "the group has a CNI result to wipe"
    for path in cached:
        path.unlink()
    assert ctrexec_says(g) == []
    done = g.run("doctor", "--json")
    assert done.returncode in (0, 1), done.stderr
    rows = [r for r in json.loads(done.stdout or "[]") if g.name in f"{r['Where']} {r['What']}"]
    assert rows == [], rows
    listed = g.run("group ps", g.name)
    assert listed.returncode == 0, listed.stderr
    assert "not attached" not in listed.stdout, listed.stdout
    g.wait_sound()
    g.down_clean()
