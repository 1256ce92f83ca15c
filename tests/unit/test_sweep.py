"""What the session-start sweep (tests/_sweep.py) takes for a killed session's leftover."""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import re
import time
from pathlib import Path

import _sweep
import pytest
from _sweep import (
    MIN_AGE,
    TEST_RANGE,
    dead_dirs,
    doomed,
    parse_rules,
    remove_cgroups,
    remove_runc_state,
)

from ctrexec import _linux
from ctrexec.testing import OWNER_LOCK

TESTS = Path(__file__).resolve().parent.parent

# iptables-save -t nat on this machine after a CI run was killed in the middle of
# test_cli_run_network (container pub-made published 8080 on network cxtre548), with
# one other container's rules on ctrexec's default network beside them.
SAVED = r"""*nat
:PREROUTING ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:CNI-1f6cea4ed0deacfe9069df1a - [0:0]
:CNI-DN-1f6cea4ed0deacfe9069d - [0:0]
:CNI-HOSTPORT-DNAT - [0:0]
:CNI-aaaa - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A POSTROUTING -m comment --comment "CNI portfwd requiring masquerade" -j CNI-HOSTPORT-MASQ
-A POSTROUTING -s 10.231.188.2/32 -m comment --comment "name: \"cxtre548\" id: \"pub-made\"" -j CNI-1f6cea4ed0deacfe9069df1a
-A POSTROUTING -s 10.89.0.7/32 -m comment --comment "name: \"ctrexec\" id: \"web\"" -j CNI-aaaa
-A CNI-1f6cea4ed0deacfe9069df1a -d 10.231.188.0/24 -m comment --comment "name: \"cxtre548\" id: \"pub-made\"" -j ACCEPT
-A CNI-1f6cea4ed0deacfe9069df1a ! -d 224.0.0.0/4 -m comment --comment "name: \"cxtre548\" id: \"pub-made\"" -j MASQUERADE
-A CNI-DN-1f6cea4ed0deacfe9069d -s 10.231.188.0/24 -p tcp -m tcp --dport 54249 -j CNI-HOSTPORT-SETMARK
-A CNI-DN-1f6cea4ed0deacfe9069d -s 127.0.0.1/32 -p tcp -m tcp --dport 54249 -j CNI-HOSTPORT-SETMARK
-A CNI-DN-1f6cea4ed0deacfe9069d -p tcp -m tcp --dport 54249 -j DNAT --to-destination 10.231.188.2:8080
-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \"cxtre548\" id: \"pub-made\"" -m multiport --dports 54249 -j CNI-DN-1f6cea4ed0deacfe9069d
-A CNI-HOSTPORT-MASQ -m mark --mark 0x2000/0x2000 -j MASQUERADE
-A CNI-aaaa -d 10.89.0.0/24 -m comment --comment "name: \"ctrexec\" id: \"web\"" -j ACCEPT
COMMIT
"""


def test_a_killed_tests_rules_and_its_own_chains_are_doomed_and_nothing_else() -> None:
    picked, chains = doomed(parse_rules("nat", SAVED))
    assert {r.owner for r in picked} == {("cxtre548", "pub-made"), None}
    assert all(r.chain != "CNI-aaaa" and "10.89." not in r.line for r in picked)
    assert [r.chain for r in picked if r.owner is None] == ["CNI-DN-1f6cea4ed0deacfe9069d"] * 2
    assert chains == ["CNI-1f6cea4ed0deacfe9069df1a", "CNI-DN-1f6cea4ed0deacfe9069d"]
    # CNI's shared chains stay, even when a doomed rule is all they hold
    assert not any(c.startswith("CNI-HOSTPORT-") for c in chains)
    # the quoted comment comes back as iptables needs it for -D
    jump = next(r for r in picked if r.chain == "POSTROUTING")
    assert jump.spec[jump.spec.index("--comment") + 1] == 'name: "cxtre548" id: "pub-made"'


def test_a_chain_another_rule_also_jumps_to_stays() -> None:
    shared = SAVED.replace(
        "COMMIT", "-A POSTROUTING -s 10.89.0.9/32 -j CNI-1f6cea4ed0deacfe9069df1a\nCOMMIT"
    )
    _, chains = doomed(parse_rules("nat", shared))
    assert chains == ["CNI-DN-1f6cea4ed0deacfe9069d"]


def test_a_narrower_range_picks_only_its_own() -> None:
    picked, chains = doomed(parse_rules("nat", SAVED), ipaddress.ip_network("10.231.5.0/24"))
    assert (picked, chains) == ([], [])


def test_every_subnet_a_root_test_uses_is_in_the_reserved_range() -> None:
    found = set()
    for folder in ("integration", "chaos", "nomad"):
        for path in (TESTS / folder).rglob("*.py"):
            found.update(re.findall(r"\b(\d+\.\d+\.\d+\.\d+)/\d+\b", path.read_text()))
    assert found, "no subnet literal found: the pattern no longer matches the tests"
    rfc1918 = [ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")]
    private = [a for a in found if any(ipaddress.ip_address(a) in n for n in rfc1918)]
    outside = sorted(a for a in private if ipaddress.ip_address(a) not in TEST_RANGE)
    assert outside == [], "a test network outside tests/_sweep.py's TEST_RANGE"


def test_a_directory_is_dead_when_its_owner_lock_is_free(tmp_path: Path) -> None:
    now = time.time()
    names = ("cxd-held", "cxd-free", "cxd-old", "cxd-young", "cxd-nostate", "other-old")
    for name in names:
        (tmp_path / name / "state").mkdir(parents=True)
    (tmp_path / "cxd-nostate" / "state").rmdir()
    # no lock (an older harness's): a pid that runs, but is not its containerd (recycled)
    (tmp_path / "cxd-old" / "state" / "containerd.pid").write_text(f"{os.getpid()}\n")
    for name in ("cxd-old", "cxd-nostate", "other-old", "cxd-held"):
        os.utime(tmp_path / name, (now - MIN_AGE - 5, now - MIN_AGE - 5))
    (tmp_path / "cxd-free" / OWNER_LOCK).touch()  # its maker is gone: young, yet dead
    held = os.open(tmp_path / "cxd-held" / OWNER_LOCK, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)  # a live run whose containerd died: not dead
        assert dead_dirs(tmp_path, now=now) == [tmp_path / "cxd-free", tmp_path / "cxd-old"]
    finally:
        os.close(held)
    assert tmp_path / "cxd-held" in dead_dirs(tmp_path, now=now)


def _runc_state(root: Path, namespace: str, cid: str, pid: int, start: int) -> Path:
    where = root / namespace / cid
    where.mkdir(parents=True)
    state = {"id": cid, "init_process_pid": pid, "init_process_start": start}
    (where / "state.json").write_text(json.dumps(state))
    return where


def _start_time(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
    return int(fields[19])


def test_runc_state_of_a_dead_init_goes_and_a_live_ones_stays(tmp_path: Path) -> None:
    """A killed session's runc state (its init and its shims dead) is in the way of the
    next session's create of the same id; a live container's is never touched."""
    ns = f"cxt-unit-{os.getpid()}"
    dead_pid = 2**22 + 7  # above any pid_max this runs with: no such process
    dead = _runc_state(tmp_path, ns, "dead", dead_pid, 1)
    me = os.getpid()
    live = _runc_state(tmp_path, ns, "live", me, _start_time(me))
    reused = _runc_state(tmp_path, ns, "reused", me, _start_time(me) + 1)  # pid reused
    unreadable = tmp_path / ns / "unreadable"
    unreadable.mkdir()
    gone = remove_runc_state(ns, served=False, root=tmp_path)
    assert sorted(gone) == [f"runc state {ns}/dead", f"runc state {ns}/reused"]
    assert not dead.exists() and not reused.exists()
    assert live.exists() and unreadable.exists()


def test_another_namespaces_runc_state_is_not_looked_at(tmp_path: Path) -> None:
    ns = f"cxt-unit-{os.getpid()}"
    other = _runc_state(tmp_path, ns + "-other", "dead", 2**22 + 7, 1)
    assert remove_runc_state(ns, served=False, root=tmp_path) == []
    assert other.exists()


def _tree(root: Path, *cgroups: str) -> None:
    for cgroup in cgroups:
        (root / cgroup).mkdir(parents=True)


def test_a_killed_runs_empty_cgroups_go_a_busy_one_and_other_namespaces_stay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CI kills a stopped session's tasks with their shims: their cgroups stay, empty,
    and the next session's audits find them (CI run of stop 44, 11 errors on 1.7)."""
    monkeypatch.setattr(_linux, "CGROUP_ROOT", tmp_path)
    monkeypatch.setattr(_sweep, "processes", dict)
    _tree(tmp_path, "memory/ctrexec/ns/a", "pids/ctrexec/ns/a", "pids/ctrexec/ns/b/child")
    _tree(tmp_path, "memory/ctrexec/other/c")
    assert not _sweep.shim_serves("ns")
    assert remove_cgroups("ns", served=False) == ["cgroup /ctrexec/ns/a"]
    assert not (tmp_path / "memory/ctrexec/ns").exists()  # its parent, empty, went too
    assert (tmp_path / "pids/ctrexec/ns/b/child").is_dir()  # not empty: the kernel's rule
    assert (tmp_path / "memory/ctrexec/other/c").is_dir()
    assert (tmp_path / "memory/ctrexec").is_dir()  # the top, every namespace's, stays


def test_no_cgroup_is_touched_while_a_shim_of_the_namespace_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_linux, "CGROUP_ROOT", tmp_path)
    shim = [b"/usr/bin/containerd-shim-runc-v2", b"-namespace", b"ns", b"-id", b"a"]
    monkeypatch.setattr(_sweep, "processes", lambda: {4242: (1, shim)})
    _tree(tmp_path, "memory/ctrexec/ns/a")
    assert _sweep.shim_serves("ns")
    assert remove_cgroups("ns", served=True) == []
    assert (tmp_path / "memory/ctrexec/ns/a").is_dir()
