"""The default seccomp profile: valid, complete for ordinary programs, closed otherwise."""

from __future__ import annotations

import json
from collections import Counter
from importlib import resources
from typing import Any

import pytest

from ctrexec.errors import InvalidArgument
from ctrexec.oci import (
    ALL_CAPABILITIES,
    DEFAULT_CAPABILITIES,
    build_spec,
    load_default_profile,
    validate_profile,
    with_default_seccomp,
    with_seccomp,
)

pytestmark = pytest.mark.unit

CORE = {
    "read", "write", "openat", "close", "execve", "exit_group", "exit", "clone", "mmap",
    "munmap", "mprotect", "brk", "futex", "socket", "connect", "bind", "listen", "accept4",
    "accept", "epoll_wait", "epoll_pwait", "epoll_create1", "epoll_ctl", "statx", "newfstatat",
    "fstat", "getdents64", "rt_sigaction", "rt_sigprocmask", "wait4", "pipe2", "dup2", "fcntl",
    "ioctl", "getpid", "kill", "nanosleep", "clock_gettime", "poll", "select", "sendto",
    "recvfrom", "setsockopt", "getrandom", "prlimit64", "set_tid_address", "set_robust_list",
    "rseq", "faccessat2", "close_range", "execveat", "openat2", "arch_prctl", "uname",
    "setuid", "setgid", "setgroups", "capget", "capset", "prctl", "vfork", "fork",
}  # fmt: skip

DANGEROUS = {
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "mount", "umount2", "umount", "pivot_root", "reboot", "swapon", "swapoff", "ptrace",
    "unshare", "setns", "bpf", "perf_event_open", "keyctl", "add_key", "request_key",
    "userfaultfd", "open_by_handle_at", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "acct", "settimeofday", "clock_settime", "syslog", "iopl", "ioperm",
    "process_vm_readv", "process_vm_writev", "fsopen", "fsmount", "move_mount", "open_tree",
    "modify_ldt", "uselib", "vm86", "lookup_dcookie", "quotactl", "_sysctl",
}  # fmt: skip


def _allowed(profile: dict[str, Any], *, unconditional: bool = True) -> set[str]:
    return {
        name
        for rule in profile["syscalls"]
        if rule["action"] == "SCMP_ACT_ALLOW" and (not unconditional or "args" not in rule)
        for name in rule["names"]
    }


def test_data_file_is_valid_json_with_required_keys() -> None:
    text = resources.files("ctrexec.oci").joinpath("seccomp_default.json").read_text()
    data = json.loads(text)
    assert {"defaultAction", "defaultErrnoRet", "architectures", "rules"} <= set(data)
    for rule in data["rules"]:
        assert set(rule) <= {"comment", "names", "action", "args", "errnoRet", "caps",
                             "unlessCaps", "arches"}  # fmt: skip
        assert rule["names"] == sorted(rule["names"])
        assert rule["comment"]


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_profile_shape(arch: str) -> None:
    profile = load_default_profile(arch=arch, capabilities=DEFAULT_CAPABILITIES)
    validate_profile(profile)
    assert set(profile) == {"defaultAction", "defaultErrnoRet", "architectures", "syscalls"}
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"
    assert profile["defaultErrnoRet"] == 1
    assert json.loads(json.dumps(profile)) == profile


def test_architectures() -> None:
    assert load_default_profile(arch="x86_64")["architectures"] == [
        "SCMP_ARCH_X86_64",
        "SCMP_ARCH_X86",
        "SCMP_ARCH_X32",
    ]
    assert load_default_profile(arch="arm64")["architectures"] == [
        "SCMP_ARCH_AARCH64",
        "SCMP_ARCH_ARM",
    ]
    # An unknown machine gets native-only filtering and the portable rules.
    other = load_default_profile(arch="riscv64")
    assert other["architectures"] == []
    assert "read" in _allowed(other)
    assert "set_tls" not in _allowed(other)
    assert "set_tls" in _allowed(load_default_profile(arch="aarch64"))


@pytest.mark.parametrize(
    "caps", [(), DEFAULT_CAPABILITIES, ALL_CAPABILITIES], ids=["none", "default", "all"]
)
def test_no_duplicate_syscalls(caps: tuple[str, ...]) -> None:
    profile = load_default_profile(arch="x86_64", capabilities=caps)
    plain = Counter(n for r in profile["syscalls"] if "args" not in r for n in r["names"])
    assert [n for n, count in plain.items() if count > 1] == []
    # Argument-filtered rules may repeat a name, but never one with a plain rule.
    filtered = {n for r in profile["syscalls"] if "args" in r for n in r["names"]}
    assert not filtered & set(plain)


def test_core_syscalls_allowed() -> None:
    allowed = _allowed(load_default_profile(arch="x86_64", capabilities=DEFAULT_CAPABILITIES))
    allowed_any = allowed | {"clone"}  # clone is allowed with an argument filter
    assert CORE - allowed_any == set()


def test_dangerous_syscalls_denied_by_default() -> None:
    profile = load_default_profile(arch="x86_64", capabilities=DEFAULT_CAPABILITIES)
    assert DANGEROUS & _allowed(profile, unconditional=False) == set()


def test_clone_is_filtered_and_clone3_returns_enosys() -> None:
    profile = load_default_profile(arch="x86_64", capabilities=DEFAULT_CAPABILITIES)
    [clone] = [r for r in profile["syscalls"] if r["names"] == ["clone"]]
    assert clone["action"] == "SCMP_ACT_ALLOW"
    [arg] = clone["args"]
    assert arg["op"] == "SCMP_CMP_MASKED_EQ"
    assert arg["value"] == 0x7E020000  # every CLONE_NEW* flag
    assert arg["valueTwo"] == 0
    [clone3] = [r for r in profile["syscalls"] if r["names"] == ["clone3"]]
    assert clone3 == {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38}


def test_personality_is_limited_to_safe_values() -> None:
    profile = load_default_profile(arch="x86_64")
    rules = [r for r in profile["syscalls"] if "personality" in r["names"]]
    assert all(r["args"][0]["op"] == "SCMP_CMP_EQ" for r in rules)
    assert {r["args"][0]["value"] for r in rules} == {0, 8, 0x20000, 0x20008, 0xFFFFFFFF}


def test_sys_admin_unlocks_namespaces_and_mounts() -> None:
    profile = load_default_profile(arch="x86_64", capabilities=["CAP_SYS_ADMIN"])
    allowed = _allowed(profile)
    assert {"mount", "umount2", "unshare", "setns", "clone", "clone3", "bpf"} <= allowed
    assert not [r for r in profile["syscalls"] if r["action"] == "SCMP_ACT_ERRNO"]
    # Still never allowed, whatever the capabilities: privileged drops the profile instead.
    everything = _allowed(load_default_profile(arch="x86_64", capabilities=ALL_CAPABILITIES))
    assert {"kexec_load", "swapon", "keyctl", "userfaultfd", "io_uring_setup"} & everything == set()


def test_with_seccomp_sets_and_removes() -> None:
    custom = {
        "defaultAction": "SCMP_ACT_ERRNO",
        "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW"}],
    }
    spec = build_spec(with_seccomp(custom))
    assert spec["linux"]["seccomp"] == custom
    assert spec["linux"]["seccomp"] is not custom
    assert "seccomp" not in build_spec(with_seccomp(None))["linux"]


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"defaultAction": "ALLOW"},
        {"defaultAction": "SCMP_ACT_ALLOW", "architectures": ["x86_64"]},
        {
            "defaultAction": "SCMP_ACT_ALLOW",
            "syscalls": [{"names": [], "action": "SCMP_ACT_ALLOW"}],
        },
        {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "nope"}]},
        {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": "read"},
    ],
)
def test_with_seccomp_rejects_malformed(bad: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument):
        with_seccomp(bad)


def test_with_default_seccomp_restores_after_removal() -> None:
    spec = build_spec(with_seccomp(None), with_default_seccomp(arch="x86_64"))
    assert spec["linux"]["seccomp"] == load_default_profile(
        arch="x86_64", capabilities=DEFAULT_CAPABILITIES
    )


def test_preload_reads_the_default_profile_so_each_start_finds_it_read() -> None:
    """What a forking process calls before its forks: the profile's file is read once."""
    from ctrexec import preload
    from ctrexec.oci import seccomp as seccomp_module

    seccomp_module._profile_data.cache_clear()
    preload()
    assert seccomp_module._profile_data.cache_info().currsize == 1
    misses = seccomp_module._profile_data.cache_info().misses
    seccomp_module.load_default_profile()
    assert seccomp_module._profile_data.cache_info().misses == misses
