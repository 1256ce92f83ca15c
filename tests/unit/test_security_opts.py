"""--security-opt: docker's spellings and errors, and a docker-format seccomp profile."""

from __future__ import annotations

from typing import Any

import pytest

from ctrexec.errors import InvalidArgument
from ctrexec.oci import build_spec
from ctrexec.oci.secopts import (
    SecurityOpts,
    oci_profile,
    parse_security_opts,
    with_seccomp_profile,
)


@pytest.mark.parametrize(
    ("opts", "parsed"),
    [
        (["no-new-privileges"], SecurityOpts(no_new_privileges=True)),
        (["no-new-privileges=false"], SecurityOpts(no_new_privileges=False)),
        (["no-new-privileges:true"], SecurityOpts(no_new_privileges=True)),
        (["seccomp=unconfined"], SecurityOpts(seccomp="unconfined")),
        (["seccomp=/p.json", "no-new-privileges=0"], SecurityOpts(False, "/p.json")),
    ],
)
def test_parse(opts: list[str], parsed: SecurityOpts) -> None:
    assert parse_security_opts(opts) == parsed


@pytest.mark.parametrize(
    ("opt", "message"),
    [
        ("bogus", 'invalid --security-opt 1: "bogus"'),
        ("no-new-privileges=maybe", 'invalid --security-opt 2: "no-new-privileges=maybe"'),
        ("seccomp=", 'invalid --security-opt 2: "seccomp="'),
        ("what=x", 'Invalid --security-opt: "what=x"'),
        ("apparmor=unconfined", "--security-opt apparmor is not supported by ctrexec"),
    ],
)
def test_errors(opt: str, message: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        parse_security_opts([opt])
    assert str(info.value) == message


DOCKER_PROFILE: dict[str, Any] = {
    "defaultAction": "SCMP_ACT_ERRNO",
    "defaultErrnoRet": 1,
    "archMap": [
        {"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86"]},
        {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"]},
    ],
    "syscalls": [
        {"names": ["read", "write"], "action": "SCMP_ACT_ALLOW", "comment": "x"},
        {"names": ["ptrace"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_PTRACE"]}},
        {"names": ["clone"], "action": "SCMP_ACT_ALLOW", "excludes": {"caps": ["CAP_SYS_ADMIN"]}},
        {"names": ["arch_prctl"], "action": "SCMP_ACT_ALLOW", "includes": {"arches": ["amd64"]}},
        {"name": "mkdir", "action": "SCMP_ACT_ERRNO", "errnoRet": 13},
    ],
}


def test_docker_profile_becomes_oci_for_machine_and_caps() -> None:
    out = oci_profile(DOCKER_PROFILE, ["CAP_SYS_ADMIN"], machine="x86_64")
    assert out["architectures"] == ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86"]
    assert out["defaultErrnoRet"] == 1
    assert [r["names"] for r in out["syscalls"]] == [["read", "write"], ["arch_prctl"], ["mkdir"]]
    assert out["syscalls"][-1] == {"names": ["mkdir"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13}
    arm = oci_profile(DOCKER_PROFILE, ["CAP_SYS_PTRACE"], machine="aarch64")
    assert arm["architectures"] == ["SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"]
    assert [r["names"][0] for r in arm["syscalls"]] == ["read", "ptrace", "clone", "mkdir"]


def test_profile_errors() -> None:
    with pytest.raises(InvalidArgument, match="use either 'architectures' or 'archMap'"):
        oci_profile({**DOCKER_PROFILE, "architectures": ["SCMP_ARCH_X86_64"]}, [])
    with pytest.raises(InvalidArgument, match="invalid defaultAction"):
        with_seccomp_profile({"defaultAction": "ALLOW"})


def test_with_seccomp_profile_uses_the_specs_caps() -> None:
    spec = build_spec(with_seccomp_profile(DOCKER_PROFILE))
    names = [r["names"][0] for r in spec["linux"]["seccomp"]["syscalls"]]
    assert "ptrace" not in names and "clone" in names  # docker's default caps
