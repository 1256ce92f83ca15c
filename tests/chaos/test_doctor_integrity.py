"""doctor names the integrity issue's damage with the command that repairs it, and the
command does: a lost pin, a stranger at the pin (a split), an attachment no longer
wired, an address held twice, a member deleted outside ctrexec.

One bridged group serves every case: each damage is repaired by the fix doctor names
before the next one is made, and doctor is clean again in between.
"""

from __future__ import annotations

import json
import os
import subprocess

from _chaoslib import wait_for
from _integrity import Bridged

from ctrexec.containerd import containers
from ctrexec.doctor import integrity
from ctrexec.errors import NotFound


def _sh(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr.strip()}"


def _damage(g: Bridged, address: str = "") -> list[dict[str, object]]:
    """doctor's damage rows about the test's groups (or ``address``)."""
    done = g.run("doctor", "--json")
    rows = json.loads(done.stdout or "[]")
    assert done.returncode in (0, 1), done.stderr
    return [
        r
        for r in rows
        if not r["Garbage"]
        and (g.name in f"{r['Where']} {r['What']}" or (address and r["Where"] == address))
    ]


def _only(g: Bridged, kind: str, address: str = "") -> dict[str, object]:
    """Wait until doctor names the damage, and return its one row."""
    seen: list[list[dict[str, object]]] = []

    def named() -> bool:
        seen.append(_damage(g, address))
        return [r["Kind"] for r in seen[-1]] == [kind]

    try:
        wait_for(named, f"doctor to name {kind}", timeout=30, interval=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; doctor said {seen[-1] if seen else '?'}") from None
    return seen[-1][0]


def _repair(g: Bridged, fix: str) -> None:
    """Run each command of a fix ("A, then B"); ``ctrexec`` ones with the test's flags."""
    for command in fix.split(", then "):
        words = command.split()
        if words[0] == "ip":
            _sh(*words)
            continue
        verb = " ".join(words[1:3]) if words[1] == "group" else words[1]
        args = words[3:] if words[1] == "group" else words[2:]
        args = [str(g.file) if a == "FILE" else a for a in args]
        done = g.run(verb, *args)
        assert done.returncode == 0, f"{command}: {done.stderr}"


def _clean(g: Bridged, address: str = "") -> None:
    left: list[list[dict[str, object]]] = []

    def clean() -> bool:
        left.append(_damage(g, address))
        return not left[-1]

    try:
        wait_for(clean, "doctor to be clean", timeout=60, interval=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; doctor said {left[-1] if left else '?'}") from None


def _delete_record(g: Bridged, container_id: str) -> None:
    """What ``ctr task delete --force; ctr container rm`` does."""

    def removed() -> bool:
        for argv in (("task", "delete", "--force"), ("container", "rm")):
            subprocess.run(["ctr", "-a", g.address, "-n", g.namespace, *argv, container_id],
                           capture_output=True, check=False, timeout=60)  # fmt: skip
        try:
            containers.get(g.client, container_id)
        except NotFound:
            return True
        return False

    wait_for(removed, f"ctr to remove {container_id}", timeout=60, interval=0.2)


def test_doctor_names_each_damage_and_its_fix_repairs_it(bridged: Bridged) -> None:
    g = bridged
    g.up()
    _clean(g)
    pin = os.path.basename(g.pin)

    _sh("umount", g.pin)  # the pin lost while the members run
    os.unlink(g.pin)
    row = _only(g, integrity.PIN_LOST)
    assert row["Fix"] == f"ctrexec start {g.member('cli')}"
    _repair(g, str(row["Fix"]))
    _clean(g)

    _sh("umount", g.pin)  # another tool's namespace at the lost pin: a split
    os.unlink(g.pin)
    _sh("ip", "netns", "add", pin)
    row = _only(g, integrity.SPLIT)
    assert str(row["Fix"]).startswith(f"ip netns del {pin}, then ctrexec start")
    _repair(g, str(row["Fix"]))
    _clean(g)

    _sh("ip", "-n", pin, "link", "del", "eth0")  # the attachment no longer wired
    row = _only(g, integrity.NOT_ATTACHED)
    assert str(row["Fix"]).startswith("ctrexec start")
    _repair(g, str(row["Fix"]))
    _clean(g)

    address = g.group_address()
    assert address is not None
    other, file = g.extra("x")  # a second holder of the group's address
    g.up(file)
    _sh("ip", "-n", f"cx-{other}", "addr", "add", f"{address}/24", "dev", "eth0")
    row = _only(g, integrity.ADDRESS_TWICE, address)
    assert row["Where"] == address and f"ctrexec group down {other}," in str(row["Fix"])
    _repair(g, str(row["Fix"]).replace("FILE of each", str(file)).split(" (")[0])
    _clean(g, address)

    _delete_record(g, g.member("cli"))  # a member deleted outside ctrexec
    row = _only(g, integrity.MISSING)
    assert row["Fix"] == "ctrexec group up FILE" and g.member("cli") in str(row["What"])
    _repair(g, str(row["Fix"]))
    _clean(g)

    g.wait_sound()
    g.down_clean()
