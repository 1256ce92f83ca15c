"""The /proc parsers, on texts with the traps they exist for and on this process."""

from __future__ import annotations

import os

from _zombie import zombie

from ctrexec import procfs


def test_a_command_name_with_parentheses_and_spaces() -> None:
    data = b"4242 (a) b (c)) S 17 4242 4242 0 -1 4194560 90 0 0 0 7 3 0 0 20 0 1 0\n"
    comm, fields = procfs.split_proc_stat(data) or ("", [])
    assert comm == "a) b (c)"
    assert fields[0] == "S"
    assert fields[1] == "17"  # the parent
    assert (fields[11], fields[12]) == ("7", "3")  # utime, stime


def test_a_text_without_fields_is_no_answer() -> None:
    assert procfs.split_proc_stat(b"") is None
    assert procfs.split_proc_stat(b"12 (x)") is None


def test_this_process() -> None:
    stat = procfs.proc_stat(os.getpid())
    assert stat is not None
    assert int(stat[1][1]) == os.getppid()
    assert procfs.process_alive(os.getpid())


def test_a_zombie_and_a_reaped_child_are_not_alive() -> None:
    with zombie() as pid:
        stat = procfs.proc_stat(pid)
        assert stat is not None and stat[1][0] == "Z"
        assert not procfs.process_alive(pid)
    assert procfs.proc_stat(pid) is None
    assert procfs.proc_cgroups(pid) is None
    assert not procfs.process_alive(pid)


def test_cgroup_lines_of_v1_v2_and_hybrid_hosts() -> None:
    text = (
        "12:pids:/ctrexec/ns/a\n"
        "4:cpu,cpuacct:/ctrexec/ns/a\n"
        "1:name=systemd:/init.scope\n"
        "0::/system.slice/x.service\n"
    )
    assert procfs.split_proc_cgroup(text) == {
        "pids": "/ctrexec/ns/a",
        "cpu": "/ctrexec/ns/a",
        "cpuacct": "/ctrexec/ns/a",
        "name=systemd": "/init.scope",
        "": "/system.slice/x.service",
    }


def test_this_process_has_a_cgroup() -> None:
    cgroups = procfs.proc_cgroups(os.getpid())
    assert cgroups
    assert all(path.startswith("/") for path in cgroups.values())
